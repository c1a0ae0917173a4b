"""Idempotent producers: duplicates, sequence gaps, fencing, snapshots."""

from __future__ import annotations

import os

import pytest

from samsa.protocol.batch import validate
from samsa.protocol.errors import InvalidProducerEpochError, OutOfOrderSequenceNumberError
from samsa.protocol.records import build_batch
from samsa.storage import LogConfig, PartitionLog
from samsa.storage.producer_state import ProducerStateManager

T0 = 1_700_000_000_000
PID = 4242


def pbatch(seq: int, n: int = 2, epoch: int = 0, pid: int = PID) -> bytearray:
    return bytearray(build_batch(
        [(None, b"v%d" % i, T0 + i) for i in range(n)],
        producer_id=pid, producer_epoch=epoch, base_sequence=seq,
    ))


def append(log: PartitionLog, buf: bytearray):
    return log.append(buf, validate(buf), now_ms=T0)


@pytest.fixture
def log(tmp_path):
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig())
    yield plog
    plog.close()


def test_duplicate_returns_original_offsets(log):
    first = append(log, pbatch(0))
    append(log, pbatch(2))
    retry = append(log, pbatch(0))
    assert retry.duplicate
    assert (retry.base_offset, retry.last_offset) == (first.base_offset, first.last_offset)
    assert log.log_end_offset == 4  # nothing written
    assert append(log, pbatch(4)).base_offset == 4


def test_only_last_five_batches_are_remembered(log):
    for seq in range(0, 12, 2):  # six batches
        append(log, pbatch(seq))
    for seq in range(2, 12, 2):
        assert append(log, pbatch(seq)).duplicate
    with pytest.raises(OutOfOrderSequenceNumberError):
        append(log, pbatch(0))


def test_sequence_gap(log):
    append(log, pbatch(0))
    with pytest.raises(OutOfOrderSequenceNumberError):
        append(log, pbatch(3))
    assert log.log_end_offset == 2


def test_stale_epoch_is_fenced(log):
    append(log, pbatch(0, epoch=3))
    with pytest.raises(InvalidProducerEpochError):
        append(log, pbatch(2, epoch=2))


def test_new_epoch_must_start_at_zero(log):
    append(log, pbatch(0, epoch=0))
    with pytest.raises(OutOfOrderSequenceNumberError):
        append(log, pbatch(2, epoch=1))
    assert not append(log, pbatch(0, epoch=1)).duplicate
    assert not append(log, pbatch(2, epoch=1)).duplicate


def test_unknown_producer_accepted_with_any_sequence(log):
    assert append(log, pbatch(17)).base_offset == 0
    assert append(log, pbatch(19)).base_offset == 2


def test_sequence_wraps_around(log):
    append(log, pbatch(0x7FFFFFFF - 1, n=2))  # last sequence 2^31-1
    assert append(log, pbatch(0, n=2)).base_offset == 2


def test_non_idempotent_batches_unchecked(log):
    plain = bytearray(build_batch([(None, b"x", T0)]))
    append(log, plain)
    assert not append(log, bytearray(plain)).duplicate


def test_several_batches_of_one_producer_in_one_append(log):
    buf = pbatch(0) + pbatch(2)
    info = log.append(buf, validate(buf), now_ms=T0)
    assert (info.base_offset, info.last_offset) == (0, 3)
    assert append(log, pbatch(2)).duplicate
    bad = pbatch(4) + pbatch(7)
    with pytest.raises(OutOfOrderSequenceNumberError):
        log.append(bad, validate(bad), now_ms=T0)
    assert log.log_end_offset == 4


def test_duplicate_survives_close_and_reopen(tmp_path):
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig())
    append(plog, pbatch(0))
    append(plog, pbatch(2))
    plog.close()
    assert "00000000000000000004.snapshot" in os.listdir(tmp_path / "t-0")
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig(), recover=False)
    retry = append(plog, pbatch(0))
    assert retry.duplicate and retry.base_offset == 0
    with pytest.raises(OutOfOrderSequenceNumberError):
        append(plog, pbatch(6))
    assert append(plog, pbatch(4)).base_offset == 4
    plog.close()


def test_duplicate_survives_crash(tmp_path):
    one = len(pbatch(0))
    config = LogConfig(segment_bytes=one * 3)
    plog = PartitionLog.open(tmp_path / "t-0", config)
    for seq in range(0, 16, 2):  # rolls: snapshots at 6 and 12
        append(plog, pbatch(seq))
    assert sorted(n for n in os.listdir(plog.dir) if n.endswith(".snapshot")) == [
        "00000000000000000006.snapshot", "00000000000000000012.snapshot",
    ]
    plog.close_handles()  # crash
    plog = PartitionLog.open(tmp_path / "t-0", config)
    retry = append(plog, pbatch(14))
    assert retry.duplicate and retry.base_offset == 14
    assert append(plog, pbatch(8)).duplicate
    assert append(plog, pbatch(16)).base_offset == 16
    plog.close()


def test_corrupt_snapshot_falls_back_to_log(tmp_path):
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig())
    append(plog, pbatch(0))
    plog.close()
    snap = tmp_path / "t-0" / "00000000000000000002.snapshot"
    data = bytearray(snap.read_bytes())
    data[-1] ^= 0xFF
    snap.write_bytes(bytes(data))
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig(), recover=False)
    assert append(plog, pbatch(0)).duplicate
    plog.close()


def test_truncation_rewinds_producer_state(log):
    append(log, pbatch(0))
    append(log, pbatch(2))
    log.truncate_to(2)
    info = append(log, pbatch(2))
    assert not info.duplicate and info.base_offset == 2


def test_follower_append_updates_state(log):
    buf = bytearray(build_batch([(None, b"x", T0)], base_offset=0, producer_id=PID, producer_epoch=0, base_sequence=0))
    log.append_as_follower(buf, validate(buf))
    assert append(log, pbatch(0, n=1)).duplicate


def test_expiration(tmp_path):
    psm = ProducerStateManager(tmp_path)
    psm.update(1, 0, 0, 0, 0, 0, 1000)
    psm.update(2, 0, 0, 0, 1, 1, 5000)
    assert psm.remove_expired(6000, expiration_ms=3000) == 1
    assert list(psm.producers) == [2]


def test_snapshot_round_trip(tmp_path):
    psm = ProducerStateManager(tmp_path)
    for i in range(7):
        psm.update(9, 2, i * 2, i * 2 + 1, i * 2, i * 2 + 1, T0 + i)
    psm.update(10, 0, 0, 4, 100, 104, T0)
    decoded = ProducerStateManager.decode(psm.encode())
    assert list(decoded[9].batches) == list(psm.producers[9].batches)
    assert len(decoded[9].batches) == 5 and decoded[9].epoch == 2
    assert decoded[10].last_timestamp == T0
