"""Log compaction: samsa.storage.cleaner and its hooks in PartitionLog / LogManager."""

from __future__ import annotations

import os
import threading

import pytest

from samsa.protocol.batch import iter_headers, validate
from samsa.protocol.records import build_batch, decode_batch, iter_batches, iter_records
from samsa.storage import LogConfig, LogManager, PartitionLog
from samsa.protocol.batch import DELETE_HORIZON_BIT
from samsa.storage.cleaner import Cleaner, _CleanedSegment
from samsa.storage.files import CLEANER_OFFSET_CHECKPOINT

T0 = 1_700_000_000_000
DAY = 86_400_000
COMPACT = LogConfig(cleanup_policy="compact", index_interval_bytes=128)


def append(plog: PartitionLog, records, now: int = T0, **kw):
    """Append one batch of ``(key, value)`` or ``(key, value, ts)`` records."""
    recs = [r if len(r) == 3 else (r[0], r[1], now) for r in records]
    buf = bytearray(build_batch([(k if k is None else k.encode() if isinstance(k, str) else k,
                                  v if v is None else v.encode() if isinstance(v, str) else v, ts)
                                 for k, v, ts in recs], **kw))
    return plog.append(buf, validate(buf), now_ms=now)


def contents(plog: PartitionLog, start: int | None = None) -> list[tuple[int, str | None, str | None]]:
    data = plog.read(plog.log_start_offset if start is None else start, 1 << 30)
    return [(r.offset, r.key.decode() if r.key is not None else None,
             r.value.decode() if r.value is not None else None) for r in iter_records(data)]


def latest(rows):
    """What compaction must keep of ``rows`` (all cleanable): the last record of each key."""
    last = {}
    for off, k, v in rows:
        if k is not None:
            last[k] = (off, k, v)
    return sorted(last.values())


def crash(plog: PartitionLog) -> None:
    plog.close_handles()


def files(plog: PartitionLog) -> list[str]:
    return sorted(os.listdir(plog.dir))


@pytest.fixture
def open_log(tmp_path):
    opened = []

    def opener(config: LogConfig = COMPACT, name: str = "t-0", **kw) -> PartitionLog:
        plog = PartitionLog.open(tmp_path / name, config, **kw)
        opened.append(plog)
        return plog

    yield opener
    for plog in opened:
        plog.close()


def fill_rounds(plog: PartitionLog, rounds: int, keys: int = 5, now: int = T0) -> list:
    """``rounds`` segments, each overwriting every key; then an active segment with one
    record. Returns the rows written to the closed segments."""
    for r in range(rounds):
        for k in range(keys):
            append(plog, [(f"k{k}", f"v{r}-{k}")], now=now)
        plog.roll(now)
    rows = contents(plog)
    append(plog, [("active", "a")], now=now)
    return rows


# ---------------------------------------------------------------------------- basics


def test_config_fields_and_overrides():
    c = LogConfig()
    assert (c.delete_retention_ms, c.min_cleanable_dirty_ratio, c.min_compaction_lag_ms, c.max_compaction_lag_ms) == (
        86400000, 0.5, 0, 9223372036854775807)
    assert not c.compact_enabled and c.delete_enabled
    o = LogConfig.from_topic_values({"cleanup.policy": ["compact", "delete"], "min.cleanable.dirty.ratio": 0.25,
                                     "delete.retention.ms": 5, "min.compaction.lag.ms": 7, "max.compaction.lag.ms": 9,
                                     "min.insync.replicas": 2})  # a key of another layer is left out
    assert o.compact_enabled and o.delete_enabled
    assert (o.min_cleanable_dirty_ratio, o.delete_retention_ms, o.min_compaction_lag_ms, o.max_compaction_lag_ms) == (
        0.25, 5, 7, 9)


def test_only_latest_value_of_each_key_kept_offsets_preserved(open_log):
    plog = open_log()
    rows = fill_rounds(plog, 4)
    before_segments = len(plog.segments)
    leo, start = plog.log_end_offset, plog.log_start_offset
    result = Cleaner().clean(plog, T0)
    assert result is not None and result.records_read == 20 and result.records_kept == 5
    assert result.end_offset == plog.segments[-1].base_offset == plog.cleaner_offset
    assert contents(plog) == latest(rows) + [(20, "active", "a")]
    assert (plog.log_end_offset, plog.log_start_offset) == (leo, start)
    assert len(plog.segments) < before_segments  # small cleaned segments grouped into one
    validate(plog.read(0, 1 << 30))  # every batch whole, CRC good
    # appends go on after the clean
    assert append(plog, [("k0", "new")]).base_offset == leo
    assert contents(plog)[-1] == (leo, "k0", "new")


def test_batches_keep_offset_range_and_producer_fields(open_log):
    plog = open_log()
    append(plog, [("a", "1"), ("b", "1"), ("c", "1"), ("d", "1")], producer_id=7, producer_epoch=3,
           base_sequence=0)
    append(plog, [("b", "2"), ("d", "2")])
    plog.roll(T0)
    append(plog, [("x", "x")])
    Cleaner().clean(plog, T0)
    data = plog.read(0, 1 << 30)
    batches = list(iter_batches(data))
    h, recs = batches[0]
    assert (h.base_offset, h.last_offset_delta, h.record_count) == (0, 3, 2)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (7, 3, 0)
    assert [(r.offset, r.key) for r in recs] == [(0, b"a"), (2, b"c")]
    assert [(r.offset, r.key, r.value) for r in batches[1][1]] == [(4, b"b", b"2"), (5, b"d", b"2")]


def test_keyless_records_dropped(open_log):
    plog = open_log()
    append(plog, [(None, "x"), ("k", "1"), (None, "y")])
    append(plog, [(None, "z")])
    plog.roll(T0)
    append(plog, [(None, "active keyless stays")])
    Cleaner().clean(plog, T0)
    assert contents(plog) == [(1, "k", "1"), (4, None, "active keyless stays")]


def test_active_segment_never_cleaned(open_log):
    plog = open_log()
    for i in range(10):
        append(plog, [("k", str(i))])
    before = plog.read(0, 1 << 30)
    assert Cleaner().clean(plog, T0 + DAY) is None
    assert plog.read(0, 1 << 30) == before
    # with closed segments too: the active one keeps its duplicates
    plog.roll(T0)
    for i in range(3):
        append(plog, [("k", f"active{i}")])
    assert Cleaner().clean(plog, T0) is not None
    assert contents(plog) == [(9, "k", "9"), (10, "k", "active0"), (11, "k", "active1"), (12, "k", "active2")]


def test_high_watermark_bounds_cleaning(open_log):
    plog = open_log()
    rows = fill_rounds(plog, 3)
    plog.set_high_watermark(plog.segments[1].base_offset + 1)  # inside the second segment
    result = Cleaner().clean(plog, T0)
    assert result.end_offset == plog.segments[1].base_offset  # only the first segment was cleanable
    assert contents(plog) == rows + [(15, "active", "a")]  # nothing removable in it alone
    plog.set_high_watermark(plog.log_end_offset)
    Cleaner().clean(plog, T0)
    assert contents(plog) == latest(rows) + [(15, "active", "a")]


# ---------------------------------------------------------------------------- tombstones


def test_tombstone_kept_until_delete_retention_passed(open_log):
    config = LogConfig(cleanup_policy="compact", delete_retention_ms=DAY)
    plog = open_log(config)
    append(plog, [("gone", "v1"), ("stays", "s")], now=T0)
    append(plog, [("gone", None)], now=T0 + 5)
    plog.roll(T0)
    append(plog, [("other", "o")], now=T0 + 6)
    cleaner = Cleaner()
    t1 = T0 + 1000
    result = cleaner.clean(plog, t1)
    assert result.next_delete_horizon == t1 + DAY
    assert contents(plog) == [(1, "stays", "s"), (2, "gone", None), (3, "other", "o")]
    # the tombstone's batch carries its delete horizon (KIP-534); timestamps unchanged
    data = plog.read(2, 1 << 30)
    h, recs = decode_batch(data)
    assert h.attributes & DELETE_HORIZON_BIT and h.base_timestamp == t1 + DAY
    assert recs[0].timestamp == T0 + 5 and h.max_timestamp == T0 + 5
    # not yet: nothing due (the dirty part is empty and the horizon not reached)
    assert cleaner.clean(plog, t1 + DAY - 1) is None
    # even a clean forced by new dirty data keeps it before the horizon
    plog.roll(T0)
    append(plog, [("other", "o2")], now=T0 + 7)
    plog.roll(T0)
    append(plog, [("z", "z")], now=T0 + 8)
    assert cleaner.clean(plog, t1 + DAY - 1) is not None
    assert (2, "gone", None) in contents(plog)
    # once the horizon has passed the tombstone goes (the log is due by its horizon alone)
    result = cleaner.clean(plog, t1 + DAY + 1)
    assert result is not None and result.next_delete_horizon is None
    assert contents(plog) == [(1, "stays", "s"), (4, "other", "o2"), (5, "z", "z")]


def test_tombstone_horizon_survives_reopen(open_log, tmp_path):
    plog = open_log(LogConfig(cleanup_policy="compact", delete_retention_ms=100))
    append(plog, [("a", "1")])
    append(plog, [("a", None), ("b", "2")])
    plog.roll(T0)
    append(plog, [("c", "3")])
    Cleaner().clean(plog, T0)
    plog.close()
    plog = open_log(LogConfig(cleanup_policy="compact", delete_retention_ms=100))
    plog.cleaner_offset = 3
    result = Cleaner().clean(plog, T0 + 200)  # a new cleaner: due by the dirty ratio
    assert result is None  # everything is clean: nothing dirty, no horizon known to it
    plog.cleaner_offset = 0  # e.g. the checkpoint was lost: all dirty again
    assert Cleaner().clean(plog, T0 + 200) is not None
    assert contents(plog) == [(2, "b", "2"), (3, "c", "3")]


# ---------------------------------------------------------------------------- when to clean


def test_dirty_ratio_threshold(open_log):
    plog = open_log(LogConfig(cleanup_policy="compact", min_cleanable_dirty_ratio=0.5))
    for r in range(4):
        for k in range(20):
            append(plog, [(f"k{k}", f"r{r}")])
        plog.roll(T0)
    append(plog, [("active", "a")])
    cleaner = Cleaner()
    assert cleaner.clean(plog, T0) is not None
    clean_end = plog.cleaner_offset
    # a small dirty segment: ratio well below 0.5 -> nothing happens
    for k in range(3):
        append(plog, [(f"k{k}", "new")])
    plog.roll(T0)
    append(plog, [("active2", "a")])
    before = plog.read(0, 1 << 30)
    segments = [(s.base_offset, s.size) for s in plog.segments]
    assert cleaner.clean(plog, T0) is None
    assert plog.read(0, 1 << 30) == before and [(s.base_offset, s.size) for s in plog.segments] == segments
    assert plog.cleaner_offset == clean_end
    # a lower threshold (a dynamic config change) makes it due
    plog.update_config(LogConfig(cleanup_policy="compact", min_cleanable_dirty_ratio=0.01))
    result = cleaner.clean(plog, T0)
    assert result is not None and 0 < result.dirty_ratio < 0.5
    assert [r for r in contents(plog) if r[1] == "k0"] == [(81, "k0", "new")]


def test_min_compaction_lag(open_log):
    lag = 60_000
    plog = open_log(LogConfig(cleanup_policy="compact", min_compaction_lag_ms=lag))
    for r in range(3):
        append(plog, [("k", str(r))], now=T0 + r * lag)  # record timestamps T0, T0+lag, T0+2lag
        plog.roll(T0)
    append(plog, [("active", "a")], now=T0 + 3 * lag)
    # at T0 + lag/2 every segment is too young
    assert Cleaner().clean(plog, T0 + lag // 2) is None
    # at T0 + 1.5 lag only the first segment may be cleaned: k=0 is then kept (k=1 is not mapped)
    result = Cleaner().clean(plog, T0 + lag + lag // 2)
    assert result is None or result.end_offset <= 1
    assert [v for _, k, v in contents(plog) if k == "k"] == ["0", "1", "2"]
    # at T0 + 2.5 lag the first two are cleanable: k=0 goes
    result = Cleaner().clean(plog, T0 + 2 * lag + lag // 2)
    assert result is not None and result.end_offset == 2
    assert [v for _, k, v in contents(plog) if k == "k"] == ["1", "2"]


def test_max_compaction_lag_forces_a_clean(open_log):
    config = LogConfig(cleanup_policy="compact", min_cleanable_dirty_ratio=0.99, max_compaction_lag_ms=DAY)
    plog = open_log(config)
    for r in range(2):
        for k in range(10):
            append(plog, [(f"k{k}", f"r{r}")], now=T0)
        plog.roll(T0)
    append(plog, [("active", "a")], now=T0)
    cleaner = Cleaner()
    assert cleaner.clean(plog, T0) is not None  # first clean: everything is dirty
    append(plog, [("k0", "late")], now=T0 + 10)
    plog.roll(T0)
    append(plog, [("active", "b")], now=T0 + 10)
    assert cleaner.clean(plog, T0 + 100) is None  # dirty ratio far below 0.99
    assert cleaner.clean(plog, T0 + 10 + DAY + 1) is not None  # too old: cleaned anyway
    assert [v for _, k, v in contents(plog) if k == "k0"] == ["late"]


def test_max_compaction_lag_rolls_the_active_segment(open_log):
    plog = open_log(LogConfig(cleanup_policy="compact", max_compaction_lag_ms=1000, segment_ms=DAY))
    append(plog, [("k", "1")], now=T0)
    append(plog, [("k", "2")], now=T0)
    assert Cleaner().clean(plog, T0 + 500) is None and len(plog.segments) == 1
    assert Cleaner().clean(plog, T0 + 2000) is not None
    assert contents(plog) == [(1, "k", "2")]


def test_policy_delete_is_not_cleaned(open_log):
    plog = open_log(LogConfig(cleanup_policy="delete"))
    fill_rounds(plog, 3)
    assert Cleaner().clean(plog, T0) is None


def test_compact_delete_also_applies_retention(open_log):
    config = LogConfig(cleanup_policy="compact,delete", retention_ms=DAY)
    plog = open_log(config)
    append(plog, [("a", "old")], now=T0)
    plog.roll(T0)
    append(plog, [("a", "new"), ("b", "1")], now=T0 + DAY)
    plog.roll(T0 + DAY)
    append(plog, [("b", "2")], now=T0 + 2 * DAY)
    Cleaner().clean(plog, T0 + DAY)
    assert contents(plog) == [(1, "a", "new"), (2, "b", "1"), (3, "b", "2")]
    assert plog.enforce_retention(T0 + DAY + DAY // 2) == 0  # the cleaned segment's newest record is recent
    assert plog.enforce_retention(T0 + 2 * DAY + 1) == 1
    assert plog.log_start_offset == 3
    assert contents(plog) == [(3, "b", "2")]
    # compact only: no retention
    plog = open_log(LogConfig(cleanup_policy="compact", retention_ms=DAY), name="t-1")
    append(plog, [("a", "old")], now=T0)
    plog.roll(T0)
    assert plog.enforce_retention(T0 + 10 * DAY) == 0 and contents(plog) == [(0, "a", "old")]


# ---------------------------------------------------------------------------- formats


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches(open_log, codec):
    plog = open_log()
    for r in range(3):
        append(plog, [(f"k{i % 7}", f"r{r}-{i}" * 20) for i in range(30)], compression=codec)
        append(plog, [(f"u{r}", "unique")], compression=codec)
    plog.roll(T0)
    rows = contents(plog)
    append(plog, [("active", "a")], compression=codec)
    Cleaner().clean(plog, T0)
    data = plog.read(0, 1 << 30)
    validate(data)
    kept = [(r.offset, r.key.decode(), r.value.decode()) for r in iter_records(data)]
    assert kept == latest(rows) + [(rows[-1][0] + 1, "active", "a")]
    codecs = {h.compression for _, h in iter_headers(data)}
    assert codecs == {{"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}[codec]}


def test_log_append_time_batches(open_log):
    plog = open_log(LogConfig(cleanup_policy="compact", message_timestamp_type="LogAppendTime",
                              delete_retention_ms=1000))
    append(plog, [("a", "1", 5), ("b", "1", 6), ("a", None, 7)], now=T0)
    plog.roll(T0)
    append(plog, [("c", "1")], now=T0 + 1)
    Cleaner().clean(plog, T0 + 10)
    h, recs = decode_batch(plog.read(0, 1 << 30))
    assert h.log_append_time and h.max_timestamp == T0
    assert [(r.offset, r.key, r.value, r.timestamp) for r in recs] == [(1, b"b", b"1", T0), (2, b"a", None, T0)]


def test_committed_transactions_compacted_aborted_dropped_markers_kept(open_log):
    """Below the LSO every transaction is decided: committed records compact as any others, an
    aborted transaction's batches go (and never shadow an older value), markers stay."""
    from samsa.protocol.control import build_marker
    plog = open_log()
    append(plog, [("a", "plain-a"), ("b", "plain-b")])                                 # 0-1
    committed = bytearray(build_batch([(b"a", b"txn-a", T0)], producer_id=5, producer_epoch=0, base_sequence=0,
                                      is_transactional=True))
    plog.append(committed, validate(committed), now_ms=T0)                             # 2
    m = build_marker(5, 0, 0, True, T0)
    plog.append(m, validate(m), now_ms=T0)                                             # 3 commit
    aborted = bytearray(build_batch([(b"b", b"aborted-b", T0)], producer_id=6, producer_epoch=0, base_sequence=0,
                                    is_transactional=True))
    plog.append(aborted, validate(aborted), now_ms=T0)                                 # 4
    m = build_marker(6, 0, 0, False, T0)
    plog.append(m, validate(m), now_ms=T0)                                             # 5 abort
    append(plog, [("c", "plain-c")])                                                   # 6
    open_txn = bytearray(build_batch([(b"a", b"open-a", T0)], producer_id=7, producer_epoch=0, base_sequence=0,
                                     is_transactional=True))
    plog.roll(T0)
    plog.append(open_txn, validate(open_txn), now_ms=T0)                               # 7, still open
    plog.roll(T0)
    append(plog, [("x", "x")])
    Cleaner().clean(plog, T0)
    rows = [(o, k, v) for o, k, v in contents(plog)]
    # "a" committed in the transaction supersedes its plain value; the aborted "b" does not; the open
    # transaction's segment is past the LSO and not cleaned
    assert (0, "a", "plain-a") not in rows and (2, "a", "txn-a") in rows
    assert (1, "b", "plain-b") in rows and not any(v == "aborted-b" for _, _, v in rows)
    assert (7, "a", "open-a") in rows
    headers = [h for _, h in iter_headers(plog.read(0, 1 << 30))]
    assert [h.base_offset for h in headers if h.is_control] == [3, 5]


def test_aborted_transactions_survive_cleaning_merged_segments(open_log):
    """Cleaned segments are merged into one: the aborted transactions of their .txnindex files go with them."""
    from samsa.protocol.control import build_marker
    from samsa.storage.txn_index import AbortedTxn
    plog = open_log()
    for pid in (5, 6):
        txn = bytearray(build_batch([(b"k%d" % pid, b"v", T0)], producer_id=pid, producer_epoch=0,
                                    base_sequence=0, is_transactional=True))
        plog.append(txn, validate(txn), now_ms=T0)
        m = build_marker(pid, 0, 0, False, T0)
        plog.append(m, validate(m), now_ms=T0)
        append(plog, [("k", "plain-%d" % pid)])
        plog.roll(T0)
    append(plog, [("x", "x")])
    before = plog.aborted_transactions(0, 100)
    assert before == [AbortedTxn(5, 0, 1, 2), AbortedTxn(6, 3, 4, 5)]
    Cleaner().clean(plog, T0)
    assert len(plog.segments) == 2  # the two cleaned segments became one
    assert plog.aborted_transactions(0, 100) == before
    plog.close()
    reopened = open_log()
    assert reopened.aborted_transactions(0, 100) == before


# ---------------------------------------------------------------------------- reads


def test_reads_across_cleaned_gaps(open_log):
    plog = open_log(LogConfig(cleanup_policy="compact", segment_bytes=400, index_interval_bytes=64))
    for i in range(60):
        append(plog, [(f"k{i % 4}" if i % 9 else f"u{i}", str(i))])
    plog.roll(T0)
    append(plog, [("active", "a")])
    Cleaner().clean(plog, T0)
    kept = [off for off, _, _ in contents(plog)]
    assert len(kept) < 30
    for o in range(plog.log_start_offset, plog.log_end_offset):
        nxt = min(k for k in kept if k >= o)
        data = plog.read(o, 1 << 30)
        assert min(r.offset for r in iter_records(data) if r.offset >= o) == nxt
        one = plog.read(o, 1)  # at least one whole batch, holding o or after it
        h = next(iter_headers(one))[1]
        assert h.last_offset >= o
        assert plog.read(o, 1 << 30, max_offset=o) == b""
    # some segments lost their last offsets: reads there go on into the next segment
    segs = plog.segments
    ends = []
    for seg, nxt in zip(segs, segs[1:]):
        last = [h.last_offset for _, h in iter_headers(seg.path.read_bytes())]
        if last and last[-1] < nxt.base_offset - 1:
            ends.append(nxt.base_offset - 1)
    assert ends
    for o in ends:
        assert next(iter_headers(plog.read(o, 1)))[1].base_offset > o


def test_offset_for_timestamp_after_cleaning(open_log):
    plog = open_log()
    for i in range(10):
        append(plog, [("k", str(i), T0 + i)])
    plog.roll(T0)
    append(plog, [("j", "x", T0 + 100)])
    Cleaner().clean(plog, T0)
    assert plog.offset_for_timestamp(T0 + 3) == (9, T0 + 9)
    assert plog.offset_for_timestamp(T0 + 50) == (10, T0 + 100)


# ---------------------------------------------------------------------------- crashes


def test_crash_leaving_a_cleaned_file(open_log, monkeypatch, tmp_path):
    plog = open_log()
    rows = fill_rounds(plog, 3)

    class Crash(Exception):
        pass

    def crash_in_swap(self, plog, group, out):
        raise Crash

    monkeypatch.setattr(Cleaner, "_swap", crash_in_swap)
    monkeypatch.setattr(_CleanedSegment, "discard", lambda self: None)
    with pytest.raises(Crash):
        Cleaner().clean(plog, T0)
    assert any(n.endswith(".log.cleaned") for n in files(plog))
    crash(plog)
    plog = open_log()
    assert not [n for n in files(plog) if n.endswith((".cleaned", ".swap"))]
    assert contents(plog) == rows + [(15, "active", "a")]  # intact, not compacted
    monkeypatch.undo()
    Cleaner().clean(plog, T0)
    assert contents(plog) == latest(rows) + [(15, "active", "a")]


@pytest.mark.parametrize("deleted_olds", [0, 1, 3])
def test_crash_leaving_a_swap_file(open_log, monkeypatch, deleted_olds):
    plog = open_log()
    rows = fill_rounds(plog, 3)
    olds = [s.path for s in plog.segments[:-1]]

    class Crash(Exception):
        pass

    def crash_in_install(plog, i, old_segments, end, out):
        for seg in old_segments[:deleted_olds]:  # the crash hit while deleting the old segments
            seg.delete()
        raise Crash

    monkeypatch.setattr(Cleaner, "_install", staticmethod(crash_in_install))
    with pytest.raises(Crash):
        Cleaner().clean(plog, T0)
    assert "00000000000000000000.log.swap" in files(plog)
    crash(plog)
    plog = open_log()  # recover=True: no clean shutdown
    names = files(plog)
    assert not [n for n in names if n.endswith((".cleaned", ".swap"))]
    assert [p.name for p in olds if p.name in names] == ["00000000000000000000.log"]
    assert contents(plog) == latest(rows) + [(15, "active", "a")]
    assert plog.log_end_offset == 16
    validate(plog.read(0, 1 << 30))
    assert append(plog, [("k0", "after")]).base_offset == 16
    plog.close()
    plog = open_log(recover=False)  # and the rebuilt indexes are sound
    for o in range(16):
        assert min(r.offset for r in iter_records(plog.read(o, 1 << 30)) if r.offset >= o) >= o


def _emptying_log(open_log):
    """Segments [a=1] [b=1] | [b=2] [x]: segment.bytes puts the first two in one group,
    whose last segment empties (b=1 is superseded from the next group)."""
    plog = open_log(LogConfig(cleanup_policy="compact", segment_bytes=200))
    for k, v in [("a", "1"), ("b", "1"), ("b", "2")]:
        append(plog, [(k, v)])
        plog.roll(T0)
    append(plog, [("x", "x")])
    sizes = [s.size for s in plog.segments]
    assert sizes[0] + sizes[1] <= 200 < sizes[0] + sizes[1] + sizes[2]
    return plog


def test_group_emptied_at_its_end(open_log):
    plog = _emptying_log(open_log)
    result = Cleaner().clean(plog, T0)
    assert result.segments_before == 4 and result.segments_after == 3
    assert contents(plog) == [(0, "a", "1"), (2, "b", "2"), (3, "x", "x")]
    assert contents(plog, 1) == [(2, "b", "2"), (3, "x", "x")]


def test_crash_in_swap_of_a_group_emptied_at_its_end(open_log, monkeypatch):
    """The swap file ends before the old segment of offset 1: that one survives the
    crash, which only makes the log less compacted."""
    plog = _emptying_log(open_log)

    class Crash(Exception):
        pass

    def crash_in_install(plog, i, old_segments, end, out):
        raise Crash

    monkeypatch.setattr(Cleaner, "_install", staticmethod(crash_in_install))
    with pytest.raises(Crash):
        Cleaner().clean(plog, T0)
    crash(plog)
    plog = open_log()
    assert "00000000000000000001.log" in files(plog)
    assert contents(plog) == [(0, "a", "1"), (1, "b", "1"), (2, "b", "2"), (3, "x", "x")]
    validate(plog.read(0, 1 << 30))
    monkeypatch.undo()
    plog.cleaner_offset = 0
    Cleaner().clean(plog, T0)
    assert contents(plog) == [(0, "a", "1"), (2, "b", "2"), (3, "x", "x")]


def test_group_cleaned_to_nothing(open_log, monkeypatch):
    """A whole group removed leaves an empty segment, so the log start offset keeps its
    meaning after a restart; a crash mid-swap completes it too."""
    plog = open_log(LogConfig(cleanup_policy="compact", segment_bytes=200))
    for k, v in [("a", "1"), ("b", "1"), ("a", "2"), ("b", "2")]:
        append(plog, [(k, v)])
        plog.roll(T0)
    append(plog, [("x", "x")])

    class Crash(Exception):
        pass

    def crash_in_install(plog, i, old_segments, end, out):
        raise Crash

    monkeypatch.setattr(Cleaner, "_install", staticmethod(crash_in_install))
    with pytest.raises(Crash):
        Cleaner().clean(plog, T0)
    assert (plog.dir / "00000000000000000000.log.swap").stat().st_size == 0
    crash(plog)
    plog = open_log()
    assert plog.segments[0].base_offset == 0 and plog.segments[0].size == 0
    assert plog.log_start_offset == 0
    # the empty swap only stands for its own base: the group's other segment survives
    assert contents(plog) == [(1, "b", "1"), (2, "a", "2"), (3, "b", "2"), (4, "x", "x")]
    monkeypatch.undo()
    plog.close()
    plog = open_log()
    plog.cleaner_offset = 0
    Cleaner().clean(plog, T0)
    assert contents(plog) == [(2, "a", "2"), (3, "b", "2"), (4, "x", "x")]
    assert plog.segments[0].base_offset == 0 and plog.log_start_offset == 0
    assert [(r.offset) for r in iter_records(plog.read(0, 1))] == [2]


def test_cleaned_log_recovers_after_unclean_shutdown(open_log):
    plog = open_log(LogConfig(cleanup_policy="compact", delete_retention_ms=10, index_interval_bytes=64))
    for r in range(4):
        append(plog, [(f"k{i}", f"{r}-{i}") for i in range(6)], compression="lz4")
        append(plog, [("t", None)])
        plog.roll(T0)
    append(plog, [("active", "a")])
    Cleaner().clean(plog, T0)
    expected = contents(plog)
    data = plog.read(0, 1 << 30)
    crash(plog)
    plog = open_log(recover=True, recovery_point=0)  # every segment scanned and CRC-checked
    assert plog.read(0, 1 << 30) == data
    assert contents(plog) == expected
    assert plog.log_end_offset == 29


def test_garbage_swap_file_is_rolled_back(open_log):
    plog = open_log()
    rows = fill_rounds(plog, 2)
    plog.close()
    (plog.dir / "00000000000000000000.log.swap").write_bytes(b"\x00" * 100)
    plog = open_log(recover=False)
    assert contents(plog) == rows + [(10, "active", "a")]
    assert not [n for n in files(plog) if n.endswith(".swap")]


# ---------------------------------------------------------------------------- producer state


def _producer_log(open_log):
    plog = open_log()
    pid = 4242
    append(plog, [("a", "1"), ("b", "1")], producer_id=pid, producer_epoch=0, base_sequence=0)
    last = bytearray(build_batch([(b"a", b"2", T0), (b"b", b"2", T0)], producer_id=pid, producer_epoch=0,
                                 base_sequence=2))
    info = plog.append(bytearray(last), validate(last), now_ms=T0)
    append(plog, [("a", "3"), ("b", "3")])  # not idempotent: supersedes the producer's records
    plog.roll(T0)
    append(plog, [("c", "1")])
    return plog, last, info


def test_producer_last_batch_kept_empty_and_duplicates_detected_after_reopen(open_log):
    plog, last, info = _producer_log(open_log)
    Cleaner().clean(plog, T0)
    headers = [h for _, h in iter_headers(plog.read(0, 1 << 30))]
    # the first producer batch is gone; its last one stays, empty, with its sequence range
    assert [(h.base_offset, h.record_count, h.producer_id) for h in headers] == [
        (2, 0, 4242), (4, 2, -1), (6, 1, -1)]
    assert (headers[0].base_sequence, headers[0].last_sequence, headers[0].last_offset) == (2, 3, 3)
    assert contents(plog) == [(4, "a", "3"), (5, "b", "3"), (6, "c", "1")]
    # clean shutdown (snapshot at the end) and reopen
    plog.close()
    plog = open_log(recover=False)
    dup = plog.append(bytearray(last), validate(last), now_ms=T0)
    assert dup.duplicate and (dup.base_offset, dup.last_offset) == (info.base_offset, info.last_offset)
    # crash and no snapshot at all: the state is rebuilt from the cleaned log itself
    crash(plog)
    for name in files(plog):
        if name.endswith(".snapshot"):
            os.unlink(plog.dir / name)
    plog = open_log()
    dup = plog.append(bytearray(last), validate(last), now_ms=T0)
    assert dup.duplicate and (dup.base_offset, dup.last_offset) == (2, 3)
    nxt = bytearray(build_batch([(b"d", b"1", T0)], producer_id=4242, producer_epoch=0, base_sequence=4))
    assert not plog.append(nxt, validate(nxt), now_ms=T0).duplicate


# ---------------------------------------------------------------------------- manager


def test_log_manager_runs_the_cleaner_and_checkpoints(tmp_path):
    configs = {"c": COMPACT, "d": LogConfig()}
    mgr = LogManager([tmp_path / "logs"], default_config=LogConfig())
    mgr.load(lambda topic: configs[topic])
    c = mgr.create("c", 0, COMPACT)
    d = mgr.create("d", 0, LogConfig())
    rows = fill_rounds(c, 3)
    drows = fill_rounds(d, 3)
    results = mgr.run_cleaner(T0)
    assert len(results) == 1
    assert contents(c) == latest(rows) + [(15, "active", "a")]
    assert contents(d) == drows + [(15, "active", "a")]
    assert mgr.run_cleaner(T0) == []  # nothing dirty any more
    mgr.close()
    text = (tmp_path / "logs" / CLEANER_OFFSET_CHECKPOINT).read_text().split("\n")
    assert "c 0 15" in text
    mgr = LogManager([tmp_path / "logs"], default_config=LogConfig())
    mgr.load(lambda topic: configs[topic])
    assert mgr.get("c", 0).cleaner_offset == 15
    assert mgr.run_cleaner(T0) == []
    mgr.close()


def test_cleaning_in_a_thread_while_appending(open_log):
    plog = open_log(LogConfig(cleanup_policy="compact", segment_bytes=2000, min_cleanable_dirty_ratio=0.1,
                              index_interval_bytes=100))
    cleaner = Cleaner()
    stop = threading.Event()
    errors = []
    cleans = []

    def run():
        while not stop.is_set():
            try:
                r = cleaner.clean(plog, T0)
                if r:
                    cleans.append(r)
            except Exception as e:  # noqa: BLE001
                errors.append(e)
                return

    t = threading.Thread(target=run)
    t.start()
    written = []
    try:
        for i in range(1500):
            info = append(plog, [(f"k{i % 37}", str(i))])
            written.append((info.base_offset, f"k{i % 37}", str(i)))
            if i % 50 == 0:
                data = plog.read(0, 1 << 30)  # reads during cleaning: valid batches only
                validate(data)
    finally:
        stop.set()
        t.join()
    assert not errors and cleans
    plog.roll(T0)
    append(plog, [("end", "x")])
    plog.update_config(LogConfig(cleanup_policy="compact", segment_bytes=2000, min_cleanable_dirty_ratio=0.0))
    assert cleaner.clean(plog, T0) is not None
    assert contents(plog) == latest(written) + [(1500, "end", "x")]


def test_log_closed_or_truncated_while_cleaning(open_log, monkeypatch):
    plog = open_log()
    rows = fill_rounds(plog, 3)
    real_swap = Cleaner._swap

    def truncate_then_swap(self, plog_, group, out):
        plog_.truncate_to(7)  # a follower truncation between the copy and the swap
        return real_swap(self, plog_, group, out)

    monkeypatch.setattr(Cleaner, "_swap", truncate_then_swap)
    assert Cleaner().clean(plog, T0) is None
    assert contents(plog) == rows[:7]
    assert not [n for n in files(plog) if n.endswith((".cleaned", ".swap"))]

    def close_then_swap(self, plog_, group, out):
        plog_.close()
        return real_swap(self, plog_, group, out)

    plog2 = open_log(name="t-1")
    fill_rounds(plog2, 3)
    monkeypatch.setattr(Cleaner, "_swap", close_then_swap)
    assert Cleaner().clean(plog2, T0) is None
    assert not [n for n in files(plog2) if n.endswith((".cleaned", ".swap"))]


# ---------------------------------------------------------------------------- transaction markers


def _txn(plog: PartitionLog, pid: int, seq: int, records, *, commit: bool, epoch: int = 0,
         marker_epoch: int | None = None) -> int:
    """One transaction of ``pid`` (one batch of ``records``) and its marker; returns the marker's offset."""
    from samsa.protocol.control import build_marker
    append(plog, records, producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True)
    m = build_marker(pid, epoch if marker_epoch is None else marker_epoch, 0, commit, T0)
    return plog.append(m, validate(m), now_ms=T0).base_offset


def rows(plog: PartitionLog) -> list[tuple[int, str | None, str | None]]:
    """The data records of the log (markers left out)."""
    data = plog.read(plog.log_start_offset, 1 << 30)
    return [(r.offset, r.key.decode() if r.key is not None else None, r.value.decode() if r.value is not None else None)
            for r in iter_records(data, skip_control=True)]


def _markers(plog: PartitionLog) -> dict[int, tuple[int, bool, int]]:
    """offset -> (record count, delete horizon set?, base timestamp) of every control batch."""
    return {h.base_offset: (h.record_count, bool(h.attributes & DELETE_HORIZON_BIT), h.base_timestamp)
            for _, h in iter_headers(plog.read(plog.log_start_offset, 1 << 30)) if h.is_control}


def test_commit_marker_removed_once_its_transaction_is_gone_and_the_horizon_passed(open_log):
    """A marker stays while its transaction has a batch left; the clean that removes the last one
    gives the marker a delete horizon (KIP-534, as for tombstones); a clean at or after the
    horizon removes it."""
    from samsa.protocol.control import COMMIT, control_type
    plog = open_log(LogConfig(cleanup_policy="compact", delete_retention_ms=DAY))
    first = _txn(plog, 5, 0, [("a", "1"), ("b", "1")], commit=True)     # 0-1, marker 2
    last = _txn(plog, 5, 2, [("a", "2"), ("b", "2")], commit=True)      # 3-4, marker 5
    plog.roll(T0)
    append(plog, [("x", "x")])
    cleaner = Cleaner()
    t1 = T0 + 1000
    result = cleaner.clean(plog, t1)
    # the first transaction's records are superseded: gone; its marker gets its horizon
    assert rows(plog) == [(3, "a", "2"), (4, "b", "2"), (6, "x", "x")]
    assert _markers(plog) == {first: (1, True, t1 + DAY), last: (1, False, T0)}
    assert result.next_delete_horizon == t1 + DAY
    data = plog.read(first, 1 << 30)
    h, recs = decode_batch(data)
    assert control_type(data, 0, h) == COMMIT and recs[0].timestamp == T0  # the record's timestamp kept
    assert cleaner.clean(plog, t1 + DAY - 1) is None  # not due before the horizon
    result = cleaner.clean(plog, t1 + DAY)
    assert result is not None and result.next_delete_horizon is None
    assert _markers(plog) == {last: (1, False, T0)}  # the producer's last transaction keeps its marker
    assert rows(plog) == [(3, "a", "2"), (4, "b", "2"), (6, "x", "x")]
    plog.close()
    plog = open_log(LogConfig(cleanup_policy="compact", delete_retention_ms=DAY), recover=True)
    assert plog.last_stable_offset == plog.log_end_offset  # no transaction left open by a lost marker


def test_abort_marker_and_its_txnindex_entry_go_once_its_data_is_gone(open_log):
    from samsa.storage.txn_index import AbortedTxn
    config = LogConfig(cleanup_policy="compact", delete_retention_ms=0)
    plog = open_log(config)
    aborted = _txn(plog, 6, 0, [("a", "aborted")], commit=False)           # 0, abort marker 1
    committed = _txn(plog, 6, 1, [("a", "committed")], commit=True)        # 2, commit marker 3
    plog.roll(T0)
    append(plog, [("x", "x")])
    assert plog.aborted_transactions(0, 100) == [AbortedTxn(6, 0, 1, 2)]
    cleaner = Cleaner()
    cleaner.clean(plog, T0)
    # the aborted batch is gone, and its index entry with it; its marker gets its horizon (now + 0)
    assert rows(plog) == [(2, "a", "committed"), (4, "x", "x")]
    assert _markers(plog)[aborted][1] and plog.aborted_transactions(0, 100) == []
    cleaner.clean(plog, T0 + 1)
    assert set(_markers(plog)) == {committed}
    assert rows(plog) == [(2, "a", "committed"), (4, "x", "x")]
    plog.close()
    plog = open_log(config, recover=True)  # the rebuilt index agrees
    assert plog.aborted_transactions(0, 100) == []
    assert rows(plog) == [(2, "a", "committed"), (4, "x", "x")]


def test_marker_of_a_producer_with_no_batch_left_stays_empty(open_log):
    """A producer whose epoch the coordinator bumped (an aborted, timed-out transaction) has no
    batch of its epoch in the log but the marker: it stays, emptied, and still fences the old epoch."""
    from samsa.protocol.errors import InvalidProducerEpochError
    config = LogConfig(cleanup_policy="compact", delete_retention_ms=0)
    plog = open_log(config)
    aborted = _txn(plog, 7, 0, [("a", "aborted")], commit=False, marker_epoch=1)  # 0, marker 1 (epoch 1)
    plog.roll(T0)
    append(plog, [("x", "x")])
    cleaner = Cleaner()
    for now in (T0, T0 + 1):
        cleaner.clean(plog, now)
    assert rows(plog) == [(2, "x", "x")]
    assert _markers(plog) == {aborted: (0, False, T0)}
    assert cleaner.clean(plog, T0 + 2) is None  # nothing more to do
    plog.close()
    plog = open_log(config, recover=True)
    for name in files(plog):
        if name.endswith(".snapshot"):
            os.unlink(plog.dir / name)
    plog.close()
    plog = open_log(config, recover=True)  # the producer state rebuilt from the log alone
    with pytest.raises(InvalidProducerEpochError):
        append(plog, [("b", "old")], producer_id=7, producer_epoch=0, base_sequence=1, is_transactional=True)


def test_markers_of_transactions_with_kept_records_stay(open_log):
    plog = open_log(LogConfig(cleanup_policy="compact", delete_retention_ms=0))
    m1 = _txn(plog, 5, 0, [("a", "1")], commit=True)
    m2 = _txn(plog, 5, 1, [("b", "1")], commit=True)
    plog.roll(T0)
    append(plog, [("x", "x")])
    cleaner = Cleaner()
    result = cleaner.clean(plog, T0)
    assert result.next_delete_horizon is None  # nothing removed: nothing to come back for
    for now in (T0 + 1, T0 + 2):
        plog.cleaner_offset = 0  # all dirty again
        cleaner.clean(plog, now)
    assert set(_markers(plog)) == {m1, m2}


def test_crash_after_removing_an_abort_marker_leaves_no_stale_txnindex_entry(open_log, monkeypatch):
    """An index entry whose marker the clean removed would hide the producer's later batches
    from read_committed consumers: after a crash the swapped segment's index is rebuilt from the log."""
    from samsa.storage.txn_index import AbortedTxn
    config = LogConfig(cleanup_policy="compact", delete_retention_ms=0)
    plog = open_log(config)
    _txn(plog, 6, 0, [("a", "aborted")], commit=False)                    # 0, abort marker 1
    _txn(plog, 6, 1, [("a", "committed")], commit=True)                   # 2, commit marker 3
    plog.roll(T0)
    append(plog, [("x", "x")])
    cleaner = Cleaner()
    cleaner.clean(plog, T0)
    # the entry is gone from the index files already; put it back as an older Samsa kept it
    plog.segments[0].txn_index.reset([AbortedTxn(6, 0, 1, 2)])
    plog.segments[0].txn_index.flush()

    class Crash(Exception):
        pass

    def crash_in_install(plog, i, old_segments, end, out):
        raise Crash

    monkeypatch.setattr(Cleaner, "_install", staticmethod(crash_in_install))
    plog.cleaner_offset = 0
    with pytest.raises(Crash):
        cleaner.clean(plog, T0 + 1)
    crash(plog)
    plog = open_log(config, recover=False)
    assert plog.aborted_transactions(0, 100) == []
    assert rows(plog) == [(2, "a", "committed"), (4, "x", "x")]
    assert 1 not in _markers(plog)


def test_abort_marker_without_its_txnindex_entry_stays_while_its_batches_do(open_log):
    """Should an aborted transaction's index entry be lost, its batches look committed to the
    cleaner: its marker then stays with them, so that rebuilding the index from the log finds it."""
    plog = open_log(LogConfig(cleanup_policy="compact", delete_retention_ms=0))
    aborted = _txn(plog, 6, 0, [("a", "aborted")], commit=False)
    append(plog, [("b", "plain")])
    plog.roll(T0)
    append(plog, [("x", "x")])
    plog.segments[0].txn_index.reset([])
    cleaner = Cleaner()
    for now in (T0, T0 + 1, T0 + 2):
        plog.cleaner_offset = 0
        cleaner.clean(plog, now)
    assert aborted in _markers(plog)
