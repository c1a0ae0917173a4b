"""The ``samsa`` source on Spark local[2] against an embedded broker: batch ranges, streaming
restarts from the checkpoint, partitions added while a query runs, Kafka's options and columns."""

from __future__ import annotations

import json

import pytest
from pyspark.errors import PySparkException

from samsa.client.types import NewPartitions
from spark_helpers import create_topic, produce, run_available_now, source
from waiting import wait_until

TS = 1_700_000_000_000


def rows_of(df) -> list[tuple]:
    return sorted((r.partition, r.offset, r.key, r.value) for r in df.collect())


def test_batch_read_has_kafkas_columns_and_every_field(spark, broker, admin):
    topic = create_topic(admin, "fields", 2)
    produce(broker.bootstrap_servers, topic, (
        {"value": b"v%d" % i, "key": (b"k%d" % i) if i % 3 else None, "partition": i % 2,
         "headers": [("i", b"%d" % i), ("empty", None)], "timestamp": TS + i} for i in range(40)))
    df = source(spark, broker.bootstrap_servers, stream=False, subscribe=topic, includeHeaders="true")
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("key", "binary"), ("value", "binary"), ("topic", "string"), ("partition", "int"), ("offset", "bigint"),
        ("timestamp", "timestamp"), ("timestampType", "int"), ("headers", "array<struct<key:string,value:binary>>")]
    got = df.selectExpr("key", "value", "topic", "partition", "offset", "CAST(timestamp AS DOUBLE) * 1000 AS ts_ms",
                        "timestampType", "headers").collect()
    assert len(got) == 40
    for r in got:
        i = int(r.value[1:])
        assert (r.topic, r.partition, r.offset) == (topic, i % 2, i // 2)
        assert r.key == ((b"k%d" % i) if i % 3 else None)
        assert round(r.ts_ms) == TS + i and r.timestampType == 0
        assert [(h.key, h.value) for h in r.headers] == [("i", b"%d" % i), ("empty", None)]
    without = source(spark, broker.bootstrap_servers, stream=False, subscribe=topic)
    assert "headers" not in without.columns


def test_batch_read_between_json_offsets(spark, broker, admin):
    topic = create_topic(admin, "ranges", 3)
    produce(broker.bootstrap_servers, topic, ({"value": b"%d" % i, "partition": i % 3} for i in range(300)))
    df = source(spark, broker.bootstrap_servers, stream=False, subscribe=topic,
                startingOffsets=json.dumps({topic: {"0": 10, "1": -2, "2": 95}}),
                endingOffsets=json.dumps({topic: {"0": 20, "1": 5, "2": -1}}))
    got = [(p, o) for p, o, _, _ in rows_of(df)]
    assert got == [(0, o) for o in range(10, 20)] + [(1, o) for o in range(5)] + [(2, o) for o in range(95, 100)]
    # minPartitions splits the ranges into more Spark tasks; the rows stay the same.
    split = source(spark, broker.bootstrap_servers, stream=False, subscribe=topic, minPartitions="7")
    assert split.rdd.getNumPartitions() >= 7
    assert [(p, o) for p, o, _, _ in rows_of(split)] == [(p, o) for p in range(3) for o in range(100)]
    # assign reads only the partitions named; subscribePattern every topic it matches.
    assigned = source(spark, broker.bootstrap_servers, stream=False, assign=json.dumps({topic: [2]}))
    assert {r.partition for r in assigned.collect()} == {2}
    pattern = source(spark, broker.bootstrap_servers, stream=False, subscribePattern="ran.*")
    assert pattern.count() == 300


def test_batch_read_from_a_timestamp(spark, broker, admin):
    topic = create_topic(admin, "stamped", 1)
    produce(broker.bootstrap_servers, topic, ({"value": b"%d" % i, "timestamp": TS + 1000 * i} for i in range(20)))
    df = source(spark, broker.bootstrap_servers, stream=False, subscribe=topic, startingTimestamp=str(TS + 12_500))
    assert [o for _, o, _, _ in rows_of(df)] == list(range(13, 20))
    with pytest.raises(PySparkException, match="No offset matched the timestamp"):
        source(spark, broker.bootstrap_servers, stream=False, subscribe=topic,
               startingTimestamp=str(TS + 10**9)).collect()


def test_streaming_restart_from_checkpoint_reads_every_record_once(spark, broker, admin, tmp_path):
    topic = create_topic(admin, "restart", 3)
    produce(broker.bootstrap_servers, topic, ({"value": b"a%d" % i, "partition": i % 3} for i in range(300)))
    batches: dict[int, list] = {}

    def keep(df, batch_id):  # a replayed batch replaces its entry: the sink here is idempotent
        batches[batch_id] = rows_of(df)

    def query():
        return source(spark, broker.bootstrap_servers, subscribe=topic, startingOffsets="earliest",
                      maxOffsetsPerTrigger="70")

    checkpoint = str(tmp_path / "cp")
    run_available_now(query(), checkpoint, keep)
    assert len(batches) >= 5  # maxOffsetsPerTrigger: about 70 records a micro-batch
    assert all(len(rows) <= 72 for rows in batches.values())
    first = [r for rows in batches.values() for r in rows]
    assert sorted((p, o) for p, o, _, _ in first) == [(p, o) for p in range(3) for o in range(100)]

    # More records, then a query that runs on (no availableNow) and is stopped part-way.
    produce(broker.bootstrap_servers, topic, ({"value": b"b%d" % i, "partition": i % 3} for i in range(240)))
    q = (query().writeStream.foreachBatch(keep).option("checkpointLocation", checkpoint)
         .trigger(processingTime="100 milliseconds").start())
    wait_until(lambda: len(batches) >= 6, what="micro-batches after the restart")
    q.stop()
    # And a third run, from wherever the stopped one got to, to the end.
    run_available_now(query(), checkpoint, keep)
    every = sorted(r for rows in batches.values() for r in rows)
    assert [(p, o) for p, o, _, _ in every] == [(p, o) for p in range(3) for o in range(180)]
    values = sorted(v for _, _, _, v in every)
    assert values == sorted([b"a%d" % i for i in range(300)] + [b"b%d" % i for i in range(240)])


def test_starting_offsets_latest_skips_what_was_there(spark, broker, admin, tmp_path):
    topic = create_topic(admin, "latest", 2)
    produce(broker.bootstrap_servers, topic, ({"value": b"old", "partition": i % 2} for i in range(10)))
    seen: list = []
    q = (source(spark, broker.bootstrap_servers, subscribe=topic).writeStream
         .foreachBatch(lambda df, _id: seen.extend(rows_of(df)))
         .option("checkpointLocation", str(tmp_path / "cp")).trigger(processingTime="100 milliseconds").start())
    try:
        wait_until(lambda: q.lastProgress is not None, what="the first trigger")  # initial offsets are resolved
        produce(broker.bootstrap_servers, topic, ({"value": b"new", "partition": i % 2} for i in range(6)))
        q.processAllAvailable()
    finally:
        q.stop()
    assert sorted((p, o, v) for p, o, _, v in seen) == [(p, o, b"new") for p in range(2) for o in range(5, 8)]


def test_partitions_added_while_the_query_runs_are_read_from_their_start(spark, broker, admin, tmp_path):
    topic = create_topic(admin, "growing", 1)
    produce(broker.bootstrap_servers, topic, ({"value": b"p0-%d" % i, "partition": 0} for i in range(20)))
    seen: list = []
    q = (source(spark, broker.bootstrap_servers, subscribe=topic, startingOffsets="earliest").writeStream
         .foreachBatch(lambda df, _id: seen.extend(rows_of(df)))
         .option("checkpointLocation", str(tmp_path / "cp")).trigger(processingTime="100 milliseconds").start())
    try:
        q.processAllAvailable()
        assert len(seen) == 20
        admin.create_partitions({topic: NewPartitions(3)})
        produce(broker.bootstrap_servers, topic, ({"value": b"p%d-%d" % (p, i), "partition": p}
                                                  for p in (1, 2) for i in range(15)))
        produce(broker.bootstrap_servers, topic, ({"value": b"p0-%d" % i, "partition": 0} for i in range(20, 25)))
        wait_until(lambda: len(seen) >= 55, what="records of the new partitions")
        q.processAllAvailable()
    finally:
        q.stop()
    assert sorted((p, o) for p, o, _, _ in seen) == sorted(
        [(0, o) for o in range(25)] + [(p, o) for p in (1, 2) for o in range(15)])


def test_options_spark_rejects_are_rejected_the_same_way(spark, broker):
    bs = broker.bootstrap_servers
    cases = [
        ({"subscribe": "a", "assign": '{"a":[0]}'}, "Only one of the following options can be specified for Kafka source"),
        ({}, "One of the following options must be specified for Kafka source"),
        ({"subscribe": " , "}, "No topics to subscribe to"),
        ({"assign": "a"}, "No topicpartitions to assign"),
        ({"subscribe": "a", "kafka.auto.offset.reset": "earliest"}, "Kafka option 'auto.offset.reset' is not supported"),
        ({"subscribe": "a", "kafka.value.deserializer": "x"}, "Kafka option 'value.deserializer' is not supported"),
        ({"subscribe": "a", "kafka.enable.auto.commit": "true"}, "Kafka option 'enable.auto.commit' is not supported"),
        ({"subscribe": "a", "minPartitions": "0"}, "minPartitions must be positive"),
        ({"subscribe": "a", "startingTimestamp": "soon"}, "Expected a single long value, got soon"),
        ({"subscribe": "a", "kafka.security.protocol": "TLS"}, "Invalid Kafka security option: security.protocol=TLS"),
        ({"subscribe": "a", "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "GSSAPI"},
         "sasl.mechanism=GSSAPI is not supported"),
    ]
    for options, message in cases:
        with pytest.raises(PySparkException, match=message):
            source(spark, bs, stream=False, **options)
    with pytest.raises(PySparkException, match="must be specified for configuring Kafka consumer"):
        spark.read.format("samsa").option("subscribe", "a").load()
    with pytest.raises(PySparkException, match="starting offset can't be latest for batch queries"):
        source(spark, bs, stream=False, subscribe="a", startingOffsets="latest").collect()
    with pytest.raises(PySparkException, match="ending offset can't be earliest for batch queries"):
        source(spark, bs, stream=False, subscribe="a", endingOffsets="earliest").collect()
    with pytest.raises(PySparkException, match="fixed schema"):
        spark.read.format("samsa").schema("value string").option("kafka.bootstrap.servers", bs) \
            .option("subscribe", "a").load().collect()
    q = source(spark, bs, subscribe="a", endingOffsets="latest").writeStream.format("noop").start()
    with pytest.raises(PySparkException, match="ending offset not valid in streaming queries"):
        q.awaitTermination(120)


def test_an_unreachable_broker_fails_the_query_naming_it(spark, tmp_path):
    with pytest.raises(PySparkException, match=r"Cannot reach Samsa at kafka.bootstrap.servers=127.0.0.1:1\b"):
        source(spark, "127.0.0.1:1", stream=False, subscribe="a", **{"kafka.request.timeout.ms": "1000"}).collect()
    q = (source(spark, "127.0.0.1:1", subscribe="a", **{"kafka.request.timeout.ms": "1000"})
         .writeStream.format("noop").option("checkpointLocation", str(tmp_path / "cp")).start())
    with pytest.raises(PySparkException, match=r"Cannot reach Samsa at kafka.bootstrap.servers=127.0.0.1:1\b"):
        q.awaitTermination(120)
