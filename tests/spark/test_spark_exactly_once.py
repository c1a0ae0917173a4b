"""ExactlyOnceWriter: a micro-batch run again after a crash adds only what the first run did not write."""

from __future__ import annotations

from samsa.spark.exactly_once import ExactlyOnceWriter
from spark_helpers import create_topic, produce, read_committed, run_available_now, source


def test_a_micro_batch_written_again_writes_only_the_rest(spark, broker, admin, tmp_path):
    topic = create_topic(admin, "once", 2)
    writer = ExactlyOnceWriter(broker.bootstrap_servers, topic, tmp_path / "state")
    rows = [(f"k{i % 7}", f"v{i}") for i in range(50)] + [("dup", "same")] * 3 + [(None, "keyless")] * 2
    full = spark.createDataFrame(rows, "key string, value string")
    # A first attempt at micro-batch 4 that died part-way: some rows, one of the duplicates.
    part = spark.createDataFrame(rows[:20] + [("dup", "same"), (None, "keyless")], "key string, value string")
    writer(part, 4)
    assert len(read_committed(broker.bootstrap_servers, topic, partitions=2)) == 22
    writer(full, 4)  # Spark runs micro-batch 4 again with the same rows
    got = read_committed(broker.bootstrap_servers, topic, partitions=2)
    assert sorted((m.key() or b"", m.value()) for m in got) == sorted(((k or "").encode(), v.encode()) for k, v in rows)
    # The next micro-batch is new: everything in it is written.
    writer(spark.createDataFrame([("n", "next")], "key string, value string"), 5)
    assert len(read_committed(broker.bootstrap_servers, topic, partitions=2)) == len(rows) + 1
    tags = {dict(m.headers())["samsa.spark.batch"].split(b":")[1] for m in read_committed(broker.bootstrap_servers, topic, 2)}
    assert tags == {b"4", b"5"}


def test_streaming_through_the_writer(spark, broker, admin, tmp_path):
    src = create_topic(admin, "once-in", 2)
    dst = create_topic(admin, "once-out", 2)
    produce(broker.bootstrap_servers, src, ({"value": b"%d" % i, "key": b"%d" % (i % 5), "partition": i % 2}
                                            for i in range(120)))
    writer = ExactlyOnceWriter(broker.bootstrap_servers, dst, tmp_path / "state")
    df = source(spark, broker.bootstrap_servers, subscribe=src, startingOffsets="earliest", maxOffsetsPerTrigger="50")
    run_available_now(df.select("key", "value"), str(tmp_path / "cp"), writer)
    got = read_committed(broker.bootstrap_servers, dst, partitions=2)
    assert sorted((m.key(), m.value()) for m in got) == sorted((b"%d" % (i % 5), b"%d" % i) for i in range(120))
