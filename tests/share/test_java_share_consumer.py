"""The Java client 4.4.0's KafkaShareConsumer (kafka-clients from Maven Central, the jars
tests/kafka/pom.xml fetches; tests/java/ShareWorker.java run from source) in a share group, against
Kafka 4.4.0 and Samsa, with Samsa's ShareConsumer in the same group: every record accepted exactly
once, the released one redelivered with delivery count 2."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import kafka_process
from samsa.client.share_consumer import ShareConsumer
from share_helpers import WAIT
from waiting import wait_until

JAVA = Path(__file__).resolve().parent.parent / "java"


def test_java_share_consumer(target):
    topic, group = target.names("java")
    target.create_topic(topic)
    target.group_config(group)
    values = ["release"] + [f"v{i}" for i in range(9)]
    target.produce(topic, values)
    proc = subprocess.Popen(["java", "-cp", kafka_process.classpath(), str(JAVA / "ShareWorker.java"),
                             target.bootstrap, group, topic], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(line.strip() for line in proc.stdout), daemon=True)
    reader.start()
    samsa = None
    try:
        def java_records() -> list[tuple[str, int]]:
            return [(ln.split()[3], int(ln.split()[4])) for ln in list(lines) if ln.startswith("rec ")]
        wait_until(lambda: ("release", 2) in java_records() and len({v for v, _ in java_records()}) == len(values),
                   "the Java worker's records", WAIT + 30)
        # Samsa's consumer joins the group: later records go to one of the two, each once.
        samsa = ShareConsumer({"bootstrap.servers": target.bootstrap, "group.id": group})
        samsa.subscribe([topic])
        more = [f"w{i}" for i in range(20)]
        got: list[str] = []
        target.produce(topic, more)
        wait_until(lambda: got.extend(r.value.decode() for r in samsa.poll(0.2)) or
                   set(got) | {v for v, _ in java_records()} >= set(more), "the later records", WAIT)
        samsa.commit_sync()
        proc.stdin.write("stop\n")
        proc.stdin.flush()
        assert proc.wait(WAIT) == 0
        reader.join(10)
    finally:
        if samsa is not None:
            samsa.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    java = java_records()
    assert "closed" in lines, lines[-5:]
    assert sorted(v for v, _ in java if v in values) == sorted(values + ["release"])
    assert [c for v, c in java if v == "release"] == [1, 2]
    later = [v for v, _ in java if v in more] + got
    assert sorted(later) == sorted(more)  # each later record once, to one of the two consumers
