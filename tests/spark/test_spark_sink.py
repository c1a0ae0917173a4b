"""The ``samsa`` sink: DataFrames written with Samsa's producer, read back with librdkafka."""

from __future__ import annotations

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import functions as F

from spark_helpers import create_topic, produce, read_topic, run_available_now, source


def test_batch_write_round_trip_with_every_column(spark, broker, admin):
    topic = create_topic(admin, "written", 3)
    rows = [(f"k{i}", b"v%d" % i, i % 3, [("n", b"%d" % i)]) for i in range(90)]
    df = spark.createDataFrame(rows, "key string, value binary, partition int, "
                                     "headers array<struct<key:string,value:binary>>").withColumn("topic", F.lit(topic))
    df.write.format("samsa").option("kafka.bootstrap.servers", broker.bootstrap_servers).mode("append").save()
    got = read_topic(broker.bootstrap_servers, topic, partitions=3)
    assert sorted((m.key(), m.value(), m.partition(), m.headers()) for m in got) == sorted(
        (k.encode(), v, p, [(hk, hv) for hk, hv in h]) for k, v, p, h in rows)
    for p in range(3):  # per partition, in the order of the DataFrame's rows
        offsets = [m.offset() for m in got if m.partition() == p]
        assert sorted(offsets) == list(range(30))


def test_topic_option_and_string_values(spark, broker, admin):
    topic = create_topic(admin, "by-option", 1)
    df = spark.createDataFrame([("a",), ("b",), (None,)], "value string").withColumn("topic", F.lit("ignored"))
    df.write.format("samsa").option("kafka.bootstrap.servers", broker.bootstrap_servers).option("topic", topic) \
        .mode("append").save()
    assert sorted((m.value() or b"") for m in read_topic(broker.bootstrap_servers, topic)) == [b"", b"a", b"b"]
    assert "ignored" not in admin.list_topics()


def test_streaming_write_from_one_topic_to_another(spark, broker, admin, tmp_path):
    src = create_topic(admin, "words", 2)
    dst = create_topic(admin, "shouted", 2)
    produce(broker.bootstrap_servers, src, ({"value": b"word%d" % i, "key": b"%d" % i, "partition": i % 2}
                                            for i in range(200)))
    upper = source(spark, broker.bootstrap_servers, subscribe=src, startingOffsets="earliest") \
        .select("key", F.upper(F.col("value").cast("string")).alias("value"))
    q = (upper.writeStream.format("samsa").option("kafka.bootstrap.servers", broker.bootstrap_servers)
         .option("topic", dst).option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
    q.awaitTermination()
    got = read_topic(broker.bootstrap_servers, dst, partitions=2)
    assert sorted((m.key(), m.value()) for m in got) == sorted((b"%d" % i, b"WORD%d" % i) for i in range(200))
    # Keys were partitioned by Samsa's producer (murmur2, as Java's): the same key, the same partition.
    by_key = {}
    for m in got:
        assert by_key.setdefault(m.key(), m.partition()) == m.partition()


def test_input_spark_would_reject_is_rejected(spark, broker, tmp_path):
    bs = broker.bootstrap_servers
    no_value = spark.createDataFrame([("a",)], "key string")
    with pytest.raises(PySparkException, match="Required attribute 'value' not found"):
        no_value.write.format("samsa").option("kafka.bootstrap.servers", bs).option("topic", "x").mode("append").save()
    no_topic = spark.createDataFrame([("a",)], "value string")
    with pytest.raises(PySparkException, match="topic option required when no 'topic' attribute is present"):
        no_topic.write.format("samsa").option("kafka.bootstrap.servers", bs).mode("append").save()
    bad_value = spark.createDataFrame([(1,)], "value int")
    with pytest.raises(PySparkException, match="value attribute type must be a string or binary"):
        bad_value.write.format("samsa").option("kafka.bootstrap.servers", bs).option("topic", "x").mode("append").save()
    with pytest.raises(PySparkException, match="Kafka option 'key.serializer' is not supported"):
        no_topic.write.format("samsa").option("kafka.bootstrap.servers", bs).option("topic", "x") \
            .option("kafka.key.serializer", "x").mode("append").save()


def test_a_record_that_cannot_be_written_fails_the_micro_batch(spark, broker, admin, tmp_path):
    src = create_topic(admin, "to-nowhere", 1)
    dst = create_topic(admin, "one-partition", 1)
    produce(broker.bootstrap_servers, src, ({"value": b"%d" % i} for i in range(5)))
    wrong = source(spark, broker.bootstrap_servers, subscribe=src, startingOffsets="earliest") \
        .select("value", F.lit(7).alias("partition"))
    q = (wrong.writeStream.format("samsa").option("kafka.bootstrap.servers", broker.bootstrap_servers)
         .option("topic", dst).option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
    with pytest.raises(PySparkException, match="Partition 7 of topic one-partition"):
        q.awaitTermination(120)
    assert q.lastProgress is None or q.lastProgress["batchId"] == 0
    # The failed micro-batch was not committed: a query from the same checkpoint reads it again.
    again: list = []
    run_available_now(source(spark, broker.bootstrap_servers, subscribe=src, startingOffsets="earliest"),
                      str(tmp_path / "cp"), lambda df, _id: again.extend(r.value for r in df.collect()))
    assert sorted(again) == [b"%d" % i for i in range(5)]
