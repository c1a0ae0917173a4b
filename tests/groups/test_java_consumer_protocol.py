"""The Java client 4.x (kafka-clients 4.4.0 from Maven Central) with ``group.protocol=consumer``
against Samsa: a KafkaConsumer and a confluent-kafka consumer share one consumer group, the
broker splits the partitions between them, the Java member commits, and when it closes its
partitions go to the other member, from its commits.

The jars are those tests/kafka/pom.xml fetches for the Kafka fixture; the consumer is
tests/java/Kip848Consumer.java, run from source."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import pytest

import kafka_process
from group_helpers import KIP848, WAIT, EventLog, Member, committed, create_topic, produce_ids, wait_until

JAVA = Path(__file__).resolve().parent.parent / "java"


@pytest.fixture(scope="module")
def classpath() -> str:
    """kafka-clients 4.4.0 and its logging binding: the jars tests/kafka/pom.xml fetches for the
    Kafka fixture (one pom for every Java part of the suite)."""
    return kafka_process.classpath()


class JavaConsumer:
    def __init__(self, classpath: str, bootstrap: str, group: str, topic: str):
        self.proc = subprocess.Popen(["java", "-cp", classpath, str(JAVA / "Kip848Consumer.java"), bootstrap, group,
                                      topic], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True)
        self.lines: list[str] = []
        self.reader = threading.Thread(target=lambda: self.lines.extend(line.strip() for line in self.proc.stdout),
                                       daemon=True)
        self.reader.start()

    def owned(self) -> set[int]:
        cur: set[int] = set()
        for line in list(self.lines):
            kind, _, rest = line.partition(" ")
            if kind not in ("assigned", "revoked", "lost"):
                continue
            parts = {int(p) for p in rest.split(",") if p}
            if kind == "assigned":
                cur |= parts
            elif kind in ("revoked", "lost"):
                cur -= parts
        return cur

    def records(self) -> set[tuple[int, int]]:
        return {(int(line.split()[1]), int(line.split()[2])) for line in list(self.lines) if line.startswith("rec ")}

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("stop\n")
                self.proc.stdin.flush()
                self.proc.wait(WAIT)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait(10)
        self.reader.join(10)


def test_java_and_librdkafka_members_share_a_consumer_group(gbroker, names, classpath):
    topic, group = names
    b = gbroker.bootstrap
    create_topic(b, topic, 4)
    java = JavaConsumer(classpath, b, group, topic)
    log = EventLog()
    other = Member(b, group, [topic], log, "librdkafka", base=KIP848)
    try:
        other.start()
        wait_until(lambda: len(java.owned()) == 2 and len(other.assignment) == 2
                   and java.owned() | other.owned() == {0, 1, 2, 3},
                   what="the Java and librdkafka members to split four partitions", timeout=WAIT)
        produced = produce_ids(b, topic, range(4), 5)
        wait_until(lambda: len(java.records() | {(e.partition, e.offset) for e in log.of("rec")}) == 20,
                   what="every record read by one member or the other")
        java_parts = java.owned()
        wait_until(lambda: {p for p, _ in java.records()} >= java_parts and "committed" in java.lines,
                   what="the Java member to read and commit its partitions")
        java.stop()
        assert java.lines[-1] == "closed" and any(line.startswith("revoked") for line in java.lines)
        wait_until(lambda: other.owned() == {0, 1, 2, 3}, what="the librdkafka member to take every partition")
        more = produce_ids(b, topic, range(4), 2, start=5)
        wait_until(lambda: {(e.partition, e.offset) for e in log.of("rec")} >= {(p, o) for p, rs in more.items()
                                                                                 for o, _ in rs},
                   what="the records produced after the Java member left")
        # the Java member's partitions were picked up at its commits: nothing it read is read again
        again = java.records() & {(e.partition, e.offset) for e in log.of("rec")}
        assert not again, f"records read by both members: {sorted(again)}"
    finally:
        java.stop()
        other.stop()
    assert committed(b, group, topic, range(4)) == {p: 7 for p in range(4)}
    assert sorted(produced) == [0, 1, 2, 3]
