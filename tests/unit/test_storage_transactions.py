"""Transactions in the log: markers, the last stable offset, the aborted-transaction index
(kept through roll, recovery, truncation, retention and compaction) and producer snapshots."""

from __future__ import annotations

import struct

import pytest

from samsa.protocol.batch import iter_headers, validate
from samsa.protocol.control import ABORT, COMMIT, build_marker, control_type
from samsa.protocol.errors import (InvalidProducerEpochError, InvalidTxnStateError,
                                   TransactionCoordinatorFencedError)
from samsa.protocol.records import build_batch
from samsa.storage import LogConfig, PartitionLog
from samsa.storage.files import TXN_INDEX_SUFFIX, segment_file
from samsa.storage.txn_index import AbortedTxn

T0 = 1_700_000_000_000


def txn_batch(pid: int, seq: int, n: int = 2, epoch: int = 0, transactional: bool = True) -> bytearray:
    return bytearray(build_batch([(None, b"v%d" % i, T0 + i) for i in range(n)], producer_id=pid,
                                 producer_epoch=epoch, base_sequence=seq, is_transactional=transactional))


def plain(n: int = 1, size: int = 10) -> bytearray:
    return bytearray(build_batch([(None, b"x" * size, T0) for _ in range(n)]))


def append(log: PartitionLog, buf: bytearray):
    return log.append(buf, validate(buf), now_ms=T0)


def marker(log: PartitionLog, pid: int, commit: bool, epoch: int = 0, coordinator_epoch: int = 0):
    return append(log, build_marker(pid, epoch, coordinator_epoch, commit, T0))


@pytest.fixture
def log(tmp_path):
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig())
    yield plog
    plog.close()


def test_marker_batch_format():
    buf = build_marker(7, 3, 11, True, T0)
    (_, h), = iter_headers(buf)
    assert h.is_control and h.is_transactional and (h.producer_id, h.producer_epoch) == (7, 3)
    assert h.base_sequence == -1 and h.record_count == 1
    assert control_type(buf, 0, h) == COMMIT
    assert control_type(build_marker(7, 3, 11, False, T0), 0, h) == ABORT


def test_lso_follows_open_transactions(log):
    append(log, plain())                      # 0
    append(log, txn_batch(1, 0))              # 1-2 opens pid 1
    assert log.last_stable_offset == 1
    append(log, txn_batch(2, 0))              # 3-4 opens pid 2
    append(log, plain())                      # 5
    assert log.last_stable_offset == 1
    marker(log, 1, commit=True)               # 6
    assert log.last_stable_offset == 3
    marker(log, 2, commit=False)              # 7
    assert log.last_stable_offset == log.log_end_offset == 8
    assert log.aborted_transactions(0, 8) == [AbortedTxn(2, 3, 7, 8)]
    assert log.aborted_transactions(8, 9) == []
    assert log.aborted_transactions(0, 3) == []  # the range ends before the transaction starts


def test_lso_waits_for_the_marker_to_be_replicated(log):
    log.set_high_watermark(0)
    append(log, txn_batch(1, 0))
    marker(log, 1, commit=True)
    log.set_high_watermark(2)
    assert log.last_stable_offset == 0        # the marker at 2 is not below the high watermark yet
    log.set_high_watermark(3)
    assert log.last_stable_offset == 3


def test_plain_batch_inside_a_transaction_is_refused(log):
    append(log, txn_batch(1, 0))
    with pytest.raises(InvalidTxnStateError):
        append(log, txn_batch(1, 2, transactional=False))


def test_marker_with_old_epoch_or_coordinator_epoch_is_fenced(log):
    append(log, txn_batch(1, 0, epoch=2))
    with pytest.raises(InvalidProducerEpochError):
        marker(log, 1, commit=True, epoch=1)
    marker(log, 1, commit=False, epoch=3, coordinator_epoch=5)  # a bumped epoch (a fenced producer)
    with pytest.raises(InvalidProducerEpochError):
        append(log, txn_batch(1, 2, epoch=2))
    with pytest.raises(TransactionCoordinatorFencedError):
        marker(log, 1, commit=True, epoch=3, coordinator_epoch=4)


def test_txnindex_file_layout_and_reload(tmp_path):
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig())
    append(plog, txn_batch(9, 0, n=3))
    marker(plog, 9, commit=False)
    append(plog, txn_batch(5, 0))             # still open at close
    plog.close()
    data = segment_file(tmp_path / "t-0", 0, TXN_INDEX_SUFFIX).read_bytes()
    assert data == struct.pack(">hqqqq", 0, 9, 0, 3, 4)
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig(), recover=False)
    try:
        assert plog.last_stable_offset == 4   # pid 5's transaction is open (from the snapshot)
        marker(plog, 5, commit=False)
        assert plog.aborted_transactions(0, 100) == [AbortedTxn(9, 0, 3, 4), AbortedTxn(5, 4, 6, 7)]
    finally:
        plog.close()


def test_txnindex_per_segment_through_roll_and_retention(tmp_path):
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig(retention_bytes=0))
    append(plog, txn_batch(1, 0))             # 0-1
    plog.roll()
    marker(plog, 1, commit=False)             # 2 in segment 2: the entry lives there
    plog.roll()
    append(plog, plain())                     # 3
    assert not segment_file(plog.dir, 0, TXN_INDEX_SUFFIX).exists()
    assert segment_file(plog.dir, 2, TXN_INDEX_SUFFIX).exists()
    assert plog.aborted_transactions(0, 4) == [AbortedTxn(1, 0, 2, 3)]
    assert plog.aborted_transactions(1, 4) == [AbortedTxn(1, 0, 2, 3)]
    plog.enforce_retention(T0)
    assert not segment_file(plog.dir, 2, TXN_INDEX_SUFFIX).exists()
    plog.close()


def test_recovery_rebuilds_the_txnindex_and_open_transactions(tmp_path):
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig())
    append(plog, txn_batch(1, 0))             # 0-1
    append(plog, txn_batch(2, 0))             # 2-3
    marker(plog, 1, commit=False)             # 4
    plog.flush()
    plog.close_handles()                      # a crash: no snapshot at the end
    segment_file(tmp_path / "t-0", 0, TXN_INDEX_SUFFIX).unlink()
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig(), recover=True, recovery_point=0)
    try:
        assert plog.aborted_transactions(0, 5) == [AbortedTxn(1, 0, 4, 2)]
        assert plog.last_stable_offset == 2
    finally:
        plog.close()


def test_truncation_drops_txnindex_entries_and_reopens_transactions(log):
    append(log, txn_batch(1, 0))              # 0-1
    marker(log, 1, commit=False)              # 2
    append(log, plain())                      # 3
    log.truncate_to(2)
    assert log.aborted_transactions(0, 10) == []
    assert log.last_stable_offset == 0        # the transaction is open again
    marker(log, 1, commit=True)
    assert log.last_stable_offset == 3


def test_read_committed_range(log):
    append(log, txn_batch(1, 0))              # 0-1
    append(log, plain())                      # 2
    lso = log.last_stable_offset
    data = log.read(0, 1 << 20, max_offset=lso)
    assert data == b""
    marker(log, 1, commit=True)
    data = log.read(0, 1 << 20, max_offset=log.last_stable_offset)
    assert [h.base_offset for _, h in iter_headers(data)] == [0, 2, 3]


def test_after_reopening_the_lso_still_waits_for_unreplicated_markers(tmp_path):
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig())
    plog.set_high_watermark(0)
    append(plog, txn_batch(1, 0))             # 0-1
    marker(plog, 1, commit=True)              # 2
    plog.flush()
    plog.close_handles()                      # a crash: the marker may not be on any follower
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig(), recover=True, recovery_point=0)
    try:
        plog.set_high_watermark(2)            # the replica manager's checkpoint
        assert plog.last_stable_offset == 0
        plog.set_high_watermark(3)
        assert plog.last_stable_offset == 3
    finally:
        plog.close()


def test_markers_on_a_single_broker_leave_nothing_unreplicated(log):
    for pid in range(1, 50):
        append(log, txn_batch(pid, 0))
        marker(log, pid, commit=pid % 2 == 0)
    assert not log.producer_state.unreplicated and not log.producer_state.ongoing
