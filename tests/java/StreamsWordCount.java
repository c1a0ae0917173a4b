// A Kafka Streams 4.x word count for tests/streams/test_kafka_streams.py.
// Arguments: bootstrap application.id input output state.dir
// Splits each line into words, re-keys by word (a repartition topic), counts into a KTable store (its
// changelog topic) and writes word -> count (a long) to the output topic, processing.guarantee=exactly_once_v2.
// Prints "state <NEW>" on each state change, flushed; "stop" on stdin closes it cleanly.
import java.time.Duration;
import java.util.*;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.*;
import org.apache.kafka.streams.kstream.*;

public class StreamsWordCount {
    public static void main(String[] args) throws Exception {
        Properties p = new Properties();
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, args[1]);
        p.put(StreamsConfig.STATE_DIR_CONFIG, args[4]);
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 200);
        p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        p.put(StreamsConfig.consumerPrefix("session.timeout.ms"), 6000);
        p.put(StreamsConfig.consumerPrefix("heartbeat.interval.ms"), 500);
        p.put(StreamsConfig.consumerPrefix("auto.offset.reset"), "earliest");
        if (args.length > 5) p.put(StreamsConfig.APPLICATION_SERVER_CONFIG, args[5]);

        StreamsBuilder b = new StreamsBuilder();
        KStream<String, String> lines = b.stream(args[2], Consumed.with(Serdes.String(), Serdes.String()));
        lines.flatMapValues(v -> Arrays.asList(v.toLowerCase(Locale.ROOT).split("\\W+")))
             .filter((k, w) -> !w.isEmpty())
             .groupBy((k, w) -> w, Grouped.with("words", Serdes.String(), Serdes.String()))
             .count(Materialized.as("counts"))
             .toStream()
             .to(args[3], Produced.with(Serdes.String(), Serdes.Long()));

        KafkaStreams streams = new KafkaStreams(b.build(), p);
        streams.setStateListener((now, before) -> System.out.println("state " + now));
        streams.setUncaughtExceptionHandler(e -> {
            System.out.println("error " + e);
            e.printStackTrace(System.out);
            return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        Thread stdin = new Thread(() -> {
            Scanner in = new Scanner(System.in);
            while (in.hasNextLine()) if (in.nextLine().trim().equals("stop")) break;
            streams.close(Duration.ofSeconds(30));
            System.out.println("closed");
            System.exit(0);
        });
        stdin.setDaemon(true);
        streams.start();
        stdin.start();
        Thread.currentThread().join();
    }
}
