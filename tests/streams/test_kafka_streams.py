"""Kafka Streams 4.4.0 applications (``org.apache.kafka:kafka-streams`` from tests/kafka/pom.xml, the
programs in tests/java/ run from source) against a Samsa broker, classic group protocol.

``SAMSA_JAVA_ECO_BROKER=kafka`` runs the same scenarios against Apache Kafka 4.4.0 (the reference check
of the checks)."""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import threading
import uuid
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

import kafka_process
from broker_process import BrokerProcess
from waiting import wait_until

# tests/java/StreamsWordCount.java (shared with groups/test_java_streams_group.py): the classic group protocol,
# no standby replicas, exactly_once_v2
CLASSIC_EOS = ("classic", "0", "exactly_once_v2")
JAVA = Path(__file__).resolve().parent.parent / "java"
WAIT = 180
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa", "lambda"]


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory):
    if os.environ.get("SAMSA_JAVA_ECO_BROKER") == "kafka":
        k = kafka_process.KafkaProcess(tmp_path_factory.mktemp("kafka")).start()
        yield k.bootstrap
        k.stop()
        return
    b = BrokerProcess(tmp_path_factory.mktemp("broker"), **{"group.initial.rebalance.delay.ms": "0",
                                                              "offsets.topic.num.partitions": "1",
                                                              "transaction.state.log.num.partitions": "1"}).start()
    yield b.bootstrap
    b.stop()


class StreamsApp:
    """One JVM running tests/java/<program>.java; its stdout lines kept, its log in the work dir."""

    def __init__(self, program: str, *args: str, workdir: Path):
        workdir.mkdir(parents=True, exist_ok=True)
        self.log = open(workdir / f"{program}-{uuid.uuid4().hex[:6]}.log", "w")
        self.proc = subprocess.Popen(kafka_process.java(str(JAVA / f"{program}.java"), *args), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log, text=True)
        self.lines: list[str] = []
        self.reader = threading.Thread(target=lambda: self.lines.extend(line.rstrip() for line in self.proc.stdout),
                                       daemon=True)
        self.reader.start()

    def state(self) -> str | None:
        states = [line.split()[1] for line in list(self.lines) if line.startswith("state ")]
        return states[-1] if states else None

    def running(self) -> bool:
        assert self.proc.poll() is None and not any(line.startswith("error ") for line in self.lines), \
            "\n".join(self.lines[-40:])
        return self.state() == "RUNNING"

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)
        self.reader.join(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("stop\n")
                self.proc.stdin.flush()
                self.proc.wait(60)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                pass
        self.kill()
        self.log.close()


def _create(bootstrap: str, *topics: str, partitions: int = 2) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(t, partitions, 1) for t in topics]).values():
        f.result(60)


def _produce(bootstrap: str, topic: str, lines: list[str]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i, line in enumerate(lines):
        p.produce(topic, key=str(i), value=line)
    assert p.flush(60) == 0


class LastCounts:
    """The output topic read read_committed from the start: each word's last count."""

    def __init__(self, bootstrap: str, topic: str):
        self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4().hex}",
                           "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                           "enable.auto.commit": False})
        self.c.subscribe([topic])
        self.last: dict[str, int] = {}

    def poll(self) -> dict[str, int]:
        for m in self.c.consume(1000, 0.5):
            if m.error() is None:
                self.last[m.key().decode()] = struct.unpack(">q", m.value())[0]
        return self.last

    def close(self) -> None:
        self.c.close()


def _lines(n: int, seed: int) -> list[str]:
    return [" ".join(WORDS[(seed + i * 7 + j * 3) % len(WORDS)] for j in range(1 + (i + seed) % 5)) for i in range(n)]


def _totals(lines: list[str]) -> dict[str, int]:
    return dict(Counter(w for line in lines for w in line.split()))


def test_word_count_exactly_once_sigkilled_and_restored(bootstrap, tmp_path):
    app_id, inp, out = f"wc-{uuid.uuid4().hex[:8]}", f"wc-in-{uuid.uuid4().hex[:6]}", f"wc-out-{uuid.uuid4().hex[:6]}"
    _create(bootstrap, inp, out)
    first, second = _lines(300, 1), _lines(300, 2)
    _produce(bootstrap, inp, first)
    reader = LastCounts(bootstrap, out)
    app = StreamsApp("StreamsWordCount", bootstrap, app_id, inp, out, str(tmp_path / "state-a"), *CLASSIC_EOS, workdir=tmp_path)
    try:
        wait_until(lambda: app.running() and reader.poll() == _totals(first), "the first lines counted", WAIT)
        _produce(bootstrap, inp, second)
        expected = _totals(first + second)
        wait_until(lambda: reader.poll() != _totals(first), "counting of the second lines under way", WAIT)
        app.kill()   # mid-stream: its open transaction is aborted, its state is rebuilt from the changelog
        # a fresh state directory: the whole store restored from its changelog topic
        app = StreamsApp("StreamsWordCount", bootstrap, app_id, inp, out, str(tmp_path / "state-b"), *CLASSIC_EOS,
                         workdir=tmp_path)
        wait_until(lambda: app.running() and reader.poll() == expected, "every word's count exact after restart",
                   WAIT)
    finally:
        app.stop()
        reader.close()
    # the internal topics, created with the configs Streams asks for
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = admin.list_topics(timeout=30).topics
    changelog, repartition = f"{app_id}-counts-changelog", f"{app_id}-counts-repartition"
    assert changelog in topics and repartition in topics, sorted(t for t in topics if t.startswith(app_id))
    assert len(topics[changelog].partitions) == 2 and len(topics[repartition].partitions) == 2
    res = [ConfigResource("topic", changelog), ConfigResource("topic", repartition)]
    configs = {r.name: {k: v.value for k, v in f.result(30).items()} for r, f in admin.describe_configs(res).items()}
    assert configs[changelog]["cleanup.policy"] == "compact"
    assert configs[repartition]["cleanup.policy"] == "delete"
    assert configs[repartition]["retention.ms"] == "-1"
    assert configs[repartition]["segment.bytes"] == str(50 * 1024 * 1024)
    assert configs[changelog]["message.timestamp.type"] == "CreateTime"


def _group_members(bootstrap: str, group: str) -> list:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return admin.describe_consumer_groups([group])[group].result(30).members


def test_two_instances_share_tasks_and_one_takes_over(bootstrap, tmp_path):
    app_id, inp, out = f"wc2-{uuid.uuid4().hex[:8]}", f"wc2-in-{uuid.uuid4().hex[:6]}", f"wc2-out-{uuid.uuid4().hex[:6]}"
    _create(bootstrap, inp, out)
    first, second = _lines(200, 3), _lines(200, 4)
    _produce(bootstrap, inp, first)
    reader = LastCounts(bootstrap, out)
    a = StreamsApp("StreamsWordCount", bootstrap, app_id, inp, out, str(tmp_path / "a"), *CLASSIC_EOS, workdir=tmp_path)
    b = StreamsApp("StreamsWordCount", bootstrap, app_id, inp, out, str(tmp_path / "b"), *CLASSIC_EOS, workdir=tmp_path)
    try:
        def shared() -> bool:
            members = _group_members(bootstrap, app_id) if a.running() and b.running() else []
            return len(members) == 2 and all(m.assignment.topic_partitions for m in members)
        wait_until(shared, "both instances running with partitions of their own", WAIT)
        wait_until(lambda: reader.poll() == _totals(first), "the first lines counted by the two", WAIT)
        b.stop()
        _produce(bootstrap, inp, second)
        wait_until(lambda: a.running() and len(_group_members(bootstrap, app_id)) == 1, "one instance left", WAIT)
        wait_until(lambda: reader.poll() == _totals(first + second), "the survivor's totals exact", WAIT)
        members = _group_members(bootstrap, app_id)
        assert {tp.topic for tp in members[0].assignment.topic_partitions} == {inp, f"{app_id}-counts-repartition"}
    finally:
        a.stop()
        b.stop()
        reader.close()


def test_windowed_aggregation_with_suppression_and_stream_table_join(bootstrap, tmp_path):
    pre = f"wj-{uuid.uuid4().hex[:8]}"
    _create(bootstrap, f"{pre}-clicks", f"{pre}-window-counts", f"{pre}-users", f"{pre}-orders", f"{pre}-enriched",
            partitions=1)
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    base = 1_700_000_000_000 // 10_000 * 10_000           # a window boundary
    for user, name in (("u1", "Ann"), ("u2", "Bob")):
        p.produce(f"{pre}-users", key=user, value=name, timestamp=base)
    clicks = [("u1", 0), ("u2", 1000), ("u1", 2000), ("u1", 9999), ("u2", 10_000), ("u1", 15_000), ("u2", 19_000)]
    for user, at in clicks:
        p.produce(f"{pre}-clicks", key=user, value="page", timestamp=base + at)
    assert p.flush(60) == 0
    app = StreamsApp("StreamsWindowJoin", bootstrap, pre, pre, str(tmp_path / "state"), workdir=tmp_path)
    windows = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{pre}", "isolation.level": "read_committed",
                        "auto.offset.reset": "earliest", "enable.auto.commit": False})
    windows.subscribe([f"{pre}-window-counts", f"{pre}-enriched"])
    got: list[tuple[str, str, object]] = []

    def read() -> list:
        for m in windows.consume(1000, 0.5):
            if m.error() is None:
                value = struct.unpack(">q", m.value())[0] if m.topic().endswith("counts") else m.value().decode()
                got.append(("window" if m.topic().endswith("counts") else "enriched",
                            m.key().decode(), value))
        return got
    try:
        wait_until(lambda: app.running(), "the application running", WAIT)
        # the table is read before the orders (they come later in time): each order finds its user
        p.produce(f"{pre}-orders", key="u1", value="30", timestamp=base + 20_000)
        p.produce(f"{pre}-orders", key="u2", value="12", timestamp=base + 20_001)
        p.produce(f"{pre}-orders", key="u3", value="99", timestamp=base + 20_002)   # no such user: no output
        assert p.flush(60) == 0
        # stream time past 20 s + grace 0 closes the windows [0,10) and [10,20): each emitted once
        p.produce(f"{pre}-clicks", key="u3", value="page", timestamp=base + 25_000)
        assert p.flush(60) == 0
        expected = [("window", f"u1@{base}", 3), ("window", f"u2@{base}", 1),
                    ("window", f"u1@{base + 10_000}", 1), ("window", f"u2@{base + 10_000}", 2),
                    ("enriched", "u1", "Ann:30"), ("enriched", "u2", "Bob:12")]
        wait_until(lambda: app.running() and sorted(map(str, read())) == sorted(map(str, expected)),
                   "four closed windows, each once, and two joined orders", WAIT)
        app.stop()   # a clean close commits what it had: then nothing more than the expected, each window once

        def read_to_end() -> bool:
            read()
            tps = windows.assignment()
            return bool(tps) and all(pos.offset >= windows.get_watermark_offsets(pos, 10)[1]
                                     for pos in windows.position(tps))
        wait_until(read_to_end, "the outputs read to their ends", WAIT)
        assert sorted(map(str, got)) == sorted(map(str, expected))
    finally:
        app.stop()
        windows.close()
