"""Distributed mode: worker processes of one group over REST, against a real broker.

Only the leader writes the config topic (a follower forwards REST writes to it, each lands
once; requests between workers are signed with the session key, KIP-507); rebalances are incremental and cooperative (KIP-415): a joining worker takes only the
tasks that balance the group and nothing else restarts; a SIGKILLed worker's tasks wait
``scheduled.rebalance.max.delay.ms`` before they move.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest

from broker_process import BrokerProcess
from connect_helpers import WorkerProcess, http
from waiting import wait_until

from samsa.client.consumer import Consumer
from samsa.client.types import TopicPartition

DELAY_MS = 4000
PLUGIN = "connect_test_plugins.StartRecordingSourceConnector"


@pytest.fixture
def broker(tmp_path):
    b = BrokerProcess(tmp_path / "broker").start()
    yield b
    b.stop()


def _props(broker: BrokerProcess) -> dict[str, str]:
    return {"bootstrap.servers": broker.bootstrap, "group.id": "connect-cluster",
            "config.storage.topic": "connect-configs", "offset.storage.topic": "connect-offsets",
            "status.storage.topic": "connect-status", "config.storage.replication.factor": "1",
            "offset.storage.replication.factor": "1", "status.storage.replication.factor": "1",
            "offset.storage.partitions": "3", "status.storage.partitions": "2",
            "key.converter": "org.apache.kafka.connect.storage.StringConverter",
            "value.converter": "org.apache.kafka.connect.storage.StringConverter",
            "offset.flush.interval.ms": "1000", "session.timeout.ms": "6000", "heartbeat.interval.ms": "500",
            "rebalance.timeout.ms": "20000", "scheduled.rebalance.max.delay.ms": str(DELAY_MS)}


def _config_records(bootstrap: str) -> list[tuple[str, bytes | None]]:
    tp = TopicPartition("connect-configs", 0)
    c = Consumer({"bootstrap.servers": bootstrap, "enable.auto.commit": "false"})
    try:
        c.assign([tp])
        c.seek_to_beginning([tp])
        end = c.end_offsets([tp], timeout=30)[tp]
        out: list[tuple[str, bytes | None]] = []
        deadline = time.monotonic() + 30
        while c.position(tp) < end and time.monotonic() < deadline:
            out += [(r.key.decode(), r.value) for r in c.poll(0.5)]
        return out
    finally:
        c.close()


def _owners(worker: WorkerProcess, name: str, count: int) -> dict[int, str] | None:
    """task → worker id, once all ``count`` tasks are RUNNING."""
    code, st = worker.request("GET", f"/connectors/{name}/status")
    if code != 200 or len(st["tasks"]) != count or any(t["state"] != "RUNNING" for t in st["tasks"]):
        return None
    return {t["id"]: t["worker_id"] for t in st["tasks"]}


def _starts(path: Path) -> Counter:
    return Counter(tuple(map(int, line.split())) for line in path.read_text().splitlines()) if path.exists() \
        else Counter()


def test_leader_writes_joins_move_only_what_balances_departures_wait_for_the_delay(broker, tmp_path):
    props = _props(broker)
    a = WorkerProcess("distributed", tmp_path / "a", props).start()
    workers = [a]
    try:
        wait_until(lambda: "Assignment of generation 1 " in a.log_text(), "the first worker leading the group")
        b = WorkerProcess("distributed", tmp_path / "b", props).start()
        workers.append(b)
        wait_until(lambda: "Rebalance of generation" in b.log_text(), "the second worker joining")
        assert "Assignment of generation" not in b.log_text(), "the second worker must be a follower"

        # ---- every REST write through the follower, forwarded to the leader, lands once
        ops = {"connector.class": PLUGIN, "starts.file": str(tmp_path / "ops-starts"), "tasks.max": "1"}
        code, body = b.request("POST", "/connectors", {"name": "ops", "config": ops})
        assert code == 201 and body["name"] == "ops", body
        code, body = b.request("POST", "/connectors", {"name": "ops", "config": ops})
        assert (code, body["error_code"], body["message"]) == (409, 409, "Connector ops already exists")
        code, body = b.request("PUT", "/connectors/ops/config", {**ops, "tasks.max": "2"})
        assert code == 200, body
        assert b.request("PUT", "/connectors/ops/pause")[0] == 202
        assert b.request("PUT", "/connectors/ops/pause?forward=false") == (409, {
            "error_code": 409,
            "message": "Cannot complete request because of a conflicting operation (e.g. worker rebalance)"})
        assert b.request("PUT", "/connectors/ops/resume")[0] == 202
        wait_until(lambda: _owners(b, "ops", 2), "the ops connector's two tasks running")
        assert b.request("DELETE", "/connectors/ops")[0] == 204
        assert b.request("GET", "/connectors/ops")[0] == 404
        keys = Counter(k for k, _ in _config_records(broker.bootstrap) if not k.startswith(("task-", "commit-")))
        # create, update, delete; + pause, resume; the leader's one session key (connect.protocol=sessioned)
        assert keys == {"connector-ops": 3, "target-state-ops": 4, "session-key": 1}, keys

        # ---- task configs between workers must carry the session key's signature
        code, body = a.request("PUT", "/connectors/starter/tasks", [{"task": "0"}])
        assert (code, body["message"]) == (400, "Internal request missing required signature"), body
        code, body = http("PUT", a.url + "/connectors/starter/tasks", [{"task": "0"}], headers={
            "X-Connect-Authorization": "bm90IGEgc2lnbmF0dXJl", "X-Connect-Request-Signature-Algorithm": "HmacSHA256"})
        assert (code, body["message"]) == (403, "Internal request contained invalid signature."), body

        # ---- four tasks over two workers
        starts_file = tmp_path / "starts"
        code, body = b.request("POST", "/connectors", {"name": "starter", "config": {
            "connector.class": PLUGIN, "starts.file": str(starts_file), "tasks.max": "4"}})
        assert code == 201, body
        before = wait_until(lambda: (o := _owners(a, "starter", 4)) and len(set(o.values())) == 2 and o,
                            "four tasks running over both workers")
        assert all(n == 1 for n in _starts(starts_file).values()), _starts(starts_file)

        # ---- a third worker joins: it takes one task; no other task restarts
        c = WorkerProcess("distributed", tmp_path / "c", props).start()
        workers.append(c)
        c_id = f"127.0.0.1:{c.port}"
        after = wait_until(lambda: (o := _owners(a, "starter", 4)) and c_id in o.values() and o,
                           "a task running on the third worker", 60)
        moved = {t for t in after if after[t] != before[t]}
        assert len(moved) == 1 and after[next(iter(moved))] == c_id, (before, after)
        starts = _starts(starts_file)
        pids = {f"127.0.0.1:{w.port}": w.proc.pid for w in workers}
        for t in range(4):
            expected = {(t, pids[before[t]]): 1} if t not in moved else {(t, pids[before[t]]): 1, (t, c.proc.pid): 1}
            assert {k: n for k, n in starts.items() if k[0] == t} == expected, (t, starts)

        # ---- the third worker is SIGKILLed: its task moves only after the delay, nothing else restarts
        (lost,) = moved
        c.kill()
        killed_at = time.monotonic()
        final = wait_until(lambda: (o := _owners(a, "starter", 4)) and o[lost] != c_id and o,
                           "the lost task running again", 60)
        waited = time.monotonic() - killed_at
        assert waited >= DELAY_MS / 1000, f"the task moved after {waited:.1f} s, before the delay"
        assert "holding back" in a.log_text()
        starts = _starts(starts_file)
        assert sum(starts.values()) == 6, starts  # four first starts, the move to C, the move back
        assert {t: o for t, o in final.items() if t != lost} == {t: o for t, o in after.items() if t != lost}

        # ---- a task restart goes to the task's worker: from the follower through the leader, or from the leader
        starts = _starts(starts_file)
        on_a = next(t for t, o in final.items() if o == f"127.0.0.1:{a.port}")
        on_b = next(t for t, o in final.items() if o == f"127.0.0.1:{b.port}")
        assert b.request("POST", f"/connectors/starter/tasks/{on_a}/restart")[0] == 204
        assert a.request("POST", f"/connectors/starter/tasks/{on_b}/restart")[0] == 204
        assert b.request("POST", "/connectors/starter/tasks/9/restart")[0] == 404
        wait_until(lambda: _starts(starts_file) - starts == Counter({(on_a, a.proc.pid): 1, (on_b, b.proc.pid): 1}),
                   "each restarted task started once more, on its own worker")

        # ---- the leader SIGKILLed: until the group notices (session.timeout.ms), a write through the follower
        # cannot be forwarded: Kafka's answer, 500 and the I/O error
        a.kill()
        code, body = b.request("PUT", "/connectors/starter/pause")
        assert code == 500 and body["message"].startswith("IO Error trying to forward REST request: "), body
    finally:
        for w in reversed(workers):
            w.stop()


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@pytest.mark.parametrize("protocol", ["sessioned", "compatible", "eager"])
def test_two_workers_one_killed_tasks_move_without_loss(broker, tmp_path, protocol):
    """A FileStreamSource and a FileStreamSink on two workers; one SIGKILLed: both tasks then run on the
    survivor (after the delay; at once with the eager protocol), resuming from the stored offsets, and no
    line is lost."""
    # the sink task's consumer is a member of group connect-file-sink: a dead one leaves it after its session
    props = {**_props(broker), "connect.protocol": protocol, "consumer.session.timeout.ms": "6000"}
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
