"""LogManager: log directories, placement, restart, checkpoints, deletion."""

from __future__ import annotations

import os

import pytest
from waiting import wait_until

from samsa.protocol.batch import iter_headers, validate
from samsa.protocol.records import build_batch
from samsa.storage import InconsistentBrokerMetadataError, LogConfig, LogManager, PartitionLog

T0 = 1_700_000_000_000
DEFAULT = LogConfig()


def append(log: PartitionLog, n: int = 1):
    buf = bytearray(build_batch([(None, b"value", T0)] * n))
    return log.append(buf, validate(buf), now_ms=T0)


def manager(dirs, **kw) -> LogManager:
    m = LogManager(dirs, default_config=DEFAULT, **kw)
    m.load(lambda topic: DEFAULT)
    return m


def test_placement_in_emptiest_dir(tmp_path):
    dirs = [tmp_path / "a", tmp_path / "b", tmp_path / "c"]
    m = manager(dirs)
    logs = [m.create("t", p, DEFAULT) for p in range(6)]
    placed = [m.log_dir_of(log) for log in logs]
    assert sorted(placed) == sorted(dirs * 2)
    assert (dirs[0] / "t-0").is_dir() and (dirs[1] / "t-1").is_dir() and (dirs[2] / "t-2").is_dir()
    assert m.create("t", 0, DEFAULT) is logs[0]
    assert m.get("t", 5) is logs[5] and m.get("t", 9) is None
    assert len(list(m.partitions())) == 6
    m.close()


def test_restart_after_clean_close(tmp_path):
    dirs = [tmp_path / "a", tmp_path / "b"]
    m = manager(dirs, broker_id=3, cluster_id="c1")
    for p in range(4):
        log = m.create("orders", p, DEFAULT)
        for _ in range(p + 1):
            append(log, 2)
    m.get("orders", 3).delete_records_before(3)
    m.close()
    for d in dirs:
        assert (d / ".kafka_cleanshutdown").exists()
        assert "broker.id=3" in (d / "meta.properties").read_text()
        assert "cluster.id=c1" in (d / "meta.properties").read_text()
    rp = (dirs[1] / "recovery-point-offset-checkpoint").read_text()
    assert rp == "0\n2\norders 1 4\norders 3 8\n"
    lso = (dirs[1] / "log-start-offset-checkpoint").read_text()
    assert lso == "0\n2\norders 1 0\norders 3 3\n"

    m = manager(dirs, broker_id=3)
    assert m.cluster_id == "c1"
    assert not (dirs[0] / ".kafka_cleanshutdown").exists()  # a crash from now on is unclean
    assert sorted((l.topic, l.partition, l.log_end_offset) for l in m.partitions()) == [
        ("orders", 0, 2), ("orders", 1, 4), ("orders", 2, 6), ("orders", 3, 8),
    ]
    assert m.get("orders", 3).log_start_offset == 3
    assert m.log_dir_of(m.get("orders", 1)) == dirs[1]
    assert append(m.get("orders", 0)).base_offset == 2
    m.close()


def test_restart_after_crash_recovers(tmp_path):
    dirs = [tmp_path / "a"]
    m = manager(dirs, recovery_threads_per_dir=2)
    logs = [m.create("t", p, DEFAULT) for p in range(3)]
    for log in logs:
        append(log, 3)
        append(log, 3)
    path = logs[1].segments[-1].path
    for log in logs:
        log.close_handles()  # crash
    os.truncate(path, os.path.getsize(path) - 1)
    m = manager(dirs, recovery_threads_per_dir=2)
    assert [m.get("t", p).log_end_offset for p in range(3)] == [6, 3, 6]
    m.close()


def test_delete_partition(tmp_path):
    m = manager([tmp_path / "a"])
    log = m.create("gone", 0, DEFAULT)
    append(log)
    m.delete("gone", 0)
    assert m.get("gone", 0) is None
    # renamed at once (a crash now: the next load removes it), its files removed on the manager's thread
    assert all(n.endswith("-delete") for n in os.listdir(tmp_path / "a") if n.startswith("gone"))
    wait_until(lambda: not [n for n in os.listdir(tmp_path / "a") if n.startswith("gone")], "the files removed")
    m.close()


def test_load_finishes_deletions_and_skips_garbage(tmp_path):
    d = tmp_path / "a"
    (d / "old-0.0123456789abcdef0123456789abcdef-delete").mkdir(parents=True)
    (d / "old-0.0123456789abcdef0123456789abcdef-delete" / "00000000000000000000.log").write_bytes(b"x")
    (d / "not a partition").mkdir()
    (d / "lost+found").mkdir()
    (d / "stray-file").write_text("hello")
    m = manager([d])
    assert not (d / "old-0.0123456789abcdef0123456789abcdef-delete").exists()
    assert list(m.partitions()) == []
    m.close()


def test_broker_id_mismatch_refused(tmp_path):
    m = manager([tmp_path / "a"], broker_id=1)
    m.close()
    m = manager([tmp_path / "a"], broker_id=1, cluster_id="c0")  # learns the cluster id
    m.close()
    assert "cluster.id=c0" in (tmp_path / "a" / "meta.properties").read_text()
    with pytest.raises(InconsistentBrokerMetadataError, match="broker.id=1"):
        manager([tmp_path / "a"], broker_id=2)
    with pytest.raises(InconsistentBrokerMetadataError):
        manager([tmp_path / "a"], broker_id=1, cluster_id="other")


def test_topic_configs_applied_on_load(tmp_path):
    m = manager([tmp_path / "a"])
    m.create("small", 0, LogConfig(segment_bytes=200))
    m.close()
    m = LogManager([tmp_path / "a"], default_config=DEFAULT)
    m.load(lambda topic: LogConfig(segment_bytes=200) if topic == "small" else DEFAULT)
    log = m.get("small", 0)
    assert log.config.segment_bytes == 200
    for _ in range(5):
        append(log, 2)
    assert len(log.segments) > 1
    m.close()


def test_run_retention_and_flush(tmp_path):
    config = LogConfig(segment_bytes=150, retention_ms=1000)
    m = manager([tmp_path / "a"])
    log = m.create("t", 0, config)
    for _ in range(6):
        append(log, 1)
    segments = len(log.segments)
    assert segments > 2
    m.run_flush(T0)
    assert log.recovery_point == log.segments[-1].base_offset
    m.checkpoint()
    text = (tmp_path / "a" / "recovery-point-offset-checkpoint").read_text()
    assert text == f"0\n1\nt 0 {log.recovery_point}\n"
    m.run_retention(T0 + 10_000)
    assert len(log.segments) == 1 and log.log_start_offset == 6
    assert [h.base_offset for _, h in iter_headers(log.read(6, 100))] == []
    m.close()


def test_duplicate_partition_in_two_dirs(tmp_path):
    for d in ("a", "b"):
        PartitionLog.open(tmp_path / d / "t-0", DEFAULT).close()
    with pytest.raises(Exception, match="t-0"):
        manager([tmp_path / "a", tmp_path / "b"])
