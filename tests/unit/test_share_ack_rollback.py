"""An acknowledgement (or a member's release) whose share-state write fails is rolled back, as
Kafka's SharePartition does: the records are again acquired by their member under their lock
(available if the lock ran out meanwhile), and may be acknowledged again. Below the wire: the
in-flight window (samsa/server/share/partition.py) and its manager with a persister whose
write fails once (samsa/server/share/manager.py)."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace

from samsa.coordinator.share.state import DeliveryState, PartitionState, PersisterError, ShareKey
from samsa.protocol import errors
from samsa.protocol.records import build_batch
from samsa.server.share.manager import SharePartitionManager
from samsa.server.share.partition import ACCEPT, RELEASE, AckError, Acquired, SharePartition

ACQUIRED, ACKNOWLEDGED, AVAILABLE = DeliveryState.ACQUIRED, DeliveryState.ACKNOWLEDGED, DeliveryState.AVAILABLE
TOPIC_ID = uuid.uuid4()
KEY = ShareKey("g", TOPIC_ID, 0)


def data(n: int) -> bytes:
    return build_batch([(None, b"v%d" % i) for i in range(n)], base_offset=0)


def fresh() -> SharePartition:
    sp = SharePartition(KEY, "t", 0)
    sp.load(PartitionState(), 0, 0)
    return sp


def test_pending_acknowledgement_rolls_back_to_acquired_then_commits():
    sp = fresh()
    a = sp.acquire("m1", data(6), 500, 500, 2000)
    t = object()
    sp.acknowledge("m1", [(0, 2, [ACCEPT]), (3, 3, [RELEASE])], 5, t)
    assert sp.is_pending(t) and sp.pending() == [t]
    # tentative: written as acknowledged, but the start stays and nothing is acquired or acknowledged again
    assert sp.start_offset == 0
    snap = sp.snapshot()  # written as if committed: past 0-2; 3 released and 4-5 acquired are available
    assert snap.start_offset == 3 and [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                                       for b in snap.batches] == [(3, 5, AVAILABLE, 1)]
    assert sp.acquire("m2", data(6), 500, 500, 2000).ranges == []
    try:
        sp.acknowledge("m1", [(0, 0, [ACCEPT])], 5)
        raise AssertionError("no error")
    except AckError as e:
        assert e.code == errors.E_INVALID_RECORD_STATE
    assert sp.rollback(t, 5) and not sp.rollback(t, 5)
    for o in range(4):
        rec = sp.records[o]
        assert (rec.state, rec.member, rec.lock, rec.count, rec.pending) == (ACQUIRED, "m1", a.lock, 1, None)
    t2 = object()
    sp.acknowledge("m1", [(0, 3, [ACCEPT])], 5, t2)
    assert sp.commit([t2]) and sp.start_offset == 4 and sp.pending() == []
    assert sp.expire(a.lock, 5) and sp.acquire("m2", data(6), 500, 500, 2000).ranges == [Acquired(4, 5, 2)]


def test_lock_running_out_while_pending_makes_rolled_back_records_available():
    sp = fresh()
    a = sp.acquire("m1", data(3), 500, 500, 2000)
    t = object()
    sp.acknowledge("m1", [(0, 0, [ACCEPT])], 2, t)
    assert sp.expire(a.lock, 2)  # 1 and 2 are available now; 0 waits for its write
    assert sp.rollback(t, 2)
    assert sp.records[0].state == AVAILABLE and sp.records[0].lock is None
    assert sp.acquire("m2", data(3), 500, 500, 2000).ranges == [Acquired(0, 2, 2)]


def test_release_member_rolls_back():
    sp = fresh()
    a = sp.acquire("m1", data(2), 500, 500, 2000)
    t = object()
    assert sp.release_member("m1", 5, t)
    assert sp.acquire("m2", data(2), 500, 500, 2000).ranges == []  # released only once written
    assert sp.rollback(t, 5) and sp.records[1].member == "m1" and sp.records[1].lock is a.lock
    assert sp.expire(a.lock, 5)
    assert sp.acquire("m2", data(2), 500, 500, 2000).ranges == [Acquired(0, 1, 2)]


class FailingOnce:
    """A persister whose next write fails with COORDINATOR_NOT_AVAILABLE; the writes that succeed are kept."""

    def __init__(self):
        self.fail = 1
        self.written: list[PartitionState] = []

    async def write(self, key, state):
        if self.fail:
            self.fail -= 1
            raise PersisterError(errors.E_COORDINATOR_NOT_AVAILABLE, "the share coordinator is gone")
        self.written.append(state)


def manager(persister) -> SharePartitionManager:
    replicas = SimpleNamespace(partition=lambda topic, index: SimpleNamespace(state=SimpleNamespace(leader_epoch=0)))
    share = {"share.record.lock.duration.ms": 30000, "share.delivery.count.limit": 5}
    return SharePartitionManager({"group.share.max.share.sessions": 10}, replicas,
                                 lambda group, key: share[key], persister)


def test_manager_answers_the_error_and_rolls_back_then_the_retry_is_written():
    async def main():
        persister = FailingOnce()
        m = manager(persister)
        sp = m.partitions[KEY] = fresh()
        sp.acquire("m1", data(3), 500, 500, 2000)
        code, _ = await m.acknowledge("g", "m1", TOPIC_ID.bytes, "t", 0, [(0, 2, [ACCEPT])])
        assert code == errors.E_COORDINATOR_NOT_AVAILABLE and persister.written == []
        assert [(r.state, r.member) for r in sp.records.values()] == [(ACQUIRED, "m1")] * 3
        assert sp.start_offset == 0 and sp.pending() == []
        code, _ = await m.acknowledge("g", "m1", TOPIC_ID.bytes, "t", 0, [(0, 2, [ACCEPT])])
        assert code == 0 and sp.start_offset == 3 and sp.in_flight() == 0
        assert persister.written[0].start_offset == 3 and persister.written[0].batches == []
        m.stop()
    asyncio.run(main())


def test_manager_rolls_back_a_failed_release():
    async def main():
        persister = FailingOnce()
        m = manager(persister)
        sp = m.partitions[KEY] = fresh()
        sp.acquire("m1", data(2), 500, 500, 2000)
        await m.release_member("g", "m1")
        assert [(r.state, r.member) for r in sp.records.values()] == [(ACQUIRED, "m1")] * 2
        await m.release_member("g", "m1")
        assert [r.state for r in sp.records.values()] == [AVAILABLE] * 2 and len(persister.written) == 1
        m.stop()
    asyncio.run(main())
