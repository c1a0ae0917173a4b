"""Disks (KIP-112): a log directory on a small filesystem that fills up is taken offline as Kafka
takes it, while the broker goes on serving from its other directories.

Each test mounts a tmpfs of fixed size (the tests run as root; it is unmounted in teardown)
as one of the broker's ``log.dirs`` and fills it with a file of its own, leaving little room.
Then, over TCP with confluent-kafka and raw requests: the partitions there answer
KAFKA_STORAGE_ERROR, the broker's log names the directory and why, the partitions of the
healthy directory keep serving, DescribeLogDirs shows the failed directory with
KAFKA_STORAGE_ERROR; a restart with the directory still full starts and serves the healthy
one; once space is freed, a restart brings the directory back with everything acknowledged
before the failure. The broker stops only when every log directory has failed. The file
metadata store, when its directory is full, refuses the change and changes nothing.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from samsa.protocol.records import build_batch

from compat_helpers import (WAIT, BrokerProcess, consume, create_topic, producer, raw_call, start, wait_until)

KAFKA_STORAGE_ERROR, COORDINATOR_NOT_AVAILABLE = 56, 15
VALUE = b"x" * 20000


class Tmpfs:
    """A tmpfs of ``size`` bytes at ``path``, with a filler file to take most of it."""

    def __init__(self, path: Path, size: int):
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)
        self.filler = path / "filler"

    def fill(self, leave: int) -> None:
        """Grow the filler until ``leave`` bytes are free."""
        free = os.statvfs(self.path).f_bavail * os.statvfs(self.path).f_frsize
        with open(self.filler, "ab") as f:
            f.write(b"\0" * max(free - leave, 0))

    def free_space(self) -> None:
        self.filler.unlink(missing_ok=True)

    def unmount(self) -> None:
        subprocess.run(["umount", "-l", str(self.path)], check=False)


@pytest.fixture
def tmpfs(tmp_path):
    mounts: list[Tmpfs] = []

    def make(name: str, size: int = 4 << 20) -> Tmpfs:
        t = Tmpfs(tmp_path / name, size)
        mounts.append(t)
        return t
    yield make
    for t in mounts:
        t.unmount()


def _dirs(b) -> dict[str, dict]:
    r = raw_call(b.port, 35, 1, {"topics": None})
    return {d["log_dir"]: d for d in r["results"]}


def _placement(b) -> dict[tuple[str, int], str]:
    return {(t["name"], p["partition_index"]): d["log_dir"]
            for d in _dirs(b).values() for t in d["topics"] for p in t["partitions"]}


def _produce_raw(b, topic: str, partition: int) -> int:
    records = build_batch([(None, b"raw", int(time.time() * 1000), [])])
    r = raw_call(b.port, 0, 9, {"transactional_id": None, "acks": -1, "timeout_ms": int(WAIT * 1000),
                                "topic_data": [{"name": topic, "partition_data": [
                                    {"index": partition, "records": records}]}]})
    return r["responses"][0]["partition_responses"][0]["error_code"]


def _produce_until_failure(b, topic: str, partitions: list[int], limit: int = 2000) -> dict[int, list[bytes]]:
    """acks=all records to ``partitions`` until one fails: what was acknowledged, per partition."""
    p = producer(b.bootstrap, acks="all", **{"message.timeout.ms": 5000, "retries": 0})
    acked: dict[int, list[bytes]] = {i: [] for i in partitions}
    failed: list = []

    def dr(err, msg):
        if err is None:
            acked[msg.partition()].append(msg.value())
        else:
            failed.append(err)
    n = 0
    while not failed and n < limit:
        for i in partitions:
            p.produce(topic, b"%06d" % n + VALUE, partition=i, on_delivery=dr)
            n += 1
        p.flush(WAIT)
    p.flush(WAIT)
    assert failed, f"{n} records fit in the small directory"
    return acked


def _values(b, topic: str, partition: int) -> list[bytes]:
    return [r.value for r in consume(b.bootstrap, topic, partition)]


def test_full_log_dir_goes_offline_and_comes_back(tmp_path, tmpfs):
    small = tmpfs("small")
    healthy = tmp_path / "healthy"
    b = BrokerProcess(tmp_path / "broker", **{"log.dirs": f"{healthy},{small.path}",
                                              "log.flush.offset.checkpoint.interval.ms": 1000})
    start(b)
    try:
        create_topic(b.bootstrap, "spread", partitions=4)
        placement = _placement(b)
        on_small = [i for i in range(4) if placement[("spread", i)] == str(small.path)]
        on_healthy = [i for i in range(4) if placement[("spread", i)] == str(healthy)]
        assert on_small and on_healthy, placement
        small.fill(leave=600_000)
        acked = _produce_until_failure(b, "spread", on_small)
        wait_until(lambda: _dirs(b)[str(small.path)]["error_code"] == KAFKA_STORAGE_ERROR,
                   what="DescribeLogDirs showing the failed directory")
        assert _dirs(b)[str(healthy)]["error_code"] == 0
        log = b.log_text()
        assert f"Error while accessing log dir {small.path}" in log and "No space left on device" in log, log[-3000:]
        assert "Traceback" not in log, log[-5000:]
        # its partitions answer KAFKA_STORAGE_ERROR; the healthy directory keeps serving, groups too
        assert _produce_raw(b, "spread", on_small[0]) == KAFKA_STORAGE_ERROR
        more = [b"healthy-%d" % i for i in range(20)]
        p = producer(b.bootstrap, acks="all")
        for v in more:
            p.produce("spread", v, partition=on_healthy[0])
        assert p.flush(WAIT) == 0
        assert _values(b, "spread", on_healthy[0])[-20:] == more
        c_group = consume(b.bootstrap, "spread", on_healthy[0], **{"group.id": "after-failure"})
        assert c_group[-1].value == more[-1]
        assert b.proc.poll() is None

        # a restart with the directory still full starts and serves the healthy directory
        b.stop()
        start(b)
        assert _produce_raw(b, "spread", on_healthy[0]) == 0
        assert _values(b, "spread", on_healthy[0])[-21:-1] == more
        # (whether the full directory is offline again depends on what its recovery must write)

        # space freed, restarted: the directory is back with everything acknowledged before the failure
        b.stop()
        small.free_space()
        start(b)
        assert _dirs(b)[str(small.path)]["error_code"] == 0
        for i in on_small:
            assert _values(b, "spread", i)[:len(acked[i])] == acked[i], f"partition {i} lost acknowledged records"
        assert _produce_raw(b, "spread", on_small[0]) == 0
        assert "Traceback" not in b.log_text()
    finally:
        b.stop()


def test_broker_stops_when_every_log_dir_has_failed(tmp_path, tmpfs):
    only = tmpfs("only")
    b = BrokerProcess(tmp_path / "broker", **{"log.dirs": str(only.path),
                                              "metadata.log.dir": str(tmp_path / "meta")})
    start(b)
    try:
        create_topic(b.bootstrap, "doomed")
        only.fill(leave=300_000)
        p = producer(b.bootstrap, acks="all", **{"message.timeout.ms": 5000, "retries": 0})
        for i in range(100):
            p.produce("doomed", VALUE)
            p.poll(0)
            if b.proc.poll() is not None:
                break
        p.flush(10)
        assert b.proc.wait(WAIT) == 1
        log = b.log_text()
        assert f"Shutdown broker because all log dirs in {only.path} have failed" in log, log[-3000:]
    finally:
        b.stop()


def test_metadata_store_on_a_full_disk_changes_nothing(tmp_path, tmpfs):
    meta = tmpfs("meta", size=1 << 20)
    b = BrokerProcess(tmp_path / "broker", **{"metadata.log.dir": str(meta.path)})
    start(b)
    try:
        create_topic(b.bootstrap, "before")
        meta.fill(leave=0)
        body = {"topics": [{"name": "refused", "num_partitions": 1, "replication_factor": 1, "assignments": [],
                            "configs": []}], "timeout_ms": 10000, "validate_only": False}
        r = raw_call(b.port, 19, 5, body)
        assert r["topics"][0]["error_code"] == KAFKA_STORAGE_ERROR, r
        r = raw_call(b.port, 37, 1, {"topics": [{"name": "before", "count": 3, "assignments": None}],
                                     "timeout_ms": 10000, "validate_only": False})
        assert r["results"][0]["error_code"] == KAFKA_STORAGE_ERROR, r
        md = raw_call(b.port, 3, 12, {"topics": None, "allow_auto_topic_creation": False,
                                      "include_topic_authorized_operations": False})
        topics = {t["name"]: len(t["partitions"]) for t in md["topics"]}
        assert topics == {"before": 1}, topics  # nothing half-made in memory
        # a group coordinator cannot get its topic made: retriable, not a broken connection
        r = raw_call(b.port, 10, 1, {"key": "g", "key_type": 0})
        assert r["error_code"] == COORDINATOR_NOT_AVAILABLE, r
        meta.free_space()
        r = raw_call(b.port, 19, 5, body)
        assert r["topics"][0]["error_code"] == 0, r
        b.stop()
        start(b)  # and the file says what the broker said
        md = raw_call(b.port, 3, 12, {"topics": None, "allow_auto_topic_creation": False,
                                      "include_topic_authorized_operations": False})
        assert {t["name"] for t in md["topics"]} >= {"before", "refused"}
        assert "Traceback" not in b.log_text()
    finally:
        b.stop()
