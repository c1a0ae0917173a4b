// A Kafka Streams 4.x application for tests/streams/test_kafka_streams.py: a windowed aggregation with
// suppression and a stream-table join. Arguments: bootstrap application.id prefix state.dir
//   <prefix>-clicks (user -> page): clicks per user in 10 s tumbling windows (grace 0), suppressed until each
//     window closes, written once per window to <prefix>-window-counts as "user@windowStartMs" -> count (long)
//   <prefix>-orders (user -> amount) joined with the table <prefix>-users (user -> name), written to
//     <prefix>-enriched as user -> "name:amount"
// processing.guarantee=exactly_once_v2. Prints "state <NEW>" on each state change; "stop" on stdin closes it.
import java.time.Duration;
import java.util.*;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.*;
import org.apache.kafka.streams.kstream.*;

public class StreamsWindowJoin {
    public static void main(String[] args) throws Exception {
        Properties p = new Properties();
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, args[1]);
        p.put(StreamsConfig.STATE_DIR_CONFIG, args[3]);
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 200);
        p.put(StreamsConfig.consumerPrefix("auto.offset.reset"), "earliest");
        String pre = args[2];

        StreamsBuilder b = new StreamsBuilder();
        b.stream(pre + "-clicks", Consumed.with(Serdes.String(), Serdes.String()))
         .groupByKey()
         .windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofSeconds(10), Duration.ZERO))
         .count(Materialized.as("clicks-per-window"))
         .suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()))
         .toStream((w, count) -> w.key() + "@" + w.window().start())
         .to(pre + "-window-counts", Produced.with(Serdes.String(), Serdes.Long()));

        KTable<String, String> users = b.table(pre + "-users", Consumed.with(Serdes.String(), Serdes.String()),
                                               Materialized.as("users"));
        b.stream(pre + "-orders", Consumed.with(Serdes.String(), Serdes.String()))
         .join(users, (amount, name) -> name + ":" + amount)
         .to(pre + "-enriched", Produced.with(Serdes.String(), Serdes.String()));

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
