"""The in-flight window of a share partition (samsa/server/share/partition.py), below the wire:
acquire, accept, release (redelivered, delivery count 2), reject, lock expiry, the delivery
count limit, a member's release, the record-lock limit, read_committed's aborted records,
and the state written to and read back from the persister."""

from __future__ import annotations

import uuid

from samsa.coordinator.share.state import DeliveryState, PartitionState, ShareKey, StateBatch
from samsa.protocol import errors
from samsa.protocol.records import build_batch
from samsa.server.share.partition import (ACCEPT, GAP, REJECT, RELEASE, AckError, Acquired,
                                          SharePartition)

KEY = ShareKey("g", uuid.uuid4(), 0)


def batches(*sizes: int, base: int = 0, **kw) -> bytes:
    out = b""
    for n in sizes:
        out += build_batch([(None, b"v%d" % i) for i in range(n)], base_offset=base, **kw)
        base += n
    return out


def fresh(start: int = 0) -> SharePartition:
    sp = SharePartition(KEY, "t", 0)
    sp.load(PartitionState(), start, 0)
    return sp


def test_acquire_accept_moves_start():
    sp = fresh()
    a = sp.acquire("m1", batches(3, 3), 500, 500, 2000)
    assert a.ranges == [Acquired(0, 5, 1)] and a.lock is not None and len(a.records) > 0
    assert sp.next_fetch_offset() == 6
    # nothing more for anyone: the same data acquires nothing
    assert sp.acquire("m2", batches(3, 3), 500, 500, 2000).ranges == []
    sp.acknowledge("m1", [(0, 5, [ACCEPT])], 5)
    assert sp.start_offset == 6 and sp.in_flight() == 0


def test_release_redelivers_with_count_two_and_reject_archives():
    sp = fresh()
    sp.acquire("m1", batches(3, 3), 500, 500, 2000)
    sp.acknowledge("m1", [(0, 2, [RELEASE]), (3, 5, [REJECT, ACCEPT, REJECT])], 5)
    assert sp.start_offset == 0 and sp.next_fetch_offset() == 0
    a = sp.acquire("m2", batches(3, 3), 500, 500, 2000)
    assert a.ranges == [Acquired(0, 2, 2)]
    assert a.records == batches(3)  # only the batch holding what was acquired
    sp.acknowledge("m2", [(0, 2, [ACCEPT])], 5)
    assert sp.start_offset == 6  # 3 and 5 archived, 4 acknowledged


def test_ack_errors_as_kafka():
    sp = fresh()
    sp.acquire("m1", batches(3), 500, 500, 2000)
    for member, ack, code, message in [
            ("m2", (0, 0, [ACCEPT]), errors.E_INVALID_RECORD_STATE, "Member is not the owner of batch record"),
            ("m1", (5, 5, [ACCEPT]), errors.E_INVALID_REQUEST, "The first offset in request is past acquired records"),
            ("m1", (0, 3, [ACCEPT]), errors.E_INVALID_RECORD_STATE, "not found in the cache")]:
        try:
            sp.acknowledge(member, [ack], 5)
            raise AssertionError("no error")
        except AckError as e:
            assert e.code == code and message in e.message
    sp.acknowledge("m1", [(0, 0, [ACCEPT])], 5)
    try:
        sp.acknowledge("m1", [(1, 1, [ACCEPT]), (0, 0, [ACCEPT])], 5)  # 0 is done: below the start, ignored
    except AckError:
        raise AssertionError("an offset below the start offset is ignored")
    try:
        sp.acknowledge("m1", [(2, 2, [ACCEPT]), (2, 3, [ACCEPT])], 5)  # 2 is fine but 3 is not: all or nothing
        raise AssertionError("no error")
    except AckError as e:
        assert "not found in the cache" in e.message
    assert sp.records[2].state == DeliveryState.ACQUIRED


def test_lock_expiry_and_delivery_count_limit():
    sp = fresh()
    for delivery in range(1, 4):
        a = sp.acquire("m1", batches(2), 500, 500, 2000)
        assert a.ranges == ([Acquired(0, 1, delivery)] if delivery < 3 else [])
        if a.lock is None:
            break
        assert sp.expire(a.lock, 2)  # the lock ran out: available again, archived at the limit (2)
    assert sp.start_offset == 2 and sp.in_flight() == 0
    assert not sp.expire(object(), 2)


def test_release_member_and_max_records_whole_batches():
    sp = fresh()
    a = sp.acquire("m1", batches(4, 4, 4), 5, 3, 2000)
    assert a.ranges == [Acquired(0, 3, 1), Acquired(4, 7, 1)]  # whole batches beyond max_records; batch_size splits
    assert sp.release_member("m1", 5)
    assert sp.next_fetch_offset() == 0 and sp.acquired_count() == 0
    assert not sp.release_member("m1", 5)


def test_record_lock_limit():
    sp = fresh()
    assert sp.acquire("m1", batches(60, 60, 60), 1000, 1000, 100).ranges == [Acquired(0, 119, 1)]
    assert not sp.can_acquire(100)
    assert sp.acquire("m1", batches(60, base=120), 1000, 1000, 100).ranges == []
    sp.acknowledge("m1", [(0, 59, [ACCEPT])], 5)
    assert sp.can_acquire(100)


def test_aborted_transactions_are_archived_not_delivered():
    sp = fresh()
    pid = 7
    data = (build_batch([(None, b"a"), (None, b"b")], base_offset=0, producer_id=pid, producer_epoch=0,
                        is_transactional=True)
            + build_batch([(None, b"\x00\x00\x00\x00")], base_offset=2, producer_id=pid, producer_epoch=0,
                          is_transactional=True, is_control=True)
            + build_batch([(None, b"c")], base_offset=3))
    a = sp.acquire("m1", data, 500, 500, 2000, aborted=[(pid, 0)])
    assert a.changed and a.ranges == [Acquired(2, 3, 1)]  # the marker's offset is acquired, as Kafka does
    assert sp.start_offset == 2
    sp.acknowledge("m1", [(2, 2, [GAP]), (3, 3, [ACCEPT])], 5)
    assert sp.start_offset == 4


def test_snapshot_and_load_make_acquired_available_again():
    sp = fresh(10)
    sp.acquire("m1", batches(3, 3, base=10), 500, 500, 2000)
    sp.acknowledge("m1", [(11, 11, [ACCEPT]), (13, 13, [REJECT])], 5)
    state = sp.snapshot()
    assert state.start_offset == 10 and state.delivery_complete_count == 2
    assert state.batches == [StateBatch(10, 10, DeliveryState.AVAILABLE, 1),
                             StateBatch(11, 11, DeliveryState.ACKNOWLEDGED, 1),
                             StateBatch(12, 12, DeliveryState.AVAILABLE, 1),
                             StateBatch(13, 13, DeliveryState.ARCHIVED, 1),
                             StateBatch(14, 15, DeliveryState.AVAILABLE, 1)]
    other = SharePartition(KEY, "t", 0)  # a new leader
    other.load(state, 0, 1)
    a = other.acquire("m2", batches(3, 3, base=10), 500, 500, 2000)
    assert a.ranges == [Acquired(10, 10, 2), Acquired(12, 12, 2), Acquired(14, 15, 2)]


def test_log_start_moving_past_the_window():
    sp = fresh()
    sp.acquire("m1", batches(3), 500, 500, 2000)
    assert sp.move_start_to(5) and sp.start_offset == 5 and sp.in_flight() == 0
    assert not sp.move_start_to(4)


def test_renew_moves_records_to_a_new_lock():
    from samsa.server.share.partition import RENEW
    sp = fresh()
    first = sp.acquire("m1", batches(2), 500, 500, 2000).lock
    renewed = sp.acknowledge("m1", [(0, 0, [RENEW])], 5)
    assert renewed is not None
    assert sp.expire(first, 5)  # the old lock still holds offset 1, not 0
    assert sp.records[0].state == DeliveryState.ACQUIRED and sp.records[1].state == DeliveryState.AVAILABLE
    assert sp.expire(renewed, 5) and sp.records[0].count == 1


def test_record_limit_mode_splits_batches():
    sp = fresh()
    assert sp.acquire("m1", batches(3), 2, 500, 2000, record_limit=True).ranges == [Acquired(0, 1, 1)]
    assert sp.acquire("m1", batches(3), 2, 500, 2000, record_limit=True).ranges == [Acquired(2, 2, 1)]


def test_records_loaded_at_the_delivery_limit_are_archived_not_delivered():
    sp = SharePartition(KEY, "t", 0)
    sp.load(PartitionState(start_offset=0, batches=[StateBatch(0, 1, DeliveryState.AVAILABLE, 5),
                                                    StateBatch(2, 2, DeliveryState.AVAILABLE, 4)]), 0, 1)
    a = sp.acquire("m1", batches(3), 500, 500, 2000, delivery_limit=5)
    assert a.changed and a.ranges == [Acquired(2, 2, 5)] and sp.start_offset == 2
