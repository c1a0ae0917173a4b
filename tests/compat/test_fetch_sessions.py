"""Fetch sessions (KIP-227): the broker's answers step by step, compared with what Apache
Kafka 4.4.0 answered to the same raw requests (``fetch_session_scenarios.EXPECTED``), the
cache's limits and eviction on a broker of its own, and Samsa's consumer and kafka-python
reading through sessions."""

from __future__ import annotations

import pytest

from compat_helpers import BrokerProcess, wait_until
from fetch_session_scenarios import EXPECTED, Raw, _part, create_topic, fetch, run


def test_session_steps_answer_as_kafka(broker, topic_name):
    got = run("127.0.0.1", broker.port, topic_name)
    assert [step for step, _ in got] == [step for step, _ in EXPECTED]
    for (step, answer), (_, kafka) in zip(got, EXPECTED):
        assert answer == kafka, step


# ---------------------------------------------------------------- clients reading through sessions

SLOTS = 3


@pytest.fixture(scope="module")
def session_broker(tmp_path_factory):
    """A broker with two session slots and its /metrics on (the session gauges)."""
    from broker_process import free_port
    port = free_port()
    b = BrokerProcess(tmp_path_factory.mktemp("sessions"), **{
        "prometheus.listener": f"http://127.0.0.1:{port}", "max.incremental.fetch.session.cache.slots": SLOTS})
    b.metrics_url = f"http://127.0.0.1:{port}/metrics"
    b.start()
    yield b
    b.stop()


def _gauge(b, name: str) -> float:
    from metrics.scrape import scrape, value
    return value(scrape(b.metrics_url), f"kafka_server_fetchsessioncache_{name}")


def _produce(bootstrap: str, topic: str, partitions: int, per_partition: int, tag: str) -> None:
    from samsa import Producer
    with Producer({"bootstrap.servers": bootstrap, "linger.ms": 5}) as p:
        for i in range(per_partition):
            for part in range(partitions):
                p.send(topic, f"{tag}-{part}-{i}".encode(), partition=part)
        p.flush()


def _create(bootstrap: str, topic: str, partitions: int) -> None:
    from samsa import Admin
    from samsa.client.types import NewTopic
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics([NewTopic(topic, partitions, 1)])


def test_java_consumer_reads_through_a_session(session_broker, topic_name):
    """Kafka's own consumer (kafka-clients 4.4.0; tests/java/SessionConsumer.java) reads through a session."""
    import subprocess
    from pathlib import Path

    import kafka_process
    libs = kafka_process.ensure_jars()  # tests/kafka/pom.xml's jars (kafka-clients 4.4.0 among them)
    jars = [libs / "kafka-clients-4.4.0.jar", *libs.glob("slf4j-api-*.jar")]
    source = Path(__file__).resolve().parent.parent / "java" / "SessionConsumer.java"
    b = session_broker
    _create(b.bootstrap, topic_name, 20)
    _produce(b.bootstrap, topic_name, 20, 2, "a")
    cached = _gauge(b, "numincrementalfetchpartitionscached")
    # java's source-file mode: compiled in memory and run by one JVM (C1 only: a short run starts faster)
    java = subprocess.Popen(["java", "-XX:TieredStopAtLevel=1", "-cp", ":".join(map(str, jars)), str(source),
                             b.bootstrap, topic_name, "20", "40"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert java.stdout.readline().strip() == "HALF"
        wait_until(lambda: _gauge(b, "numincrementalfetchpartitionscached") >= cached + 20, timeout=30,
                   what="the Java consumer's session of 20 partitions")
        _produce(b.bootstrap, topic_name, 20, 2, "b")
        done = java.stdout.readline().strip()
        assert java.wait(60) == 0
    finally:
        if java.poll() is None:
            java.kill()
            java.wait()
    assert done.startswith("DONE ")
    assert set(done[5:].split(",")) == {f"{t}-{p}-{i}" for t in "ab" for p in range(20) for i in range(2)}
    # Kafka's consumer closes its session when it closes (a fetch with epoch -1)
    wait_until(lambda: _gauge(b, "numincrementalfetchpartitionscached") == cached, timeout=30,
               what="the Java consumer's session closed")


def test_kafka_python_consumer_reads_through_a_session(session_broker, topic_name):
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP
    b = session_broker
    _create(b.bootstrap, topic_name, 30)
    _produce(b.bootstrap, topic_name, 30, 3, "a")
    before = _gauge(b, "numincrementalfetchsessions")
    cached = _gauge(b, "numincrementalfetchpartitionscached")
    c = KafkaConsumer(bootstrap_servers=b.bootstrap, group_id=None, enable_auto_commit=False,
                      fetch_max_wait_ms=100, request_timeout_ms=35000)
    try:
        c.assign([KTP(topic_name, i) for i in range(30)])
        c.seek_to_beginning()
        got: set = set()

        def read(n):
            for records in c.poll(timeout_ms=200).values():
                got.update(r.value for r in records)
            return len(got) >= n
        wait_until(lambda: read(90), timeout=30, what="the first 90 records")
        # the consumer's session holds its 30 partitions; new records come through incremental fetches
        wait_until(lambda: _gauge(b, "numincrementalfetchsessions") == before + 1
                   and _gauge(b, "numincrementalfetchpartitionscached") == cached + 30, timeout=30, what="the session")
        _produce(b.bootstrap, topic_name, 30, 1, "b")
        wait_until(lambda: read(120), timeout=30, what="the records produced later")
        assert got == {f"{t}-{p}-{i}".encode() for p in range(30) for t, n in (("a", 3), ("b", 1))
                       for i in range(n)}
    finally:
        c.close()


def test_samsa_consumers_use_sessions_and_read_without_a_slot(session_broker, topic_name):
    """Three of Samsa's consumers, three slots (kafka-python's session may hold one, young and
    bigger, which they cannot evict): the consumers that get a slot read through a session,
    the others with full fetches, and all read everything."""
    from samsa import Consumer, TopicPartition
    b = session_broker
    before = _gauge(b, "numincrementalfetchsessions")
    cached = _gauge(b, "numincrementalfetchpartitionscached")
    _create(b.bootstrap, topic_name, 12)
    _produce(b.bootstrap, topic_name, 12, 5, "a")
    consumers = [Consumer({"bootstrap.servers": b.bootstrap, "auto.offset.reset": "earliest",
                           "fetch.max.wait.ms": 100}) for _ in range(3)]
    got: list[set] = [set(), set(), set()]
    try:
        for n, c in enumerate(consumers):
            c.assign([TopicPartition(topic_name, p) for p in range(4 * n, 4 * n + 4)])

        def read(want):
            for n, c in enumerate(consumers):
                got[n].update(r.value for r in c.poll(0.05))
            return all(len(g) >= want for g in got)
        wait_until(lambda: read(20), timeout=30, what="each consumer's 20 records")
        wait_until(lambda: _gauge(b, "numincrementalfetchsessions") == SLOTS
                   and _gauge(b, "numincrementalfetchpartitionscached") == cached + 4 * (SLOTS - before),
                   timeout=30, what="the free slots taken by Samsa's consumers, 4 partitions each")
        _produce(b.bootstrap, topic_name, 12, 2, "b")
        wait_until(lambda: read(28), timeout=30, what="the records produced later")
        for n in range(3):
            assert got[n] == {f"{t}-{p}-{i}".encode() for p in range(4 * n, 4 * n + 4)
                              for t, k in (("a", 5), ("b", 2)) for i in range(k)}
    finally:
        for c in consumers:
            c.close()


def test_a_parked_incremental_fetch_wakes_for_a_quiet_partition(broker, topic_name):
    """Partitions with nothing new are not read again by an incremental fetch, only waited on:
    a record produced while the fetch is parked (max wait 60 s) answers it at once."""
    from fetch_session_scenarios import produce_one
    from samsa.protocol.api import decode_response, encode_request
    raw, other = Raw("127.0.0.1", broker.port), Raw("127.0.0.1", broker.port)
    try:
        create_topic(raw, topic_name, 3)
        sid = fetch(raw, 12, 0, 0, [{"topic": topic_name, "partitions": [_part(i) for i in range(3)]}])["session_id"]
        assert sid and fetch(raw, 12, sid, 1, [])["responses"] == []
        raw.cid += 1
        raw.sock.sendall(b"".join(bytes(c) for c in encode_request(1, 12, raw.cid, "fs", {
            "replica_id": -1, "max_wait_ms": 60000, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": sid, "session_epoch": 2, "topics": [], "forgotten_topics_data": [], "rack_id": ""})))
        produce_one(other, topic_name, 2)
        raw.sock.settimeout(30)  # far below the fetch's 60 s: only the wake-up answers in time
        size = int.from_bytes(raw._read(4), "big")
        _, resp = decode_response(1, 12, raw._read(size))
        assert [(p["partition_index"], p["high_watermark"], bool(p["records"]))
                for t in resp["responses"] for p in t["partitions"]] == [(2, 1, True)]
    finally:
        raw.close()
        other.close()
