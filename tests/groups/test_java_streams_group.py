"""Kafka Streams 4.4.0 with ``group.protocol=streams`` (KIP-1071): a word count with a repartition
and a KTable store (tests/java/StreamsWordCount.java, run from source with the jars tests/kafka/pom.xml
fetches) against Samsa and against Apache Kafka 4.4.0. Two instances share the tasks, one stops and
the other takes over; every word's last count is exact; the internal topics are created by the
broker with the configs Streams asks for; the group is a streams group in ListGroups and
StreamsGroupDescribe; on Samsa it outlives a broker restart."""

from __future__ import annotations

import struct
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import pytest

import kafka_process
from samsa.client.consumer import Consumer, TopicPartition
from samsa.client.producer import Producer
from waiting import wait_until

sys.path.insert(0, str(Path(__file__).parent.parent / "differential"))
from harness import Side, create_topic  # noqa: E402

JAVA = Path(__file__).resolve().parent.parent / "java" / "StreamsWordCount.java"
WAIT = 120  # a JVM compiling the app from source and starting Kafka Streams on a loaded machine


class App:
    """One instance of the word count in its own JVM."""

    def __init__(self, bootstrap: str, app_id: str, topics: tuple[str, str], state_dir: Path, standbys: int = 0,
                 guarantee: str = "at_least_once", threads: int = 1):
        state_dir.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            ["java", "-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp", kafka_process.classpath(), str(JAVA), bootstrap,
             app_id, *topics, str(state_dir), "streams", str(standbys), guarantee, str(threads)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self.reader = threading.Thread(target=lambda: self.lines.extend(ln.rstrip() for ln in self.proc.stdout),
                                       daemon=True)
        self.reader.start()

    def tasks(self, kind: str = "tasks") -> set[str]:
        """The instance's active tasks as it last printed them ("standbys": its standby tasks)."""
        last = [ln for ln in list(self.lines) if ln.startswith(kind + " ")]
        if not last or not self.running():
            return set()
        inner = last[-1][len(kind) + 2:-1]
        return {t.strip() for t in inner.split(",") if t.strip()}

    def running(self) -> bool:
        states = [ln for ln in list(self.lines) if ln.startswith("state ")]
        return bool(states) and states[-1] == "state RUNNING"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.write("stop\n")
            self.proc.stdin.flush()
            assert self.proc.wait(WAIT) == 0, self.lines[-20:]
        self.reader.join(10)
        assert "closed" in self.lines, self.lines[-20:]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def _produce(bootstrap: str, topic: str, lines: list[str]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    try:
        for i, line in enumerate(lines):
            p.send(topic, value=line.encode(), key=str(i).encode())
        assert p.flush(30) == 0
    finally:
        p.close()


class Counts:
    """The output topic read from the start: each word's last count."""

    def __init__(self, bootstrap: str, topic: str, isolation: str = "read_uncommitted"):
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": None, "auto.offset.reset": "earliest",
                                  "enable.auto.commit": False, "isolation.level": isolation})
        self.consumer.assign([TopicPartition(topic, 0)])
        self.last: dict[str, int] = {}

    def read(self) -> dict[str, int]:
        for r in self.consumer.poll(0.5):
            self.last[r.key.decode()] = struct.unpack(">q", r.value)[0]
        return self.last

    def close(self) -> None:
        self.consumer.close()


def _words(lines: list[str]) -> Counter:
    return Counter(w for line in lines for w in line.lower().split())


TEXT = ["the quick brown fox", "jumps over the lazy dog", "the dog barks", "a fox runs", "quick quick slow"]


@pytest.fixture(params=["samsa", "kafka"])
def streams_target(request) -> str:
    """A broker's bootstrap: Samsa's (the group tests' broker), then Apache Kafka 4.4.0's."""
    if request.param == "kafka":
        return request.getfixturevalue("kafka").bootstrap
    return request.getfixturevalue("gbroker").bootstrap


def _create(bootstrap: str, topic: str, partitions: int) -> None:
    side = Side("target", bootstrap)
    try:
        create_topic(side, topic, partitions)
    finally:
        side.close()


def test_two_instances_share_tasks_and_take_over(streams_target, names, tmp_path):
    bootstrap = streams_target
    topic, group = names
    source, sink, app_id = f"{topic}-in", f"{topic}-out", f"{group}-wc"
    side = Side("target", bootstrap)
    _create(bootstrap, source, 2)
    _create(bootstrap, sink, 1)
    expected: Counter = Counter()
    apps: list[App] = []
    counts = Counts(bootstrap, sink)
    try:
        a = App(bootstrap, app_id, (source, sink), tmp_path / "a")
        apps.append(a)
        all_tasks = {"0_0", "0_1", "1_0", "1_1"}
        wait_until(lambda: a.running() and a.tasks() == all_tasks, "instance a running all four tasks", WAIT)
        batch = TEXT * 4
        _produce(bootstrap, source, batch)
        expected += _words(batch)
        wait_until(lambda: counts.read() == dict(expected), "the first counts", WAIT)

        b = App(bootstrap, app_id, (source, sink), tmp_path / "b")
        apps.append(b)
        wait_until(lambda: a.running() and b.running() and a.tasks() and b.tasks()
                   and a.tasks() | b.tasks() == all_tasks and not a.tasks() & b.tasks(),
                   "the tasks shared by the two instances", WAIT)
        # The broker's view: a streams group of two members, the tasks split between them.
        d = side.call(89, {"group_ids": [app_id], "include_authorized_operations": False})["groups"][0]
        assert d["error_code"] == 0 and len(d["members"]) == 2, d
        listed = side.call(16, {"states_filter": [], "types_filter": ["streams"]})["groups"]
        assert [(g["group_id"], g["group_type"], g["protocol_type"]) for g in listed if g["group_id"] == app_id] == [
            (app_id, "streams", "streams")]
        batch = TEXT[::-1] * 3
        _produce(bootstrap, source, batch)
        expected += _words(batch)
        wait_until(lambda: counts.read() == dict(expected), "the counts with two instances", WAIT)

        b.stop()
        wait_until(lambda: a.running() and a.tasks() == all_tasks, "instance a taking all tasks back", WAIT)
        batch = ["the end of the fox"] * 5
        _produce(bootstrap, source, batch)
        expected += _words(batch)
        wait_until(lambda: counts.read() == dict(expected), "the counts after the take-over", WAIT)

        # The internal topics, created by the broker as the topology asked.
        configs = side.call(32, {"resources": [{"resource_type": 2, "resource_name": f"{app_id}-counts-changelog",
                                                "configuration_keys": ["cleanup.policy"]}],
                                 "include_synonyms": False, "include_documentation": False})["results"][0]
        assert configs["error_code"] == 0 and configs["configs"][0]["value"] == "compact", configs
        meta = side.call(3, {"topics": [{"name": f"{app_id}-counts-repartition", "topic_id": bytes(16)}],
                             "allow_auto_topic_creation": False})["topics"][0]
        assert meta["error_code"] == 0 and len(meta["partitions"]) == 2, meta
        a.stop()
        d = side.call(89, {"group_ids": [app_id], "include_authorized_operations": False})["groups"][0]
        wait_until(lambda: side.call(89, {"group_ids": [app_id], "include_authorized_operations": False})[
            "groups"][0]["group_state"] == "Empty", "the group empty once both left", 30)
    finally:
        for app in apps:
            app.kill()
        counts.close()
        side.close()


def test_streams_group_survives_a_broker_restart(own_broker, names, tmp_path):
    """Samsa only: the group's records in __consumer_offsets bring it back after a restart, and the
    application carries on from its committed offsets with exact counts."""
    broker = own_broker()
    topic, group = names
    source, sink, app_id = f"{topic}-in", f"{topic}-out", f"{group}-wc"
    _create(broker.bootstrap, source, 2)
    _create(broker.bootstrap, sink, 1)
    expected: Counter = Counter()
    app = App(broker.bootstrap, app_id, (source, sink), tmp_path / "a")
    counts = None
    try:
        wait_until(lambda: app.running() and len(app.tasks()) == 4, "the application running", WAIT)
        _produce(broker.bootstrap, source, TEXT)
        expected += _words(TEXT)
        counts = Counts(broker.bootstrap, sink)
        wait_until(lambda: counts.read() == dict(expected), "the first counts", WAIT)
        counts.close()
        counts = None
        app.stop()
        side = Side("samsa", broker.bootstrap)
        before = side.call(89, {"group_ids": [app_id], "include_authorized_operations": False})["groups"][0]
        side.close()
        broker.stop()
        broker.start()
        side = Side("samsa", broker.bootstrap)
        try:
            wait_until(lambda: side.call(89, {"group_ids": [app_id], "include_authorized_operations": False})[
                "groups"][0]["error_code"] == 0, "the streams group loaded again", 60)
            after = side.call(89, {"group_ids": [app_id], "include_authorized_operations": False})["groups"][0]
        finally:
            side.close()
        assert (after["group_state"], after["group_epoch"], after["topology"]) == (
            before["group_state"], before["group_epoch"], before["topology"])
        app = App(broker.bootstrap, app_id, (source, sink), tmp_path / "a")
        wait_until(lambda: app.running() and len(app.tasks()) == 4, "the application running again", WAIT)
        _produce(broker.bootstrap, source, TEXT[:2])
        expected += _words(TEXT[:2])
        counts = Counts(broker.bootstrap, sink)
        wait_until(lambda: counts.read() == dict(expected), "the counts after the restart", WAIT)
        app.stop()
    finally:
        app.kill()
        if counts is not None:
            counts.close()


FAST_STREAMS = {"group.streams.min.session.timeout.ms": 2000, "group.streams.session.timeout.ms": 6000,
                "group.streams.min.heartbeat.interval.ms": 200, "group.streams.heartbeat.interval.ms": 500,
                "group.streams.initial.rebalance.delay.ms": 0}


def test_exactly_once_sigkilled_and_restarted(own_broker, names, tmp_path):
    """processing.guarantee=exactly_once_v2 with group.protocol=streams (transactional offsets at the
    member's epoch): SIGKILLed mid-stream and restarted (its session expires on the broker, the new
    instance takes the tasks and restores the store from its changelog), every word's last count read
    read_committed is exact. Samsa only: Kafka's group.streams.min.session.timeout.ms is 45 s."""
    broker = own_broker(**FAST_STREAMS)
    topic, group = names
    source, sink, app_id = f"{topic}-in", f"{topic}-out", f"{group}-wc"
    _create(broker.bootstrap, source, 2)
    _create(broker.bootstrap, sink, 1)
    expected: Counter = Counter()
    app = App(broker.bootstrap, app_id, (source, sink), tmp_path / "a", guarantee="exactly_once_v2")
    counts = Counts(broker.bootstrap, sink, "read_committed")
    try:
        wait_until(lambda: app.running() and len(app.tasks()) == 4, "the application running", WAIT)
        for i in range(6):
            batch = [f"{line} round{i % 2}" for line in TEXT]
            _produce(broker.bootstrap, source, batch)
            expected += _words(batch)
        wait_until(lambda: counts.read() == dict(expected), "the first counts", WAIT)
        # mid-stream: more input on its way as the instance dies
        batch = TEXT * 10
        _produce(broker.bootstrap, source, batch)
        expected += _words(batch)
        app.kill()
        batch = ["after the crash"] * 7
        _produce(broker.bootstrap, source, batch)
        expected += _words(batch)
        app = App(broker.bootstrap, app_id, (source, sink), tmp_path / "a", guarantee="exactly_once_v2")
        wait_until(lambda: app.running() and len(app.tasks()) == 4, "the restarted application running", WAIT)
        wait_until(lambda: counts.read() == dict(expected), "the counts after the restart", WAIT)
        app.stop()
    finally:
        app.kill()
        counts.close()


def test_standby_replicas_across_instances_of_two_threads(streams_target, names, tmp_path):
    """streams.num.standby.replicas=1 (a group config) and two instances of two stream threads each
    (four members, two processes): each stateful task (subtopology 1, the count store) has its standby
    on the other instance; the instance running them stops, the other takes every task; counts exact."""
    bootstrap = streams_target
    topic, group = names
    source, sink, app_id = f"{topic}-in", f"{topic}-out", f"{group}-wc"
    side = Side("target", bootstrap)
    _create(bootstrap, source, 2)
    _create(bootstrap, sink, 1)
    wait_until(lambda: side.call(10, {"key": app_id, "key_type": 0}, 3)["error_code"] == 0, "a coordinator", 60)
    altered = side.call(44, {"resources": [{"resource_type": 32, "resource_name": app_id, "configs": [
        {"name": "streams.num.standby.replicas", "config_operation": 0, "value": "1"}]}], "validate_only": False})
    assert altered["responses"][0]["error_code"] == 0, altered
    expected: Counter = Counter()
    apps: list[App] = []
    counts = Counts(bootstrap, sink)
    stateful = {"1_0", "1_1"}
    try:
        apps = [App(bootstrap, app_id, (source, sink), tmp_path / name, threads=2) for name in ("a", "b")]

        def placed() -> bool:
            a, b = apps
            if not (a.running() and b.running()) or a.tasks() | b.tasks() != {"0_0", "0_1", "1_0", "1_1"}:
                return False
            return all((t in a.tasks() and t in b.tasks("standbys")) or (t in b.tasks() and t in a.tasks("standbys"))
                       for t in stateful)
        wait_until(placed, "the active and standby tasks placed on the two instances", WAIT)
        batch = TEXT * 5
        _produce(bootstrap, source, batch)
        expected += _words(batch)
        wait_until(lambda: counts.read() == dict(expected), "the counts", WAIT)
        # stop the instance with the most stateful tasks: the other one takes everything
        leaving = max(apps, key=lambda a: len(a.tasks() & stateful))
        staying = apps[1 - apps.index(leaving)]
        leaving.stop()
        wait_until(lambda: staying.running() and staying.tasks() == {"0_0", "0_1", "1_0", "1_1"},
                   "the other instance running every task", WAIT)
        batch = TEXT[:3] * 4
        _produce(bootstrap, source, batch)
        expected += _words(batch)
        wait_until(lambda: counts.read() == dict(expected), "the counts after the take-over", WAIT)
        staying.stop()
    finally:
        for app in apps:
            app.kill()
        counts.close()
        side.close()
