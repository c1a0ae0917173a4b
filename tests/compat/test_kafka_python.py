"""kafka-python against a real Samsa broker process."""

from __future__ import annotations

import random
import time

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, NewPartitions
from kafka.codec import has_lz4, has_snappy, has_zstd
from kafka.errors import InvalidPartitionsError, TopicAlreadyExistsError, UnknownTopicOrPartitionError

from compat_helpers import BASE_TS, WAIT, consume, create_topic, wait_until, watermarks


@pytest.fixture
def kadmin(broker):
    a = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=int(WAIT * 1000))
    yield a
    a.close()


def kp_producer(bootstrap: str, **conf) -> KafkaProducer:
    conf.setdefault("linger_ms", 5)
    conf.setdefault("request_timeout_ms", int(WAIT * 1000))
    return KafkaProducer(bootstrap_servers=bootstrap, **conf)


def kp_consumer(bootstrap: str, **conf) -> KafkaConsumer:
    return KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                         fetch_max_wait_ms=100, request_timeout_ms=int(WAIT * 1000) + 5000, **conf)


def poll_n(c: KafkaConsumer, n: int, timeout: float = WAIT) -> list:
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < n:
        assert time.monotonic() < deadline, f"got {len(out)} of {n} records"
        for records in c.poll(timeout_ms=500).values():
            out.extend(records)
    return out


def kp_consume(bootstrap: str, topic: str, partition: int, n: int) -> list:
    c = kp_consumer(bootstrap)
    try:
        tp = TopicPartition(topic, partition)
        c.assign([tp])
        c.seek_to_beginning(tp)
        return poll_n(c, n)
    finally:
        c.close()


def test_codec_libraries_present():
    """kafka-python compresses with optional libraries; every codec test below needs its one
    (snappy needs python-snappy, lz4 needs lz4, zstd needs zstandard)."""
    assert has_snappy(), "python-snappy is not installed: add it to the [test] extras"
    assert has_lz4() and has_zstd()


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
def test_codec_roundtrip(broker, topic_name, codec):
    create_topic(broker.bootstrap, topic_name, partitions=2)
    rnd = random.Random(3)
    records = []
    for i in range(120):
        key = [None, b"", bytes(range(256)), b"k%d" % i][i % 4]
        value = [None, b"", b"compress me " * 800, rnd.randbytes(1500), b"v%d" % i][i % 5]
        if key is None and value is None:
            value = b"kafka-python refuses a record with neither key nor value"
        headers = [[], [("a", b"1"), ("a", b"2")], [("empty", b"")], [("ключ", "знач".encode())]][i % 4]
        records.append((key, value, headers, BASE_TS + 11 * i))
    p = kp_producer(broker.bootstrap, compression_type=codec, batch_size=32768)
    futures = [p.send(topic_name, key=k, value=v, headers=h, timestamp_ms=ts, partition=i % 2)
               for i, (k, v, h, ts) in enumerate(records)]
    p.flush(WAIT)
    metas = [f.get(WAIT) for f in futures]
    p.close()
    for part in (0, 1):
        expected = records[part::2]
        assert sorted(m.offset for m in metas if m.partition == part) == list(range(len(expected)))
        got = kp_consume(broker.bootstrap, topic_name, part, len(expected))
        assert [r.offset for r in got] == list(range(len(expected)))
        for r, (k, v, h, ts) in zip(got, expected):
            assert (r.key, r.value, list(r.headers), r.timestamp, r.timestamp_type) == (k, v, h, ts, 0)
        # the same bytes as another client reads them
        other = consume(broker.bootstrap, topic_name, part)
        assert [(r.key, r.value) for r in other] == [(k, v) for k, v, _, _ in expected]


@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_acks(broker, topic_name, acks):
    create_topic(broker.bootstrap, topic_name)
    values = [b"acks-%s-%d" % (str(acks).encode(), i) for i in range(200)]
    p = kp_producer(broker.bootstrap, acks=acks)
    futures = [p.send(topic_name, value=v, partition=0) for v in values]
    p.flush(WAIT)
    metas = [f.get(WAIT) for f in futures]
    p.close()
    if acks != 0:
        assert [m.offset for m in metas] == list(range(len(values)))
    wait_until(lambda: watermarks(broker.bootstrap, topic_name)[1] == len(values), what="all records")
    assert [r.value for r in kp_consume(broker.bootstrap, topic_name, 0, len(values))] == values


def test_idempotent_producer(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=2)
    n = 1000
    p = kp_producer(broker.bootstrap, enable_idempotence=True, acks="all", batch_size=512,
                    max_in_flight_requests_per_connection=5)
    futures = [p.send(topic_name, value=b"%05d" % i, partition=i % 2) for i in range(n)]
    p.flush(WAIT)
    metas = [f.get(WAIT) for f in futures]
    p.close()
    for part in (0, 1):
        want = [b"%05d" % i for i in range(part, n, 2)]
        got = kp_consume(broker.bootstrap, topic_name, part, len(want))
        assert [r.value for r in got] == want
        assert [m.offset for m in metas[part::2]] == list(range(len(want)))


def test_consumer_seek(broker, topic_name):
    create_topic(broker.bootstrap, topic_name)
    p = kp_producer(broker.bootstrap)
    for i in range(10):
        p.send(topic_name, value=b"s%d" % i, partition=0)
    p.flush(WAIT)
    tp = TopicPartition(topic_name, 0)
    c = kp_consumer(broker.bootstrap)
    try:
        c.assign([tp])
        c.seek(tp, 6)
        assert [r.offset for r in poll_n(c, 4)] == [6, 7, 8, 9]
        c.seek_to_beginning(tp)
        assert c.position(tp) == 0
        assert [r.value for r in poll_n(c, 10)] == [b"s%d" % i for i in range(10)]
        c.seek_to_end(tp)
        assert c.position(tp) == 10          # the end is resolved here, before anything new arrives
        for i in range(10, 13):
            p.send(topic_name, value=b"s%d" % i, partition=0)
        p.flush(WAIT)
        assert [(r.offset, r.value) for r in poll_n(c, 3)] == [(i, b"s%d" % i) for i in range(10, 13)]
        assert c.beginning_offsets([tp]) == {tp: 0}
        assert c.end_offsets([tp]) == {tp: 13}
    finally:
        c.close()
        p.close()


def test_offsets_for_times(broker, topic_name):
    create_topic(broker.bootstrap, topic_name)
    p = kp_producer(broker.bootstrap)
    for i in range(20):
        p.send(topic_name, value=b"t%d" % i, partition=0, timestamp_ms=BASE_TS + 1000 * i)
    p.flush(WAIT)
    p.close()
    tp = TopicPartition(topic_name, 0)
    c = kp_consumer(broker.bootstrap)
    try:
        found = c.offsets_for_times({tp: BASE_TS + 7000})[tp]
        assert (found.offset, found.timestamp) == (7, BASE_TS + 7000)
        found = c.offsets_for_times({tp: BASE_TS + 7001})[tp]
        assert (found.offset, found.timestamp) == (8, BASE_TS + 8000)
        found = c.offsets_for_times({tp: 0})[tp]
        assert (found.offset, found.timestamp) == (0, BASE_TS)
        c.assign([tp])
        c.seek(tp, c.offsets_for_times({tp: BASE_TS + 15500})[tp].offset)
        assert [r.value for r in poll_n(c, 4)] == [b"t%d" % i for i in range(16, 20)]
    finally:
        c.close()


def test_offsets_for_times_after_the_last_record(broker, topic_name):
    """Kafka answers offset -1 for a timestamp past every record, and kafka-python maps that
    to None (as the Java consumer's offsetsForTimes does)."""
    create_topic(broker.bootstrap, topic_name)
    p = kp_producer(broker.bootstrap)
    p.send(topic_name, value=b"only", partition=0, timestamp_ms=BASE_TS)
    p.flush(WAIT)
    p.close()
    tp = TopicPartition(topic_name, 0)
    c = kp_consumer(broker.bootstrap)
    try:
        assert c.offsets_for_times({tp: BASE_TS + 1})[tp] is None
    finally:
        c.close()


def test_admin_topics(broker, topic_name, kadmin):
    names = [topic_name + "-a", topic_name + "-b"]
    kadmin.create_topics({names[0]: {"num_partitions": 3, "replication_factor": 1,
                                     "configs": {"retention.ms": "123456"}},
                          names[1]: {"num_partitions": 1, "replication_factor": 1}})
    assert set(names) <= set(kadmin.list_topics())
    described = {t["name"]: t for t in kadmin.describe_topics(names)}
    assert [p["partition_index"] for p in sorted(described[names[0]]["partitions"],
                                                 key=lambda p: p["partition_index"])] == [0, 1, 2]
    assert all(p["leader_id"] == 0 and p["replica_nodes"] == [0] for p in described[names[0]]["partitions"])

    configs = kadmin.describe_configs([ConfigResource("TOPIC", names[0])])
    assert configs["topic"][names[0]]["retention.ms"]["value"] == "123456"
    assert configs["topic"][names[0]]["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    everything = kadmin.describe_configs([ConfigResource("TOPIC", names[1])], config_filter="all")
    assert everything["topic"][names[1]]["cleanup.policy"]["value"] == "delete"

    with pytest.raises(TopicAlreadyExistsError):
        kadmin.create_topics({names[1]: {"num_partitions": 1, "replication_factor": 1}})

    kadmin.create_partitions({names[1]: NewPartitions(total_count=2)})
    assert len(kadmin.describe_topics([names[1]])[0]["partitions"]) == 2
    with pytest.raises(InvalidPartitionsError):
        kadmin.create_partitions({names[1]: NewPartitions(total_count=1)})

    kadmin.delete_topics(names)
    wait_until(lambda: not set(names) & set(kadmin.list_topics()), what="topics gone")
    with pytest.raises(UnknownTopicOrPartitionError):
        kadmin.delete_topics([names[0]])


def test_admin_delete_records_and_cluster(broker, topic_name, kadmin):
    create_topic(broker.bootstrap, topic_name)
    p = kp_producer(broker.bootstrap)
    for i in range(10):
        p.send(topic_name, value=b"d%d" % i, partition=0)
    p.flush(WAIT)
    p.close()
    tp = TopicPartition(topic_name, 0)
    kadmin.delete_records({tp: 4})
    c = kp_consumer(broker.bootstrap)
    try:
        assert c.beginning_offsets([tp]) == {tp: 4}
        c.assign([tp])
        c.seek_to_beginning(tp)
        assert [r.offset for r in poll_n(c, 6)] == list(range(4, 10))
    finally:
        c.close()
    (dirs,) = kadmin.describe_log_dirs([topic_name])
    assert dirs["broker"] == 0
    (log_dir,) = dirs["log_dirs"]
    assert log_dir["error_code"] == 0 and log_dir["log_dir"] == str(broker.data_dir / "logs")
    (topic,) = log_dir["topics"]
    assert topic["name"] == topic_name
    assert [p["partition_index"] for p in topic["partitions"]] == [0]
    assert topic["partitions"][0]["partition_size"] > 0
    cluster = kadmin.describe_cluster()
    assert cluster["cluster_id"]
    assert [b["broker_id"] for b in cluster["brokers"]] == [0]
    assert cluster["controller_id"] == 0
