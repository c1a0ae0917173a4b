"""ListOffsets on a leader just elected whose high watermark has not reached the start of its
epoch (KIP-392): a client gets OFFSET_NOT_AVAILABLE for the latest offset, as from Kafka,
until the followers' fetches move the high watermark; a broker (replica_id >= 0) gets the
offsets."""

from __future__ import annotations

import pytest

from samsa.cluster.metadata import PartitionState
from samsa.cluster.partition import Partition
from samsa.protocol import errors
from samsa.protocol.batch import validate
from samsa.protocol.records import build_batch
from samsa.server.handlers.list_offsets import EARLIEST, LATEST, lookup
from samsa.storage import LogConfig, PartitionLog


def test_latest_offset_not_available_until_the_high_watermark_reaches_the_epoch_start(tmp_path):
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig())
    try:
        buf = bytearray(build_batch([(None, b"x", 1_700_000_000_000 + i) for i in range(5)]))
        plog.append(buf, validate(buf), leader_epoch=0, now_ms=0)
        plog.set_high_watermark(2)  # the old leader had told this follower of 2 only
        state = PartitionState(replicas=[0, 1], leader=0, leader_epoch=1, isr=[0, 1])
        p = Partition("t", 0, plog, state, broker_id=0)
        p.become_leader(state, now_ms=0)
        assert p.high_watermark == 2
        with pytest.raises(errors.OffsetNotAvailableError):
            lookup(p, LATEST, client=True)
        assert lookup(p, LATEST, client=False) == (-1, 2)
        assert lookup(p, EARLIEST, client=True) == (-1, 0)
        with pytest.raises(errors.OffsetNotAvailableError):
            lookup(p, 1_700_000_000_003, client=True)  # found at 3, past the high watermark
        assert lookup(p, 1_700_000_000_001, client=True) == (1_700_000_000_001, 1)
        p.record_follower_fetch(1, 5, now_ms=1)
        assert p.high_watermark == 5
        assert lookup(p, LATEST, client=True) == (-1, 5)
    finally:
        plog.close()
