import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

public class SessionConsumer {
    public static void main(String[] a) {
        Properties p = new Properties();
        p.put("bootstrap.servers", a[0]);
        p.put("key.deserializer", StringDeserializer.class.getName());
        p.put("value.deserializer", StringDeserializer.class.getName());
        p.put("fetch.max.wait.ms", "100");
        p.put("enable.auto.commit", "false");
        int partitions = Integer.parseInt(a[2]), half = Integer.parseInt(a[3]);
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(p)) {
            List<TopicPartition> tps = new ArrayList<>();
            for (int i = 0; i < partitions; i++) tps.add(new TopicPartition(a[1], i));
            c.assign(tps);
            c.seekToBeginning(tps);
            Set<String> seen = new TreeSet<>();
            long deadline = System.currentTimeMillis() + 60000;
            boolean said = false;
            while (seen.size() < 2 * half && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) seen.add(r.value());
                if (!said && seen.size() >= half) { System.out.println("HALF"); System.out.flush(); said = true; }
            }
            System.out.println("DONE " + String.join(",", seen));
        }
    }
}
