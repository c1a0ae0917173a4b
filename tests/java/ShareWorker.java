// A KafkaShareConsumer (Java client 4.x, KIP-932) for tests/share/test_java_share_consumer.py.
// Arguments: bootstrap group topic. Explicit acknowledgement: a record whose value is "release" is
// released the first time it comes (delivery count 1) and accepted after; every other record is
// accepted. Prints one line per record, flushed: rec <partition> <offset> <value> <delivery count>;
// "committed" after each commitSync. Reads lines on stdin: "stop" closes it, then prints "closed".
import java.time.Duration;
import java.util.*;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.common.serialization.StringDeserializer;

public class ShareWorker {
    public static void main(String[] args) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", args[0]);
        p.put("group.id", args[1]);
        p.put("client.id", "java-share-worker");
        p.put("share.acknowledgement.mode", "explicit");
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
        try (KafkaShareConsumer<String, String> c = new KafkaShareConsumer<>(p)) {
            c.subscribe(List.of(args[2]));
            while (!stop.get()) {
                ConsumerRecords<String, String> records = c.poll(Duration.ofMillis(200));
                for (ConsumerRecord<String, String> r : records) {
                    short count = r.deliveryCount().orElse((short) -1);
                    System.out.println("rec " + r.partition() + " " + r.offset() + " " + r.value() + " " + count);
                    boolean release = r.value().equals("release") && count == 1;
                    c.acknowledge(r, release ? AcknowledgeType.RELEASE : AcknowledgeType.ACCEPT);
                }
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
