package samsa.spark;

import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.streaming.StatefulProcessor;
import org.apache.spark.sql.streaming.TTLConfig;
import org.apache.spark.sql.streaming.TimeMode;
import org.apache.spark.sql.streaming.TimerValues;
import org.apache.spark.sql.streaming.ValueState;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;

import scala.collection.Iterator;
import scala.jdk.javaapi.CollectionConverters;

/**
 * The payments pipeline's velocity rule in Spark's state store, as a transformWithState
 * processor: Spark's Real-Time Mode runs transformWithState (its operator allowlist has
 * TransformWithStateExec), and none of PySpark's stateful operators.
 *
 * Each transaction comes out with a column "velocity": true when its card made more than
 * {@code max} transactions in the {@code windowMs} up to it (its own included, event time).
 * The state of a card is the times of its transactions a later one's window can still reach,
 * packed as longs; a card quiet for {@code quietMs} loses its state (processing-time TTL).
 */
public final class Velocity {
    private Velocity() {}

    /** {@code txs} grouped by {@code key} (a string column) through the processor; {@code time} a long column (ms). */
    public static Dataset<Row> apply(Dataset<Row> txs, String key, String time, int max, long windowMs, long quietMs) {
        StructType in = txs.schema();
        StructType out = in.add("velocity", DataTypes.BooleanType, false);
        TimeMode mode = quietMs > 0 ? TimeMode.ProcessingTime() : TimeMode.None();
        return txs.groupBy(key).as(Encoders.STRING(), Encoders.row(in)).transformWithState(
                new Processor(in.fieldIndex(time), max, windowMs, quietMs), mode, OutputMode.Update(),
                Encoders.row(out));
    }

    /** Whether a transaction at {@code txMs} goes over: more than {@code max} of {@code times} and itself in the window. */
    static boolean over(long[] times, int n, long txMs, int max, long windowMs) {
        int count = 1;
        for (int i = 0; i < n; i++) {
            if (times[i] > txMs - windowMs && times[i] <= txMs) {
                count++;
            }
        }
        return count > max;
    }

    static final class Processor extends StatefulProcessor<String, Row, Row> {
        private static final long serialVersionUID = 1L;
        private final int timeField;
        private final int max;
        private final long windowMs;
        private final long quietMs;
        private transient ValueState<byte[]> recent;

        Processor(int timeField, int max, long windowMs, long quietMs) {
            this.timeField = timeField;
            this.max = max;
            this.windowMs = windowMs;
            this.quietMs = quietMs;
        }

        @Override
        public void init(OutputMode outputMode, TimeMode timeMode) {
            TTLConfig ttl = quietMs > 0 ? new TTLConfig(Duration.ofMillis(quietMs)) : TTLConfig.NONE();
            recent = getHandle().getValueState("recent", Encoders.BINARY(), ttl);
        }

        @Override
        public Iterator<Row> handleInputRows(String card, Iterator<Row> rows, TimerValues timers) {
            List<Row> batch = new ArrayList<>();
            while (rows.hasNext()) {
                batch.add(rows.next());
            }
            // event-time order within what came together (a card's transactions usually come one by one)
            batch.sort((a, b) -> Long.compare(a.getLong(timeField), b.getLong(timeField)));
            long[] times = unpack(recent.exists() ? recent.get() : null, batch.size());
            int n = times.length - batch.size();
            List<Row> out = new ArrayList<>(batch.size());
            for (Row row : batch) {
                long txMs = row.getLong(timeField);
                boolean velocity = over(times, n, txMs, max, windowMs);
                times[n++] = txMs;
                Object[] values = new Object[row.length() + 1];
                for (int i = 0; i < row.length(); i++) {
                    values[i] = row.get(i);
                }
                values[row.length()] = velocity;
                out.add(RowFactory.create(values));
            }
            // keep what a later transaction's window can reach: times after the card's latest less the window
            long latest = Long.MIN_VALUE;
            for (int i = 0; i < n; i++) {
                latest = Math.max(latest, times[i]);
            }
            ByteBuffer kept = ByteBuffer.allocate(8 * n);
            for (int i = 0; i < n; i++) {
                if (times[i] > latest - windowMs) {
                    kept.putLong(times[i]);
                }
            }
            byte[] packed = new byte[kept.position()];
            kept.flip();
            kept.get(packed);
            recent.update(packed);
            return CollectionConverters.asScala(out.iterator());
        }

        /** The stored times, with {@code room} free slots after them. */
        private static long[] unpack(byte[] packed, int room) {
            int n = packed == null ? 0 : packed.length / 8;
            long[] times = new long[n + room];
            ByteBuffer b = packed == null ? null : ByteBuffer.wrap(packed);
            for (int i = 0; i < n; i++) {
                times[i] = b.getLong();
            }
            return times;
        }
    }
}
