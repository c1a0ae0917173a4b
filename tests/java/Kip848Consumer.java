// A KafkaConsumer (Java client 4.x) with group.protocol=consumer, for tests/groups/test_java_consumer_protocol.py.
// Arguments: bootstrap group topic. Prints one line per event, flushed:
//   assigned <p,p,...> | revoked <p,...> | lost <p,...> | rec <partition> <offset> <value> | committed | closed
// Commits synchronously after each poll that returned records; reads lines on stdin: "stop" closes it.
import java.time.Duration;
import java.util.*;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.stream.Collectors;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

public class Kip848Consumer {
    static String parts(Collection<TopicPartition> tps) {
        return tps.stream().map(tp -> Integer.toString(tp.partition())).sorted().collect(Collectors.joining(","));
    }

    public static void main(String[] args) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", args[0]);
        p.put("group.id", args[1]);
        p.put("group.protocol", "consumer");
        p.put("auto.offset.reset", "earliest");
        p.put("enable.auto.commit", "false");
        p.put("client.id", "java-kip848");
        p.put("key.deserializer", StringDeserializer.class.getName());
        p.put("value.deserializer", StringDeserializer.class.getName());
        AtomicBoolean stop = new AtomicBoolean();
        Thread stdin = new Thread(() -> {
            Scanner in = new Scanner(System.in);
            while (in.hasNextLine()) if (in.nextLine().trim().equals("stop")) break;
            stop.set(true);
        });
        stdin.setDaemon(true);
        stdin.start();
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(p)) {
            c.subscribe(List.of(args[2]), new ConsumerRebalanceListener() {
                public void onPartitionsRevoked(Collection<TopicPartition> tps) { System.out.println("revoked " + parts(tps)); }
                public void onPartitionsAssigned(Collection<TopicPartition> tps) { System.out.println("assigned " + parts(tps)); }
                public void onPartitionsLost(Collection<TopicPartition> tps) { System.out.println("lost " + parts(tps)); }
            });
            while (!stop.get()) {
                ConsumerRecords<String, String> records = c.poll(Duration.ofMillis(100));
                for (ConsumerRecord<String, String> r : records) System.out.println("rec " + r.partition() + " " + r.offset() + " " + r.value());
                if (!records.isEmpty()) {
                    c.commitSync();
                    System.out.println("committed");
                }
                System.out.flush();
            }
        }
        System.out.println("closed");
        System.out.flush();
    }
}
