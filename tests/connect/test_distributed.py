"""Distributed mode: two worker processes of one group; one SIGKILLed, its tasks move, no record lost."""

from __future__ import annotations

from pathlib import Path

from broker_process import BrokerProcess
from connect_helpers import WorkerProcess
from waiting import wait_until

import pytest


@pytest.fixture
def broker(tmp_path):
    b = BrokerProcess(tmp_path / "broker").start()
    yield b
    b.stop()


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_two_workers_one_killed_tasks_move_without_loss(broker, tmp_path):
    props = {"bootstrap.servers": broker.bootstrap, "group.id": "connect-cluster",
             "config.storage.topic": "connect-configs", "offset.storage.topic": "connect-offsets",
             "status.storage.topic": "connect-status", "config.storage.replication.factor": "1",
             "offset.storage.replication.factor": "1", "status.storage.replication.factor": "1",
             "offset.storage.partitions": "3", "status.storage.partitions": "2",
             "key.converter": "org.apache.kafka.connect.storage.StringConverter",
             "value.converter": "org.apache.kafka.connect.storage.StringConverter",
             "offset.flush.interval.ms": "1000", "session.timeout.ms": "6000", "heartbeat.interval.ms": "1000",
             "rebalance.timeout.ms": "20000"}
    a = WorkerProcess("distributed", tmp_path / "a", props).start()
    b = WorkerProcess("distributed", tmp_path / "b", props).start()
    try:
        source, sink = tmp_path / "in.txt", tmp_path / "out.txt"
        source.write_text("".join(f"line-{i}\n" for i in range(50)))
        code, body = a.request("POST", "/connectors", {"name": "file-source", "config": {
            "connector.class": "FileStreamSource", "file": str(source), "topic": "dist"}})
        assert code == 201, body
        code, body = b.request("POST", "/connectors", {"name": "file-sink", "config": {
            "connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector", "file": str(sink),
            "topics": "dist"}})
        assert code == 201, body
        assert sorted(a.request("GET", "/connectors")[1]) == ["file-sink", "file-source"]
        wait_until(lambda: len(set(_lines(sink))) == 50, "the first 50 lines in the sink file", 90)

        def workers() -> dict[str, set[str]]:
            out: dict[str, set[str]] = {}
            for name in ("file-source", "file-sink"):
                st = a.request("GET", f"/connectors/{name}/status")[1]
                for t in st["tasks"]:
                    if t["state"] == "RUNNING":
                        out.setdefault(t["worker_id"], set()).add(name)
            return out
        spread = wait_until(lambda: (w := workers()) and sum(len(v) for v in w.values()) == 2 and w,
                            "both tasks running")
        assert len(spread) == 2, f"tasks should be spread over both workers: {spread}"

        b.kill()
        with open(source, "a") as f:
            f.write("".join(f"line-{i}\n" for i in range(50, 100)))
        wait_until(lambda: workers() == {f"127.0.0.1:{a.port}": {"file-source", "file-sink"}},
                   "both tasks on the surviving worker", 60)
        wait_until(lambda: set(_lines(sink)) >= {f"line-{i}" for i in range(100)}, "all 100 lines, none lost", 90)
        assert set(_lines(sink)) == {f"line-{i}" for i in range(100)}
    finally:
        b.kill()
        a.stop()
