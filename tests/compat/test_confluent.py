"""confluent-kafka (librdkafka) against a real Samsa broker process."""

from __future__ import annotations

import os
import random
import time

import pytest
from confluent_kafka import (OFFSET_BEGINNING, OFFSET_END, TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME,
                             KafkaError, KafkaException, TopicPartition)
from confluent_kafka.admin import (AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, NewPartitions,
                                   NewTopic)

from compat_helpers import (BASE_TS, WAIT, BrokerProcess, admin, consume, consumer, create_topic, produce_values,
                            producer, raw_call, start, wait_until, watermarks)


def sample_records(n: int, seed: int = 7) -> list[tuple]:
    """(key, value, headers, timestamp) covering the awkward cases: null/empty keys and values,
    binary, large compressible and incompressible values, repeated/null/empty/unicode headers."""
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        key = [None, b"", bytes(range(256)), f"key-{i}".encode()][i % 4]
        value = [None, b"", (b"compressible " * 1500) + str(i).encode(), rnd.randbytes(2000),
                 f"value-{i}".encode()][i % 5]
        headers = [[], [("a", b"1"), ("a", b"2")], [("empty", b""), ("null", None)],
                   [("ключ", "значение".encode()), ("bin", bytes(range(256)))]][i % 4]
        out.append((key, value, headers, BASE_TS + i * 7))
    return out


def norm_headers(headers) -> tuple:
    return tuple(headers or ())


# ------------------------------------------------------------------ produce / consume


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_codec_roundtrip_is_byte_identical(broker, topic_name, codec):
    create_topic(broker.bootstrap, topic_name, partitions=2)
    records = sample_records(200)
    p = producer(broker.bootstrap, **{"compression.type": codec, "linger.ms": 20, "batch.num.messages": 50})
    acked: dict[int, list] = {0: [], 1: []}
    failures = []

    def dr(err, msg):
        if err is not None:
            failures.append(err)
        else:
            acked[msg.partition()].append((msg.offset(), msg.key(), msg.value()))

    for i, (k, v, h, ts) in enumerate(records):
        p.produce(topic_name, key=k, value=v, headers=h, timestamp=ts, partition=i % 2, on_delivery=dr)
    assert p.flush(WAIT) == 0
    assert not failures, failures

    for part in (0, 1):
        expected = records[part::2]
        got = consume(broker.bootstrap, topic_name, part)
        assert [r.offset for r in got] == list(range(len(expected)))
        for r, (k, v, h, ts) in zip(got, expected):
            assert (r.key, r.value) == (k, v)
            assert norm_headers(r.headers) == norm_headers(h)
            assert (r.timestamp_type, r.timestamp) == (TIMESTAMP_CREATE_TIME, ts)
        # what the delivery reports said is what is in the log
        assert sorted(acked[part]) == [(r.offset, r.key, r.value) for r in got]


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_acks(broker, topic_name, acks):
    create_topic(broker.bootstrap, topic_name)
    values = [f"acks-{acks}-{i}".encode() for i in range(300)]
    produce_values(broker.bootstrap, topic_name, values, acks=acks, linger_ms=2)
    # acks=0 gets no answer: wait (bounded) until the broker has all of them
    wait_until(lambda: watermarks(broker.bootstrap, topic_name)[1] == len(values), what="high watermark")
    got = consume(broker.bootstrap, topic_name)
    assert [r.value for r in got] == values
    assert [r.offset for r in got] == list(range(len(values)))


def test_idempotent_producer_many_in_flight_exactly_once_in_order(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=3)
    n = 3000
    p = producer(broker.bootstrap, **{"enable.idempotence": True, "acks": "all",
                                      "max.in.flight.requests.per.connection": 5,
                                      "batch.num.messages": 20, "linger.ms": 0,
                                      "queue.buffering.max.messages": 100000})
    acked: dict[bytes, tuple[int, int]] = {}
    failures = []

    def dr(err, msg):
        if err is not None:
            failures.append(err)
        else:
            acked[msg.value()] = (msg.partition(), msg.offset())

    for i in range(n):
        p.produce(topic_name, value=b"%06d" % i, partition=i % 3, on_delivery=dr)
        if i % 500 == 0:
            p.poll(0)
    assert p.flush(WAIT * 2) == 0
    assert not failures, failures
    assert len(acked) == n
    for part in range(3):
        got = consume(broker.bootstrap, topic_name, part)
        values = [r.value for r in got]
        assert values == [b"%06d" % i for i in range(part, n, 3)], "duplicates, gaps or reordering"
        assert [r.offset for r in got] == list(range(len(got)))
        assert all(acked[r.value] == (part, r.offset) for r in got)


# ------------------------------------------------------------------ where a consumer starts


def _produce_timed(bootstrap, topic, n, first=0):
    p = producer(bootstrap)
    for i in range(first, first + n):
        p.produce(topic, value=b"v%d" % i, timestamp=BASE_TS + i * 1000, partition=0)
    assert p.flush(WAIT) == 0


def test_consume_from_earliest_specific_and_latest(broker, topic_name):
    create_topic(broker.bootstrap, topic_name)
    _produce_timed(broker.bootstrap, topic_name, 20)

    assert [r.value for r in consume(broker.bootstrap, topic_name, start=OFFSET_BEGINNING)] == \
        [b"v%d" % i for i in range(20)]
    assert [r.offset for r in consume(broker.bootstrap, topic_name, start=13)] == list(range(13, 20))

    # from the end: only records produced after the assignment. When librdkafka has resolved
    # "end" is not observable, so keep producing new records until the first one arrives: it
    # must be a new one, and everything after it must follow without a gap.
    c = consumer(broker.bootstrap)
    p = producer(broker.bootstrap, linger_ms=0)
    try:
        c.assign([TopicPartition(topic_name, 0, OFFSET_END)])
        first = None
        for i in range(200):
            p.produce(topic_name, value=b"new%d" % i, partition=0)
            p.flush(WAIT)
            first = c.poll(0.5)
            if first is not None:
                break
        assert first is not None and not first.error()
        assert first.offset() >= 20 and first.value().startswith(b"new")
        for i in range(5):
            p.produce(topic_name, value=b"more%d" % i, partition=0)
        assert p.flush(WAIT) == 0
        _, high = c.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=WAIT, cached=False)
        got = [(first.offset(), first.value())]
        deadline = time.monotonic() + WAIT
        while got[-1][0] < high - 1 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None:
                assert not m.error(), m.error()
                got.append((m.offset(), m.value()))
        assert [o for o, _ in got] == list(range(first.offset(), high))
        assert [v for _, v in got[-5:]] == [b"more%d" % i for i in range(5)]
        assert all(not v.startswith(b"v") for _, v in got)
    finally:
        c.close()


def test_offsets_for_times(broker, topic_name):
    create_topic(broker.bootstrap, topic_name)
    _produce_timed(broker.bootstrap, topic_name, 30)
    c = consumer(broker.bootstrap)
    try:
        def lookup(ts):
            (tp,) = c.offsets_for_times([TopicPartition(topic_name, 0, ts)], timeout=WAIT)
            assert tp.error is None
            return tp.offset
        assert lookup(0) == 0
        assert lookup(BASE_TS) == 0
        assert lookup(BASE_TS + 10_000) == 10          # exact timestamp
        assert lookup(BASE_TS + 10_001) == 11          # first record at or after
        assert lookup(BASE_TS + 29_000) == 29
        # consume from the looked-up offset
        c.assign([TopicPartition(topic_name, 0, lookup(BASE_TS + 25_500))])
        m = wait_until(lambda: c.poll(0.5), what="a record")
        assert (m.offset(), m.value(), m.timestamp()) == (26, b"v26", (TIMESTAMP_CREATE_TIME, BASE_TS + 26_000))
    finally:
        c.close()


def test_offsets_for_times_after_the_last_record(broker, topic_name):
    """Kafka answers ListOffsets for a timestamp later than every record with offset -1 and
    timestamp -1 (UnifiedLog.fetchOffsetByTimestamp finds nothing -> UNKNOWN_OFFSET)."""
    create_topic(broker.bootstrap, topic_name)
    _produce_timed(broker.bootstrap, topic_name, 5)
    c = consumer(broker.bootstrap)
    try:
        (tp,) = c.offsets_for_times([TopicPartition(topic_name, 0, BASE_TS + 10_000_000)], timeout=WAIT)
        assert tp.error is None
        assert tp.offset == -1, f"Kafka answers -1 here, Samsa answered {tp.offset} (the log end)"
    finally:
        c.close()


def test_get_watermark_offsets(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=2)
    assert watermarks(broker.bootstrap, topic_name, 0) == (0, 0)
    produce_values(broker.bootstrap, topic_name, [b"x"] * 7, partition=1)
    assert watermarks(broker.bootstrap, topic_name, 0) == (0, 0)
    assert watermarks(broker.bootstrap, topic_name, 1) == (0, 7)


# ------------------------------------------------------------------ admin


def test_admin_create_list_delete_topics(broker, topic_name):
    a = admin(broker.bootstrap)
    names = [f"{topic_name}-{i}" for i in range(3)]
    fs = a.create_topics([NewTopic(n, i + 1, 1) for i, n in enumerate(names)], operation_timeout=WAIT)
    for f in fs.values():
        f.result(WAIT)
    md = a.list_topics(timeout=WAIT)
    for i, n in enumerate(names):
        assert n in md.topics
        assert sorted(md.topics[n].partitions) == list(range(i + 1))
        assert md.topics[n].partitions[0].leader == 0
        assert md.topics[n].partitions[0].replicas == [0]

    # already exists
    with pytest.raises(KafkaException) as e:
        a.create_topics([NewTopic(names[0], 1, 1)])[names[0]].result(WAIT)
    assert e.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS

    # validate_only creates nothing
    a.create_topics([NewTopic(topic_name + "-v", 1, 1)], validate_only=True)[topic_name + "-v"].result(WAIT)
    assert topic_name + "-v" not in a.list_topics(timeout=WAIT).topics

    fs = a.delete_topics(names[:2], operation_timeout=WAIT)
    for f in fs.values():
        f.result(WAIT)
    topics = a.list_topics(timeout=WAIT).topics
    assert names[0] not in topics and names[1] not in topics and names[2] in topics

    with pytest.raises(KafkaException) as e:
        a.delete_topics([names[0]])[names[0]].result(WAIT)
    assert e.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART

    # a deleted topic's name can be used again, and starts empty
    produce_values(broker.bootstrap, names[2], [b"old"] * 3)
    a.delete_topics([names[2]])[names[2]].result(WAIT)
    create_topic(broker.bootstrap, names[2])
    assert watermarks(broker.bootstrap, names[2]) == (0, 0)
    produce_values(broker.bootstrap, names[2], [b"new"])
    assert [r.value for r in consume(broker.bootstrap, names[2])] == [b"new"]


def test_admin_create_partitions(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=1)
    a = admin(broker.bootstrap)
    a.create_partitions([NewPartitions(topic_name, 4)])[topic_name].result(WAIT)
    assert sorted(a.list_topics(topic_name, timeout=WAIT).topics[topic_name].partitions) == [0, 1, 2, 3]
    produce_values(broker.bootstrap, topic_name, [b"in-3"], partition=3)
    assert [r.value for r in consume(broker.bootstrap, topic_name, 3)] == [b"in-3"]
    with pytest.raises(KafkaException) as e:
        a.create_partitions([NewPartitions(topic_name, 2)])[topic_name].result(WAIT)
    assert e.value.args[0].code() == KafkaError.INVALID_PARTITIONS


def _describe_topic(a, topic) -> dict:
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    return a.describe_configs([res])[res].result(WAIT)


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
def test_admin_describe_and_alter_configs(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, config={"retention.ms": "3600000", "max.message.bytes": "200000"})
    a = admin(broker.bootstrap)
    entries = _describe_topic(a, topic_name)
    assert entries["retention.ms"].value == "3600000"
    assert entries["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert entries["max.message.bytes"].value == "200000"
    assert entries["cleanup.policy"].value == "delete"
    assert entries["cleanup.policy"].source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert entries["segment.bytes"].value == "1073741824"

    # AlterConfigs replaces the whole set of overrides
    res = ConfigResource(ConfigResource.Type.TOPIC, topic_name, set_config={"segment.bytes": "1048576"})
    a.alter_configs([res])[res].result(WAIT)
    entries = _describe_topic(a, topic_name)
    assert entries["segment.bytes"].value == "1048576"
    assert entries["segment.bytes"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert entries["retention.ms"].value == "604800000"   # back to the broker default
    assert entries["retention.ms"].source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value

    # IncrementalAlterConfigs: SET one, DELETE another, leave the rest
    res = ConfigResource(ConfigResource.Type.TOPIC, topic_name, incremental_configs=[
        ConfigEntry("retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("segment.bytes", None, incremental_operation=AlterConfigOpType.DELETE),
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
    ])
    a.incremental_alter_configs([res])[res].result(WAIT)
    entries = _describe_topic(a, topic_name)
    assert entries["retention.ms"].value == "7200000"
    assert entries["segment.bytes"].value == "1073741824"
    assert set(entries["cleanup.policy"].value.split(",")) == {"delete", "compact"}

    # an invalid value is refused, and changes nothing
    bad = ConfigResource(ConfigResource.Type.TOPIC, topic_name, set_config={"retention.ms": "not-a-number"})
    with pytest.raises(KafkaException) as e:
        a.alter_configs([bad])[bad].result(WAIT)
    assert e.value.args[0].code() == KafkaError.INVALID_CONFIG
    assert _describe_topic(a, topic_name)["retention.ms"].value == "7200000"

    # the broker's own configs
    bres = ConfigResource(ConfigResource.Type.BROKER, "0")
    bentries = a.describe_configs([bres])[bres].result(WAIT)
    assert bentries["num.partitions"].value == "1"
    assert bentries["log.dirs"].value == str(broker.data_dir / "logs")


def test_describe_configs_unknown_topic(broker, topic_name):
    a = admin(broker.bootstrap)
    with pytest.raises(KafkaException) as e:
        _describe_topic(a, topic_name + "-nope")
    assert e.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_max_message_bytes_override_is_enforced(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, config={"max.message.bytes": "2000"})
    p = producer(broker.bootstrap, **{"compression.type": "none", "linger.ms": 0})
    results = []
    p.produce(topic_name, value=b"x" * 100, partition=0, on_delivery=lambda e, m: results.append(e))
    p.flush(WAIT)
    p.produce(topic_name, value=os.urandom(5000), partition=0, on_delivery=lambda e, m: results.append(e))
    p.flush(WAIT)
    assert results[0] is None
    assert results[1] is not None and results[1].code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert [r.value for r in consume(broker.bootstrap, topic_name)] == [b"x" * 100]


def test_describe_cluster(broker):
    a = admin(broker.bootstrap)
    desc = a.describe_cluster(request_timeout=WAIT).result(WAIT)
    assert desc.cluster_id
    assert [n.id for n in desc.nodes] == [0]
    assert (desc.nodes[0].host, desc.nodes[0].port) == ("127.0.0.1", broker.port)
    assert desc.controller.id == 0
    assert a.list_topics(timeout=WAIT).cluster_id == desc.cluster_id


def test_delete_records_moves_low_watermark(broker, topic_name):
    create_topic(broker.bootstrap, topic_name)
    produce_values(broker.bootstrap, topic_name, [b"r%d" % i for i in range(20)])
    a = admin(broker.bootstrap)
    (res,) = a.delete_records([TopicPartition(topic_name, 0, 12)], request_timeout=WAIT).values()
    deleted = res.result(WAIT)
    assert deleted.low_watermark == 12
    assert watermarks(broker.bootstrap, topic_name) == (12, 20)
    got = consume(broker.bootstrap, topic_name, start=OFFSET_BEGINNING)
    assert [(r.offset, r.value) for r in got] == [(i, b"r%d" % i) for i in range(12, 20)]
    # a position below the low watermark is out of range: auto.offset.reset=earliest lands on 12
    got = consume(broker.bootstrap, topic_name, start=3, auto_offset_reset="earliest")
    assert got[0].offset == 12
    # ListOffsets earliest agrees
    c = consumer(broker.bootstrap)
    try:
        (tp,) = c.offsets_for_times([TopicPartition(topic_name, 0, 0)], timeout=WAIT)
        assert tp.offset == 12
    finally:
        c.close()
    # produce continues at the log end
    assert produce_values(broker.bootstrap, topic_name, [b"after"]) == [(0, 20)]


def test_log_append_time_topic(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, config={"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    p = producer(broker.bootstrap, **{"compression.type": "lz4"})
    reports = []
    for i in range(10):
        p.produce(topic_name, value=b"lat%d" % i, timestamp=1000 + i, partition=0,
                  on_delivery=lambda e, m: reports.append((e, m.timestamp())))
    assert p.flush(WAIT) == 0
    after = int(time.time() * 1000)
    assert all(e is None for e, _ in reports)
    got = consume(broker.bootstrap, topic_name)
    assert [r.value for r in got] == [b"lat%d" % i for i in range(10)]
    for r in got:
        assert r.timestamp_type == TIMESTAMP_LOG_APPEND_TIME
        assert before - 1000 <= r.timestamp <= after + 1000, "the broker's clock, not the producer's 1000+i"
    for _, (ts_type, ts) in reports:
        assert ts_type == TIMESTAMP_LOG_APPEND_TIME and before - 1000 <= ts <= after + 1000


def test_timestamp_bounds_are_enforced(broker, topic_name):
    """message.timestamp.before.max.ms / after.max.ms (KIP-937): a CreateTime record further
    from the broker's clock than allowed is refused with INVALID_TIMESTAMP (32)."""
    create_topic(broker.bootstrap, topic_name, config={"message.timestamp.before.max.ms": "3600000",
                                                       "message.timestamp.after.max.ms": "3600000"})
    now = int(time.time() * 1000)
    p = producer(broker.bootstrap, linger_ms=0)
    results = {}
    for name, ts in [("now", now), ("a day ahead", now + 86_400_000), ("a day ago", now - 86_400_000)]:
        p.produce(topic_name, value=name.encode(), timestamp=ts, partition=0,
                  on_delivery=lambda e, m, name=name: results.__setitem__(name, e))
        assert p.flush(WAIT) == 0
    assert results["now"] is None
    codes = {k: (e.code() if e is not None else None) for k, e in results.items() if k != "now"}
    assert codes == {"a day ahead": KafkaError.INVALID_TIMESTAMP, "a day ago": KafkaError.INVALID_TIMESTAMP}
    assert [r.value for r in consume(broker.bootstrap, topic_name)] == [b"now"]


def test_auto_create_on_produce_uses_num_partitions(tmp_path, topic_name):
    b = BrokerProcess(tmp_path, **{"num.partitions": "3", "auto.create.topics.enable": "true"})
    start(b)
    try:
        acked = produce_values(b.bootstrap, topic_name, [b"auto"], partition=2)
        assert acked == [(2, 0)]
        md = admin(b.bootstrap).list_topics(topic_name, timeout=WAIT)
        assert sorted(md.topics[topic_name].partitions) == [0, 1, 2]
        assert [r.value for r in consume(b.bootstrap, topic_name, 2)] == [b"auto"]
        # a producer that does not choose a partition also gets there
        p = producer(b.bootstrap)
        delivered = []
        p.produce(topic_name + "-2", key=b"k", value=b"v",
                  on_delivery=lambda e, m: delivered.append((e, m.partition())))
        assert p.flush(WAIT) == 0
        assert delivered[0][0] is None and delivered[0][1] in (0, 1, 2)
    finally:
        b.stop()


def test_auto_create_disabled(tmp_path, topic_name):
    b = BrokerProcess(tmp_path, **{"auto.create.topics.enable": "false"})
    start(b)
    try:
        md = admin(b.bootstrap).list_topics(topic_name, timeout=WAIT)
        assert md.topics[topic_name].error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
        p = producer(b.bootstrap, **{"message.timeout.ms": 2000})
        delivered = []
        p.produce(topic_name, value=b"v", on_delivery=lambda e, m: delivered.append(e))
        p.flush(WAIT)
        assert delivered and delivered[0] is not None
        assert topic_name not in admin(b.bootstrap).list_topics(timeout=WAIT).topics
    finally:
        b.stop()


# ------------------------------------------------------------------ sizes, resets, ListOffsets specs


def test_large_record_and_fetch_size_smaller_than_a_batch(broker, topic_name):
    """A record near max.message.bytes goes through, and a consumer whose fetch sizes are
    smaller than the batch still gets it (KIP-74: the first batch is returned whole)."""
    create_topic(broker.bootstrap, topic_name)
    big = os.urandom(900_000)
    produce_values(broker.bootstrap, topic_name, [big, b"small"], **{"compression.type": "none"})
    got = consume(broker.bootstrap, topic_name, **{"max.partition.fetch.bytes": 1024, "fetch.max.bytes": 1024,
                                                         "message.max.bytes": 1024})
    assert [r.value for r in got] == [big, b"small"]


def test_out_of_range_position(broker, topic_name):
    create_topic(broker.bootstrap, topic_name)
    produce_values(broker.bootstrap, topic_name, [b"r%d" % i for i in range(10)])
    # auto.offset.reset=error: the client is told
    c = consumer(broker.bootstrap, **{"auto.offset.reset": "error"})
    try:
        c.assign([TopicPartition(topic_name, 0, 50)])
        m = wait_until(lambda: c.poll(0.5), what="an error")
        assert m.error() is not None and m.error().code() == KafkaError._AUTO_OFFSET_RESET
    finally:
        c.close()
    # auto.offset.reset=earliest: back to the start
    assert [r.offset for r in consume(broker.bootstrap, topic_name, start=50, auto_offset_reset="earliest")] == \
        list(range(10))


def test_admin_list_offsets(broker, topic_name):
    from confluent_kafka.admin import OffsetSpec
    create_topic(broker.bootstrap, topic_name)
    # one batch whose largest timestamp is in the middle, then single-record batches
    p = producer(broker.bootstrap, **{"linger.ms": 50})
    for ts in (BASE_TS + 5, BASE_TS + 90, BASE_TS + 30):
        p.produce(topic_name, value=b"%d" % ts, timestamp=ts, partition=0)
    assert p.flush(WAIT) == 0
    produce_values(broker.bootstrap, topic_name, [b"x"], linger_ms=0)  # now-ish timestamp: the max
    p = producer(broker.bootstrap, **{"linger.ms": 0})
    p.produce(topic_name, value=b"old", timestamp=BASE_TS + 1, partition=0)
    assert p.flush(WAIT) == 0
    a = admin(broker.bootstrap)
    tp = TopicPartition(topic_name, 0)

    def ask(spec):
        return a.list_offsets({tp: spec}, request_timeout=WAIT)[tp].result(WAIT)

    assert ask(OffsetSpec.earliest()).offset == 0
    assert ask(OffsetSpec.latest()).offset == 5
    mx = ask(OffsetSpec.max_timestamp())
    assert mx.offset == 3 and mx.timestamp > BASE_TS + 90
    by = ask(OffsetSpec.for_timestamp(BASE_TS + 20))
    assert (by.offset, by.timestamp) == (1, BASE_TS + 90)  # first offset whose timestamp is >= 20


def test_dynamic_broker_configs(tmp_path, topic_name):
    """Cluster-wide (resource "") and per-broker (resource "0") dynamic configs: topics without
    an override follow them, the source says where a value comes from, they survive a restart,
    and removing the per-broker value falls back to the cluster-wide one (Kafka keeps the layers
    static < cluster default < per-broker apart: DynamicBrokerConfig)."""
    b = BrokerProcess(tmp_path)
    start(b)
    try:
        create_topic(b.bootstrap, topic_name)
        create_topic(b.bootstrap, topic_name + "-own", config={"retention.ms": "1000000"})
        a = admin(b.bootstrap)

        def alter(name, key, value, op=AlterConfigOpType.SET):
            # raw, because the cluster-wide default is the BROKER resource named "", which librdkafka
            # and kafka-python refuse to send (the Java admin client and kafka-configs do)
            r = raw_call(b.port, 44, 1, {"validate_only": False, "resources": [{
                "resource_type": 4, "resource_name": name,
                "configs": [{"name": key, "config_operation": op.value, "value": value}]}]})
            return r["responses"][0]["error_code"]

        def effective():
            topic = _describe_topic(a, topic_name)["retention.ms"]
            bres = ConfigResource(ConfigResource.Type.BROKER, "0")
            brk = a.describe_configs([bres])[bres].result(WAIT)["log.retention.ms"]
            return (topic.value, topic.source), (brk.value, brk.source)

        DEFAULT, BROKER = ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value, ConfigSource.DYNAMIC_BROKER_CONFIG.value
        assert alter("", "log.retention.ms", "5555555") == 0
        assert effective() == (("5555555", DEFAULT), ("5555555", DEFAULT))
        assert _describe_topic(a, topic_name + "-own")["retention.ms"].value == "1000000"

        assert alter("0", "log.retention.ms", "6666666") == 0
        assert effective() == (("6666666", BROKER), ("6666666", BROKER))

        # a static-only broker config cannot be changed at runtime (INVALID_REQUEST, as Kafka 4 answers)
        assert alter("0", "log.dirs", "/elsewhere") == KafkaError.INVALID_REQUEST

        b.stop()
        start(b)
        a = admin(b.bootstrap)
        assert effective() == (("6666666", BROKER), ("6666666", BROKER))

        # without the per-broker value, the cluster-wide one applies again
        assert alter("0", "log.retention.ms", None, AlterConfigOpType.DELETE) == 0
        assert effective() == (("5555555", DEFAULT), ("5555555", DEFAULT))
        b.stop()
        start(b)
        a = admin(b.bootstrap)
        assert effective() == (("5555555", DEFAULT), ("5555555", DEFAULT))
    finally:
        b.stop()


def test_authorized_operations_without_an_authorizer(broker, topic_name):
    """Asked for, describe answers every operation of the resource type, as Kafka without an authorizer."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AclOperation as Op

    a = admin(broker.bootstrap)
    create_topic(broker.bootstrap, topic_name, 1)
    cluster = a.describe_cluster(include_authorized_operations=True, request_timeout=WAIT).result(WAIT)
    assert set(cluster.authorized_operations) == {Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS,
                                                  Op.IDEMPOTENT_WRITE, Op.ALTER, Op.DESCRIBE}
    topic = a.describe_topics(TopicCollection([topic_name]), include_authorized_operations=True,
                              request_timeout=WAIT)[topic_name].result(WAIT)
    assert set(topic.authorized_operations) == {Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER,
                                                Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS}
    assert a.describe_cluster(request_timeout=WAIT).result(WAIT).authorized_operations is None  # not asked


def test_list_groups_types_filter(broker, topic_name):
    from confluent_kafka import ConsumerGroupType

    group = f"g-{topic_name}"
    create_topic(broker.bootstrap, topic_name, 1)
    c = consumer(broker.bootstrap, group_id=group)
    c.subscribe([topic_name])
    wait_until(lambda: c.poll(0.2) is None and c.assignment(), what="the group's first assignment")
    try:
        a = admin(broker.bootstrap)

        def listed(**kw) -> set[str]:
            return {g.group_id for g in a.list_consumer_groups(request_timeout=WAIT, **kw).result(WAIT).valid}
        assert group in listed()
        assert group in listed(types={ConsumerGroupType.CLASSIC})
        assert group not in listed(types={ConsumerGroupType.CONSUMER})  # no KIP-848 groups here
    finally:
        c.close()


def test_keyless_records_on_a_compacted_topic_fail_alone(broker, topic_name):
    """KIP-467: INVALID_RECORD names the records at fault; librdkafka fails those with it and the
    rest of their batch with _INVALID_DIFFERENT_RECORD (a batch is appended whole or not at all)."""
    from confluent_kafka import KafkaError

    create_topic(broker.bootstrap, topic_name, 1, {"cleanup.policy": "compact"})
    p = producer(broker.bootstrap, linger_ms=500)
    errors_by_index: dict[int, int] = {}
    for i in range(10):
        p.produce(topic_name, b"v%d" % i, key=None if i % 5 == 0 else b"k%d" % i, partition=0,
                  on_delivery=lambda err, msg, i=i: errors_by_index.__setitem__(i, err.code() if err else 0))
    assert p.flush(WAIT) == 0
    assert {i for i, code in errors_by_index.items() if code == KafkaError.INVALID_RECORD} == {0, 5}
    assert {code for i, code in errors_by_index.items() if i % 5} == {KafkaError._INVALID_DIFFERENT_RECORD}
    p2 = producer(broker.bootstrap)
    p2.produce(topic_name, b"keyed", key=b"k", partition=0)
    assert p2.flush(WAIT) == 0  # the partition goes on taking good batches


def test_config_keys_kafka_accepts(broker, topic_name):
    """Keys Kafka 3.9 takes (deprecated or without effect here) are accepted as Kafka accepts them."""
    a = admin(broker.bootstrap)
    create_topic(broker.bootstrap, topic_name, 1)
    topic = ConfigResource(ConfigResource.Type.TOPIC, topic_name,
                           set_config={"message.format.version": "0.10.0", "compression.zstd.level": "5"})
    a.alter_configs([topic], request_timeout=WAIT)[topic].result(WAIT)  # librdkafka's 0092 does this
    node = ConfigResource(ConfigResource.Type.BROKER, "0", set_config={"sasl.kerberos.min.time.before.relogin": "58000",
                                                                       "background.threads": "9"})
    a.alter_configs([node], request_timeout=WAIT)[node].result(WAIT)  # librdkafka's 0081 does this
    static = ConfigResource(ConfigResource.Type.BROKER, "0", set_config={"auto.create.topics.enable": "false"})
    with pytest.raises(Exception, match="auto.create.topics.enable"):
        a.alter_configs([static], request_timeout=WAIT)[static].result(WAIT)
    tiered = ConfigResource(ConfigResource.Type.TOPIC, topic_name, set_config={"remote.storage.enable": "true"})
    with pytest.raises(Exception, match="Tiered Storage"):
        a.alter_configs([tiered], request_timeout=WAIT)[tiered].result(WAIT)
