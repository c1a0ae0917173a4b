// A Kafka Streams 4.4.0 word count (a repartition by word, a KTable count store with its changelog),
// run from source by the tests (java -cp <tests/kafka/.libs> StreamsWordCount.java ...).
//
//   java StreamsWordCount.java BOOTSTRAP APPLICATION_ID INPUT OUTPUT STATE_DIR PROTOCOL [STANDBYS [GUARANTEE [THREADS]]]
//
// GUARANTEE is processing.guarantee (at_least_once, the default, or exactly_once_v2), THREADS
// num.stream.threads (1). With the streams protocol the broker decides the standby replicas (the
// group config streams.num.standby.replicas); STANDBYS is num.standby.replicas for the classic one.
// "standbys <standby task ids>" is printed as "tasks" is.
// PROTOCOL is the group.protocol ("streams": KIP-1071's streams groups; "classic"). Prints
// "state <new>" on each KafkaStreams state change and "tasks <active task ids>" whenever this
// instance's active tasks change; reads "stop" on stdin, closes, prints "closed" and exits 0.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.time.Duration;
import java.util.Arrays;
import java.util.Properties;
import java.util.TreeSet;
import java.util.stream.Collectors;

import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

public class StreamsWordCount {
    public static void main(String[] args) throws Exception {
        Properties p = new Properties();
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, args[1]);
        p.put(StreamsConfig.STATE_DIR_CONFIG, args[4]);
        p.put(StreamsConfig.GROUP_PROTOCOL_CONFIG, args[5]);
        p.put(StreamsConfig.NUM_STANDBY_REPLICAS_CONFIG, args.length > 6 ? args[6] : "0");
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, args.length > 7 ? args[7] : "at_least_once");
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, args.length > 8 ? args[8] : "1");
        p.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.String().getClass());
        p.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.String().getClass());
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, "200");
        p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, "0");
        p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, "1");
        p.put(StreamsConfig.consumerPrefix("auto.offset.reset"), "earliest");

        StreamsBuilder b = new StreamsBuilder();
        b.<String, String>stream(args[2])
            .flatMapValues(line -> Arrays.asList(line.toLowerCase().split("\\W+")))
            .filter((k, word) -> !word.isEmpty())
            .groupBy((k, word) -> word)
            .count(Materialized.as("counts"))
            .toStream()
            .to(args[3], Produced.with(Serdes.String(), Serdes.Long()));

        KafkaStreams streams = new KafkaStreams(b.build(), p);
        streams.setStateListener((now, before) -> System.out.println("state " + now));
        streams.start();
        Thread watcher = new Thread(() -> {
            String last = null;
            String lastStandby = null;
            while (true) {
                try {
                    String tasks = streams.metadataForLocalThreads().stream()
                        .flatMap(t -> t.activeTasks().stream())
                        .map(t -> t.taskId().toString())
                        .collect(Collectors.toCollection(TreeSet::new)).toString();
                    String standbys = streams.metadataForLocalThreads().stream()
                        .flatMap(t -> t.standbyTasks().stream())
                        .map(t -> t.taskId().toString())
                        .collect(Collectors.toCollection(TreeSet::new)).toString();
                    if (!standbys.equals(lastStandby)) {
                        System.out.println("standbys " + standbys);
                        lastStandby = standbys;
                    }
                    if (!tasks.equals(last)) {
                        System.out.println("tasks " + tasks);
                        last = tasks;
                    }
                    Thread.sleep(100);
                } catch (InterruptedException e) {
                    return;
                } catch (Exception e) {
                    // not running yet or any more
                }
            }
        });
        watcher.setDaemon(true);
        watcher.start();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        String line;
        while ((line = in.readLine()) != null && !line.equals("stop")) {
        }
        watcher.interrupt();
        streams.close(Duration.ofSeconds(30));
        System.out.println("closed");
        System.out.flush();
        System.exit(0);
    }
}
