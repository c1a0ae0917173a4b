"""Pure rules of share groups (KIP-932): the simple assignor, the share coordinator's merging of
state batches (the cases Kafka 4.4 answered in tests/differential/test_share_state_diff.py) and
its coordinator keys."""

from __future__ import annotations

import uuid

import pytest

from samsa.coordinator.groups.assignors import MemberSpec, simple
from samsa.coordinator.share.coordinator import coordinator_key, combine, parse_coordinator_key
from samsa.coordinator.share.state import ShareKey, StateBatch
from samsa.protocol import errors

T, U = b"t" * 16, b"u" * 16


def _count(a: dict) -> int:
    return sum(len(ps) for ps in a.values())


def test_simple_fewer_members_than_partitions_balanced_and_sticky():
    members = {m: MemberSpec(frozenset({T})) for m in "abc"}
    first = simple(members, {T: 7})
    assert sorted(_count(a) for a in first.values()) == [2, 2, 3]
    assert set().union(*(a[T] for a in first.values())) == set(range(7))
    again = simple({m: MemberSpec(frozenset({T}), first[m]) for m in "abc"}, {T: 7})
    assert again == first                                  # sticky


def test_simple_more_members_than_partitions_shares():
    members = {m: MemberSpec(frozenset({T})) for m in "abcde"}
    out = simple(members, {T: 2})
    assert all(_count(out[m]) == 1 for m in members)       # every member reads one partition
    readers = [sum(1 for a in out.values() if p in a.get(T, ())) for p in (0, 1)]
    assert sorted(readers) == [2, 3]                       # spread over both


def test_simple_heterogeneous_subscriptions():
    members = {"a": MemberSpec(frozenset({T})), "b": MemberSpec(frozenset({T, U})), "c": MemberSpec(frozenset({U}))}
    out = simple(members, {T: 1, U: 1})
    assert set(out["a"]) == {T} and set(out["c"]) == {U}   # never a topic one does not subscribe to
    assert _count(out["b"]) >= 1
    assert simple({"x": MemberSpec(frozenset())}, {T: 3}) == {"x": {}}


def _b(a, b, s, c=1):
    return StateBatch(a, b, s, c)


def test_combine_as_kafka():
    stored = [_b(10, 14, 0), _b(15, 19, 2)]
    # the write Kafka 4.4 answered: overlap overrides, below the start offset goes
    assert combine(stored, [_b(13, 16, 4, 2)], 12) == [_b(12, 12, 0), _b(13, 16, 4, 2), _b(17, 19, 2)]
    # neighbours of one state and count become one batch; a gap stays
    merged = combine([_b(100, 104, 0)], [_b(105, 109, 0), _b(110, 110, 2)], 100)
    assert merged == [_b(100, 109, 0), _b(110, 110, 2)]
    assert combine(merged, [_b(120, 121, 0, 3)], 106) == [_b(106, 109, 0), _b(110, 110, 2), _b(120, 121, 0, 3)]
    assert combine(stored, [], 30) == []
    assert combine([], [], -1) == []


def test_coordinator_keys_round_trip():
    key = ShareKey("my:group", uuid.uuid4(), 7)
    text = coordinator_key(key)
    assert text.startswith("my:group:") and text.endswith(":7") and len(text.split(":")[2]) == 22
    assert parse_coordinator_key(text) == key
    for bad in ("nogroup", "g:notatopicid:1", ":AAAAAAAAAAAAAAAAAAAAAA:1", "g:AAAAAAAAAAAAAAAAAAAAAA:x"):
        with pytest.raises(errors.InvalidRequestError):
            parse_coordinator_key(bad)
