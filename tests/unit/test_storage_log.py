"""PartitionLog: appends, reads, rolling, retention, timestamps, truncation."""

from __future__ import annotations

import os

import pytest

from samsa.protocol.batch import iter_headers, validate
from samsa.protocol.errors import OffsetOutOfRangeError
from samsa.protocol.records import build_batch, decode_batch
from samsa.storage import LogConfig, PartitionLog

T0 = 1_700_000_000_000


def make_batch(n: int = 1, ts: int = T0, size: int = 10, **kw) -> bytearray:
    return bytearray(build_batch([(None, b"x" * size, ts + i) for i in range(n)], **kw))


def append(log: PartitionLog, buf: bytearray | None = None, now: int = T0, **kw):
    buf = make_batch() if buf is None else buf
    return log.append(buf, validate(buf), now_ms=now, **kw)


def offsets(data: bytes) -> list[int]:
    return [h.base_offset for _, h in iter_headers(data)]


@pytest.fixture
def log(tmp_path):
    plog = PartitionLog.open(tmp_path / "topic-0", LogConfig())
    yield plog
    plog.close()


def test_append_assigns_offsets_continuing(log):
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (0, 0, 0)
    a = append(log, make_batch(3), leader_epoch=7)
    b = append(log, make_batch(2))
    assert (a.base_offset, a.last_offset, a.log_append_time, a.duplicate) == (0, 2, -1, False)
    assert (b.base_offset, b.last_offset) == (3, 4)
    assert log.log_end_offset == log.high_watermark == 5
    data = log.read(0, 1 << 20)
    headers = [h for _, h in iter_headers(data)]
    assert [h.base_offset for h in headers] == [0, 3]
    assert [h.partition_leader_epoch for h in headers] == [7, 0]
    validate(data)  # CRCs still good: base offset and epoch lie outside the CRC
    _, records = decode_batch(data, headers[0].size)
    assert [r.offset for r in records] == [3, 4]


def test_log_append_time(tmp_path):
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig(message_timestamp_type="LogAppendTime"))
    info = append(plog, make_batch(2, ts=5), now=T0 + 42)
    assert info.log_append_time == T0 + 42
    data = plog.read(0, 1000)
    validate(data)
    h, records = decode_batch(data)
    assert h.log_append_time and h.max_timestamp == T0 + 42
    assert [r.timestamp for r in records] == [T0 + 42, T0 + 42]
    plog.close()


def test_read_semantics(log):
    for _ in range(10):
        append(log, make_batch(2, size=100))
    size = len(log.read(0, 1 << 20)) // 10
    # max_bytes is honoured, whole batches only
    assert offsets(log.read(0, size * 3 + 5)) == [0, 2, 4]
    # a batch holding the offset may start before it
    assert offsets(log.read(5, size)) == [4]
    # at least one whole batch even if bigger than max_bytes...
    assert len(log.read(6, 10)) == size
    # ...unless told otherwise
    assert log.read(6, 10, min_one_batch=False) == b""
    # max_offset (high watermark): only batches starting below it
    assert offsets(log.read(0, 1 << 20, max_offset=7)) == [0, 2, 4, 6]
    assert offsets(log.read(0, 1 << 20, max_offset=6)) == [0, 2, 4]
    assert log.read(8, 1 << 20, max_offset=8) == b""
    # the log end offset reads empty; outside the log raises
    assert log.read(20, 100) == b""
    with pytest.raises(OffsetOutOfRangeError):
        log.read(21, 100)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 100)


def test_roll_by_segment_bytes_and_file_names(tmp_path):
    one = len(make_batch(size=100))
    plog = PartitionLog.open(tmp_path / "t-3", LogConfig(segment_bytes=one * 3))
    for _ in range(10):
        append(plog, make_batch(size=100))
    assert [s.base_offset for s in plog.segments] == [0, 3, 6, 9]
    names = sorted(os.listdir(plog.dir))
    assert "00000000000000000000.log" in names and "00000000000000000003.log" in names
    assert "00000000000000000009.index" in names and "00000000000000000006.timeindex" in names
    assert all(len(n.split(".")[0]) == 20 for n in names if not n.startswith("leader"))
    # reads cross segment boundaries when max_bytes allows
    assert offsets(plog.read(2, one * 4)) == [2, 3, 4, 5]
    assert offsets(plog.read(0, 1 << 20)) == list(range(10))
    plog.close()


def test_roll_by_segment_ms(tmp_path):
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig(segment_ms=1000))
    append(plog, make_batch(ts=T0), now=T0)
    append(plog, make_batch(ts=T0 + 1000), now=T0 + 1000)
    assert len(plog.segments) == 1
    append(plog, make_batch(ts=T0 + 1001), now=T0 + 1001)
    assert [s.base_offset for s in plog.segments] == [0, 2]
    plog.close()


def test_index_entries_every_interval(tmp_path):
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig(index_interval_bytes=300))
    for i in range(200):
        append(plog, make_batch(2, ts=T0 + i, size=50))
    seg = plog.segments[0]
    assert len(seg.offset_index) > 20
    assert len(seg.time_index) > 20
    for off in range(0, 400, 7):
        assert offsets(plog.read(off, 1))[0] == off - off % 2
    plog.close()
    assert os.path.getsize(seg.offset_index.path) == 8 * len(seg.offset_index)
    assert os.path.getsize(seg.time_index.path) % 12 == 0


def test_offset_for_timestamp(tmp_path):
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig(segment_bytes=2000, index_interval_bytes=200))
    for i in range(100):  # batch i holds offsets 3i..3i+2 with timestamps T0+10i, +1, +2
        append(plog, make_batch(3, ts=T0 + 10 * i, size=20))
    assert len(plog.segments) > 3
    assert plog.offset_for_timestamp(0) == (0, T0)
    assert plog.offset_for_timestamp(T0 + 1) == (1, T0 + 1)
    assert plog.offset_for_timestamp(T0 + 503) == (153, T0 + 510)
    assert plog.offset_for_timestamp(T0 + 991) == (298, T0 + 991)
    assert plog.offset_for_timestamp(T0 + 992) == (299, T0 + 992)
    assert plog.offset_for_timestamp(T0 + 993) is None
    assert plog.max_timestamp_offset() == (299, T0 + 992)
    plog.close()
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig(segment_bytes=2000, index_interval_bytes=200), recover=False)
    assert plog.offset_for_timestamp(T0 + 503) == (153, T0 + 510)
    assert plog.max_timestamp_offset() == (299, T0 + 992)
    plog.close()


def test_offset_for_timestamp_not_monotonic(log):
    append(log, make_batch(1, ts=T0 + 100))
    append(log, make_batch(1, ts=T0 + 50))
    append(log, make_batch(1, ts=T0 + 200))
    assert log.offset_for_timestamp(T0 + 60) == (0, T0 + 100)
    assert log.offset_for_timestamp(T0 + 150) == (2, T0 + 200)
    assert log.max_timestamp_offset() == (2, T0 + 200)


def test_empty_log_timestamps(log):
    assert log.offset_for_timestamp(0) is None
    assert log.max_timestamp_offset() == (-1, -1)


def _segmented(tmp_path, **config) -> PartitionLog:
    one = len(make_batch(size=100))
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig(segment_bytes=one * 2, **config))
    for i in range(10):  # segments of two batches: [0,1] [2,3] ... [8,9]
        append(plog, make_batch(size=100, ts=T0 + i * 1000), now=T0 + i * 1000)
    assert len(plog.segments) == 5
    return plog


def test_retention_by_time(tmp_path):
    plog = _segmented(tmp_path, retention_ms=5000)
    # now - largest timestamp > 5000 for segments ending at 1000 and 3000
    assert plog.enforce_retention(T0 + 8500) == 2
    assert [s.base_offset for s in plog.segments] == [4, 6, 8]
    assert plog.log_start_offset == 4
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(3, 100)
    assert offsets(plog.read(4, 1 << 20)) == [4, 5, 6, 7, 8, 9]
    assert not (plog.dir / "00000000000000000000.log").exists()
    plog.close()


def test_retention_by_time_rolls_an_expired_active_segment(tmp_path):
    plog = _segmented(tmp_path, retention_ms=5000)
    assert plog.enforce_retention(T0 + 100_000) == 5
    assert len(plog.segments) == 1 and plog.segments[0].size == 0
    assert plog.log_start_offset == plog.log_end_offset == 10
    assert append(plog).base_offset == 10
    plog.close()


def test_retention_respects_high_watermark(tmp_path):
    plog = _segmented(tmp_path, retention_ms=5000)
    plog.set_high_watermark(3)
    assert plog.enforce_retention(T0 + 100_000) == 1  # only [0,1] is wholly below the HW
    assert plog.log_start_offset == 2
    plog.close()


def test_retention_by_size(tmp_path):
    one = len(make_batch(size=100))
    plog = _segmented(tmp_path, retention_bytes=one * 5)
    assert plog.enforce_retention(T0 + 10_000) == 2  # 10 batches -> keep 6 (>= 5)
    assert [s.base_offset for s in plog.segments] == [4, 6, 8]
    assert plog.size_bytes() == one * 6
    plog.close()


def test_retention_either_condition_and_compact_policy(tmp_path):
    one = len(make_batch(size=100))
    plog = _segmented(tmp_path, retention_ms=7500, retention_bytes=one * 6)
    assert plog.enforce_retention(T0 + 10_000) == 2  # time deletes [0,1] ; size then [2,3]
    assert plog.log_start_offset == 4
    plog.close()
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig(segment_bytes=one * 2, retention_ms=1, cleanup_policy="compact"))
    assert plog.enforce_retention(T0 + 100_000) == 0
    plog.close()


def test_segment_ms_rolls_during_retention(tmp_path):
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig(segment_ms=1000))
    append(plog, make_batch(ts=T0), now=T0)
    assert plog.enforce_retention(T0 + 500) == 0 and len(plog.segments) == 1
    assert plog.enforce_retention(T0 + 1500) == 0
    assert [s.base_offset for s in plog.segments] == [0, 1]
    plog.close()


def test_delete_records_before(tmp_path):
    plog = _segmented(tmp_path)
    assert plog.delete_records_before(5) == 5
    assert [s.base_offset for s in plog.segments] == [4, 6, 8]
    assert plog.log_start_offset == 5
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(4, 100)
    assert offsets(plog.read(5, 1 << 20)) == [5, 6, 7, 8, 9]
    assert plog.delete_records_before(3) == 5  # never goes back
    with pytest.raises(OffsetOutOfRangeError):
        plog.delete_records_before(11)
    assert plog.delete_records_before(10) == 10
    assert [s.base_offset for s in plog.segments] == [8]  # the active segment stays
    assert plog.read(10, 100) == b""
    plog.close()
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig(), recover=False, log_start_offset=10)
    assert plog.log_start_offset == 10
    plog.close()


def test_truncate_to(tmp_path):
    plog = _segmented(tmp_path)
    plog.truncate_to(5)
    assert plog.log_end_offset == 5
    assert [s.base_offset for s in plog.segments] == [0, 2, 4]
    assert offsets(plog.read(0, 1 << 20)) == [0, 1, 2, 3, 4]
    assert append(plog).base_offset == 5
    plog.truncate_to(4)  # exactly at a segment base
    assert plog.log_end_offset == 4 and plog.segments[-1].size == 0
    assert append(plog).base_offset == 4
    plog.close()
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig())
    assert plog.log_end_offset == 5
    plog.close()


def test_truncate_mid_batch_drops_the_whole_batch(log):
    append(log, make_batch(3))
    append(log, make_batch(3))
    log.truncate_to(4)
    assert log.log_end_offset == 3
    assert offsets(log.read(0, 1000)) == [0]


def test_truncate_fully_and_start_at(tmp_path):
    plog = _segmented(tmp_path)
    plog.truncate_fully_and_start_at(100)
    assert plog.log_start_offset == plog.log_end_offset == 100
    assert [s.base_offset for s in plog.segments] == [100]
    assert append(plog).base_offset == 100
    assert sorted(n for n in os.listdir(plog.dir) if n.endswith(".log")) == ["00000000000000000100.log"]
    plog.close()


def test_flush_policy(tmp_path):
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig(flush_messages=3, flush_ms=1000))
    append(plog, make_batch(2))
    assert plog.recovery_point == 0
    append(plog, make_batch(1))  # 3 messages: flushed on append
    assert plog.recovery_point == 3
    append(plog, make_batch(1))
    assert not plog.maybe_flush(plog._last_flush_ms + 10)
    assert plog.maybe_flush(plog._last_flush_ms + 1000)
    assert plog.recovery_point == 4
    plog.close()


def test_rolled_segments_flushed_by_maybe_flush(tmp_path):
    plog = _segmented(tmp_path)
    assert plog.recovery_point == 0
    assert plog.maybe_flush(T0)
    assert plog.recovery_point == 8  # up to the active segment
    plog.close()


def test_reopen_after_close(tmp_path):
    plog = _segmented(tmp_path)
    before = plog.read(0, 1 << 20)
    plog.close()
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig(segment_bytes=plog.config.segment_bytes), recover=False)
    assert plog.log_end_offset == 10
    assert plog.read(0, 1 << 20) == before
    assert plog.segments[-1].max_timestamp == T0 + 9000
    assert append(plog).base_offset == 10
    plog.close()


def test_closed_log_refuses(tmp_path):
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig())
    plog.close()
    with pytest.raises(Exception):
        append(plog)


def test_follower_append_keeps_offsets(log):
    buf = make_batch(2, base_offset=0)
    log.append_as_follower(buf, validate(buf))
    buf = make_batch(2, base_offset=5, partition_leader_epoch=3)  # gaps are allowed
    log.append_as_follower(buf, validate(buf))
    assert log.log_end_offset == 7
    assert offsets(log.read(0, 1000)) == [0, 5]
    assert log.leader_epochs.latest_epoch == 3
    with pytest.raises(Exception):
        buf = make_batch(1, base_offset=6)
        log.append_as_follower(buf, validate(buf))


def test_leader_epoch_cache(tmp_path):
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig())
    append(plog, make_batch(2), leader_epoch=1)
    append(plog, make_batch(2), leader_epoch=1)
    append(plog, make_batch(2), leader_epoch=3)
    assert plog.leader_epochs.entries == [(1, 0), (3, 4)]
    assert plog.leader_epochs.end_offset_for(2, plog.log_end_offset) == (1, 4)
    assert plog.leader_epochs.end_offset_for(3, plog.log_end_offset) == (3, 6)
    plog.close()
    assert (tmp_path / "t-0" / "leader-epoch-checkpoint").read_text() == "0\n2\n1 0\n3 4\n"
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig())
    assert plog.leader_epochs.entries == [(1, 0), (3, 4)]
    plog.truncate_to(4)
    assert plog.leader_epochs.entries == [(1, 0)]
    plog.close()


def test_delete(tmp_path):
    plog = _segmented(tmp_path)
    plog.delete()
    assert os.listdir(tmp_path) == []


def test_read_max_offset_across_segments(tmp_path):
    plog = _segmented(tmp_path)
    assert offsets(plog.read(1, 1 << 20, max_offset=5)) == [1, 2, 3, 4]
    assert offsets(plog.read(1, 1 << 20, max_offset=4)) == [1, 2, 3]
    plog.close()


def test_roll_when_index_is_full(tmp_path):
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig(index_interval_bytes=1, segment_index_bytes=8 * 4))
    for _ in range(12):
        append(plog)
    assert len(plog.segments) > 1
    assert all(len(s.offset_index) <= 4 for s in plog.segments)
    assert offsets(plog.read(0, 1 << 20)) == list(range(12))
    plog.close()


def test_update_config(log):
    append(log, make_batch(size=100))
    log.update_config(LogConfig(segment_bytes=10))
    append(log, make_batch(size=100))
    assert len(log.segments) == 2


def test_offset_for_timestamp_respects_log_start(tmp_path):
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig())
    append(plog, make_batch(4, ts=T0))  # offsets 0..3, timestamps T0..T0+3
    plog.delete_records_before(2)
    assert plog.offset_for_timestamp(T0) == (2, T0 + 2)
    plog.close()


def test_huge_batches(tmp_path):
    big = 3 << 20  # larger than the segment's scan chunk
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig(segment_bytes=8 << 20))
    for i in range(5):
        append(plog, make_batch(1, ts=T0 + i, size=big))
    assert [s.base_offset for s in plog.segments] == [0, 2, 4]
    assert offsets(plog.read(3, 100)) == [3]
    assert plog.offset_for_timestamp(T0 + 3) == (3, T0 + 3)
    plog.close_handles()  # crash
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig(segment_bytes=8 << 20))
    assert plog.log_end_offset == 5
    assert offsets(plog.read(0, 1 << 30)) == [0, 1, 2, 3, 4]
    plog.close()


def test_config_from_kafka_names():
    config = LogConfig.from_topic_values({"retention.ms": 1000, "cleanup.policy": ["compact", "delete"], "x.y": 1})
    assert config.retention_ms == 1000 and config.delete_enabled
    assert not LogConfig(cleanup_policy="compact").delete_enabled
    assert LogConfig(message_timestamp_type="LogAppendTime").log_append_time


def test_concurrent_appends_and_reads(tmp_path):
    import threading

    plog = PartitionLog.open(tmp_path / "t-0", LogConfig(segment_bytes=4096, index_interval_bytes=128))
    results: list[int] = []
    errors: list[BaseException] = []

    def writer():
        try:
            for _ in range(200):
                results.append(append(plog, make_batch(size=50)).base_offset)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    def reader():
        try:
            for _ in range(300):
                leo = plog.log_end_offset
                if leo:
                    validate(plog.read(leo // 2, 2048))
        except BaseException as e:  # pragma: no cover
            errors.append(e)

    threads = [threading.Thread(target=writer) for _ in range(4)] + [threading.Thread(target=reader)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sorted(results) == list(range(800))
    assert offsets(plog.read(0, 1 << 30)) == list(range(800))
    plog.close()
