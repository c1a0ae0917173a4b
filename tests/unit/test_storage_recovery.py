"""PartitionLog crash recovery and index rebuilding."""

from __future__ import annotations

import os

import pytest

from samsa.protocol.batch import iter_headers, validate
from samsa.protocol.records import build_batch
from samsa.storage import LogConfig, PartitionLog

T0 = 1_700_000_000_000
CONFIG = LogConfig(index_interval_bytes=256)


def make_batch(n: int = 2, ts: int = T0, size: int = 40) -> bytearray:
    return bytearray(build_batch([(b"k", b"v" * size, ts + i) for i in range(n)]))


def append(log: PartitionLog, buf: bytearray | None = None):
    buf = make_batch() if buf is None else buf
    return log.append(buf, validate(buf), now_ms=T0)


def offsets(data: bytes) -> list[int]:
    return [h.base_offset for _, h in iter_headers(data)]


def filled(tmp_path, batches: int = 50, config: LogConfig = CONFIG) -> tuple[PartitionLog, int]:
    plog = PartitionLog.open(tmp_path / "t-0", config)
    for i in range(batches):
        append(plog, make_batch(ts=T0 + i))
    return plog, len(make_batch())


def crash(plog: PartitionLog) -> None:
    """Stop without closing: nothing flushed, no snapshot, indexes unwritten."""
    plog.close_handles()


def seg_path(plog: PartitionLog, suffix: str, i: int = -1):
    return plog.segments[i].path.with_suffix(suffix)


def test_truncated_tail(tmp_path):
    plog, one = filled(tmp_path)
    path = seg_path(plog, ".log")
    crash(plog)
    os.truncate(path, one * 50 - 7)  # cut inside the last batch
    plog = PartitionLog.open(tmp_path / "t-0", CONFIG)
    assert plog.log_end_offset == 98
    assert os.path.getsize(path) == one * 49
    assert offsets(plog.read(90, 1 << 20)) == [90, 92, 94, 96]
    assert append(plog).base_offset == 98
    plog.close()
    plog = PartitionLog.open(tmp_path / "t-0", CONFIG, recover=False)
    assert plog.log_end_offset == 100
    plog.close()


def test_truncated_tail_detected_even_after_clean_marker(tmp_path):
    plog, one = filled(tmp_path)
    path = seg_path(plog, ".log")
    plog.close()
    with open(path, "ab") as f:
        f.write(b"\x00" * 30)  # a partial header
    plog = PartitionLog.open(tmp_path / "t-0", CONFIG, recover=False)
    assert plog.log_end_offset == 100
    assert os.path.getsize(path) == one * 50
    plog.close()


def test_corrupted_byte_in_last_batch(tmp_path):
    plog, one = filled(tmp_path)
    path = seg_path(plog, ".log")
    crash(plog)
    with open(path, "r+b") as f:
        f.seek(one * 49 + 70)  # inside the records of the last batch, under the CRC
        b = f.read(1)
        f.seek(one * 49 + 70)
        f.write(bytes([b[0] ^ 0xFF]))
    plog = PartitionLog.open(tmp_path / "t-0", CONFIG)
    assert plog.log_end_offset == 98
    validate(plog.read(0, 1 << 20))
    assert append(plog).base_offset == 98
    plog.close()


def test_corruption_in_middle_deletes_later_segments(tmp_path):
    config = LogConfig(segment_bytes=len(make_batch()) * 10, index_interval_bytes=256)
    plog, one = filled(tmp_path, config=config)
    assert len(plog.segments) == 5
    path = seg_path(plog, ".log", 1)
    crash(plog)
    with open(path, "r+b") as f:
        f.seek(one * 3 + 65)
        f.write(b"\xde\xad")
    plog = PartitionLog.open(tmp_path / "t-0", config)
    assert [s.base_offset for s in plog.segments] == [0, 20]
    assert plog.log_end_offset == 26
    assert not (tmp_path / "t-0" / "00000000000000000040.log").exists()
    assert append(plog).base_offset == 26
    plog.close()


def test_recovery_point_skips_flushed_segments(tmp_path):
    config = LogConfig(segment_bytes=len(make_batch()) * 10, index_interval_bytes=256)
    plog, one = filled(tmp_path, config=config)
    plog.maybe_flush(T0)  # rolled segments become durable
    rp = plog.recovery_point
    assert rp == 80
    first = seg_path(plog, ".log", 0)
    crash(plog)
    with open(first, "r+b") as f:  # corruption below the recovery point goes unseen
        f.seek(one * 3 + 65)
        f.write(b"\xde\xad")
    plog = PartitionLog.open(tmp_path / "t-0", config, recovery_point=rp)
    assert plog.log_end_offset == 100
    plog.close()


def test_missing_index_rebuilt_on_clean_open(tmp_path):
    plog, _ = filled(tmp_path)
    idx, tidx = seg_path(plog, ".index"), seg_path(plog, ".timeindex")
    plog.close()
    good = idx.read_bytes()
    assert len(good) > 8
    idx.unlink()
    tidx.unlink()
    plog = PartitionLog.open(tmp_path / "t-0", CONFIG, recover=False)
    assert plog.log_end_offset == 100
    assert offsets(plog.read(51, 1)) == [50]
    assert plog.offset_for_timestamp(T0 + 30) == (59, T0 + 30)  # batch 29 is T0+29, T0+30
    plog.close()
    assert idx.read_bytes() == good


@pytest.mark.parametrize("garbage", [b"\x01" * 13, os.urandom(64), b"\x00" * 800], ids=["ones", "random", "zeros"])
def test_garbage_index_rebuilt(tmp_path, garbage):
    plog, _ = filled(tmp_path)
    idx = seg_path(plog, ".index")
    plog.close()
    good = idx.read_bytes()
    idx.write_bytes(garbage)
    plog = PartitionLog.open(tmp_path / "t-0", CONFIG, recover=False)
    for off in range(0, 100, 3):
        assert offsets(plog.read(off, 1)) == [off - off % 2]
    plog.close()
    assert idx.read_bytes() == good


def test_index_entry_not_at_a_batch_is_caught_when_used(tmp_path):
    config = LogConfig(segment_bytes=len(make_batch()) * 25, index_interval_bytes=256)
    plog, one = filled(tmp_path, config=config)
    idx = seg_path(plog, ".index", 0)
    plog.close()
    data = bytearray(idx.read_bytes())
    data[12:16] = (one * 3 + 5).to_bytes(4, "big")  # second entry's position, off by 5
    idx.write_bytes(bytes(data))
    plog = PartitionLog.open(tmp_path / "t-0", config, recover=False)
    for off in range(0, 50):
        assert offsets(plog.read(off, 1)) == [off - off % 2]
    plog.close()


def test_orphan_and_temporary_files_removed(tmp_path):
    plog, _ = filled(tmp_path, batches=3)
    plog.close()
    d = tmp_path / "t-0"
    (d / "00000000000000000500.index").write_bytes(b"")
    (d / "00000000000000000000.log.swap").write_bytes(b"x")
    (d / "00000000000000000000.snapshot.tmp").write_bytes(b"x")
    plog = PartitionLog.open(d, CONFIG, recover=False)
    names = os.listdir(d)
    assert "00000000000000000500.index" not in names
    assert not [n for n in names if n.endswith((".swap", ".tmp"))]
    plog.close()


def test_crash_with_nothing_written(tmp_path):
    plog = PartitionLog.open(tmp_path / "t-0", CONFIG)
    crash(plog)
    plog = PartitionLog.open(tmp_path / "t-0", CONFIG)
    assert plog.log_end_offset == 0
    assert append(plog).base_offset == 0
    plog.close()
