// File source and sink connectors for Kafka's Connect runtime, for tests/connect/test_java_connect.py: the
// FileStream connectors' job (Kafka's connect-file jar does not resolve from the Maven Central this project
// reaches). Compiled by the test with javac onto the worker's class path.
//   LineFileConnectors$Source: file, topic — each line of the file a record (value only), its source offset the
//     byte position after the line, so a restarted task goes on from the last committed position.
//   LineFileConnectors$Sink: file, topics — each record's value appended as one line, flushed at each commit.
import java.io.*;
import java.nio.charset.StandardCharsets;
import java.nio.file.*;
import java.util.*;
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.connect.connector.Task;
import org.apache.kafka.connect.data.Schema;
import org.apache.kafka.connect.sink.*;
import org.apache.kafka.connect.source.*;

public class LineFileConnectors {
    static final ConfigDef SOURCE_DEF = new ConfigDef()
        .define("file", ConfigDef.Type.STRING, ConfigDef.Importance.HIGH, "file to read")
        .define("topic", ConfigDef.Type.STRING, ConfigDef.Importance.HIGH, "topic to write");
    static final ConfigDef SINK_DEF = new ConfigDef()
        .define("file", ConfigDef.Type.STRING, ConfigDef.Importance.HIGH, "file to append to");

    public static class Source extends SourceConnector {
        Map<String, String> props;
        public String version() { return "1"; }
        public void start(Map<String, String> p) { props = p; }
        public Class<? extends Task> taskClass() { return SourceTask.class; }
        public List<Map<String, String>> taskConfigs(int max) { return List.of(props); }
        public void stop() {}
        public ConfigDef config() { return SOURCE_DEF; }
    }

    public static class SourceTask extends org.apache.kafka.connect.source.SourceTask {
        String file, topic;
        long position;
        Map<String, String> partition;
        public String version() { return "1"; }
        public void start(Map<String, String> p) {
            file = p.get("file");
            topic = p.get("topic");
            partition = Map.of("filename", file);
            Map<String, Object> off = context.offsetStorageReader().offset(partition);
            position = off == null ? 0L : ((Number) off.get("position")).longValue();
        }
        public List<SourceRecord> poll() throws InterruptedException {
            List<SourceRecord> out = new ArrayList<>();
            try (RandomAccessFile f = new RandomAccessFile(file, "r")) {
                f.seek(position);
                byte[] rest = new byte[(int) Math.min(f.length() - position, 1 << 20)];
                f.readFully(rest);
                int start = 0;
                for (int i = 0; i < rest.length && out.size() < 500; i++) {
                    if (rest[i] != '\n') continue;
                    String line = new String(rest, start, i - start, StandardCharsets.UTF_8);
                    position += i - start + 1;
                    start = i + 1;
                    out.add(new SourceRecord(partition, Map.of("position", position), topic, null,
                                             null, null, Schema.STRING_SCHEMA, line));
                }
            } catch (IOException e) {
                // not there yet
            }
            if (out.isEmpty()) Thread.sleep(100);
            return out;
        }
        public void stop() {}
    }

    public static class Sink extends SinkConnector {
        Map<String, String> props;
        public String version() { return "1"; }
        public void start(Map<String, String> p) { props = p; }
        public Class<? extends Task> taskClass() { return SinkTask.class; }
        public List<Map<String, String>> taskConfigs(int max) {
            List<Map<String, String>> out = new ArrayList<>();
            for (int i = 0; i < max; i++) out.add(props);
            return out;
        }
        public void stop() {}
        public ConfigDef config() { return SINK_DEF; }
    }

    public static class SinkTask extends org.apache.kafka.connect.sink.SinkTask {
        Writer out;
        public String version() { return "1"; }
        public void start(Map<String, String> p) {
            try {
                out = Files.newBufferedWriter(Paths.get(p.get("file")), StandardCharsets.UTF_8,
                                              StandardOpenOption.CREATE, StandardOpenOption.APPEND);
            } catch (IOException e) { throw new UncheckedIOException(e); }
        }
        public void put(Collection<SinkRecord> records) {
            try {
                for (SinkRecord r : records) out.write(r.value() + "\n");
            } catch (IOException e) { throw new UncheckedIOException(e); }
        }
        public void flush(Map<org.apache.kafka.common.TopicPartition, org.apache.kafka.clients.consumer.OffsetAndMetadata> offsets) {
            try { out.flush(); } catch (IOException e) { throw new UncheckedIOException(e); }
        }
        public void stop() {
            try { out.close(); } catch (IOException e) { throw new UncheckedIOException(e); }
        }
    }
}
