"""Committed offsets and their records in __consumer_offsets, without a broker."""

from __future__ import annotations

from samsa.coordinator.groups import persistence
from samsa.coordinator.groups.offsets import OffsetStore
from samsa.coordinator.groups.persistence import GroupLoaded, OffsetLoaded, java_string_hash, partition_for
from samsa.coordinator.groups.state import EMPTY, PREPARING_REBALANCE, STABLE, Group, Member
from samsa.protocol import group_records
from samsa.protocol.group_records import OffsetAndMetadata

MINUTE = 60_000


def test_fetch_what_was_asked_or_everything_sorted():
    store = OffsetStore()
    store.commit("g", [(("b", 1), OffsetAndMetadata(5, commit_timestamp=0)),
                       (("a", 0), OffsetAndMetadata(7, 2, "m", 0))])
    assert [(t, [(p, o.offset if o else None) for p, o in ps]) for t, ps in store.fetch("g", None)] == \
        [("a", [(0, 7)]), ("b", [(1, 5)])]
    assert [(t, [(p, o and o.offset) for p, o in ps]) for t, ps in store.fetch("g", {"b": [0, 1]})] == \
        [("b", [(0, None), (1, 5)])]
    assert list(store.fetch("nobody", None)) == []


def test_delete_and_drop():
    store = OffsetStore()
    store.commit("g", [(("t", 0), OffsetAndMetadata(1)), (("t", 1), OffsetAndMetadata(2))])
    store.delete("g", [("t", 0), ("t", 9)])
    assert list(store.committed("g")) == [("t", 1)]
    store.drop_group("g")
    assert "g" not in store and store.committed("g") == {}


def test_an_empty_consumer_group_expires_all_its_offsets_at_once():
    store = OffsetStore()
    store.commit("g", [(("t", 0), OffsetAndMetadata(1, commit_timestamp=0)),
                       (("t", 1), OffsetAndMetadata(1, commit_timestamp=50 * MINUTE))])
    group = Group("g", state=EMPTY, protocol_type="consumer", state_timestamp=10 * MINUTE)
    assert store.expired("g", group, 69 * MINUTE, 60 * MINUTE) == []
    assert sorted(store.expired("g", group, 70 * MINUTE, 60 * MINUTE)) == [("t", 0), ("t", 1)]
    group.transition_to(PREPARING_REBALANCE, 70 * MINUTE)
    assert store.expired("g", group, 999 * MINUTE, 60 * MINUTE) == []


def test_standalone_commits_expire_one_by_one():
    store = OffsetStore()
    store.commit("g", [(("t", 0), OffsetAndMetadata(1, commit_timestamp=0)),
                       (("t", 1), OffsetAndMetadata(1, commit_timestamp=30 * MINUTE))])
    assert store.expired("g", None, 60 * MINUTE, 60 * MINUTE) == [("t", 0)]
    assert store.expired("g", Group("g"), 90 * MINUTE, 60 * MINUTE) == [("t", 0), ("t", 1)]


def test_partition_for_is_javas_string_hash():
    assert [java_string_hash(s) for s in ("", "a", "hello")] == [0, 97, 99162322]
    assert java_string_hash("polygenelubricants") == -(1 << 31)
    assert partition_for("polygenelubricants", 50) == 0
    assert partition_for("hello", 50) == 99162322 % 50
    assert partition_for("€", 7) == 8364 % 7  # one UTF-16 code unit


def test_offset_records_round_trip():
    o = OffsetAndMetadata(42, 3, "meta", 1234)
    loaded = persistence.decode_entry(*persistence.offset_entry("g", "t", 2, o))
    assert loaded == OffsetLoaded("g", "t", 2, o)
    assert persistence.decode_entry(*persistence.offset_entry("g", "t", 2, None)) == OffsetLoaded("g", "t", 2, None)
    assert persistence.decode_entry(None, b"x") is None
    assert persistence.decode_entry(b"\x00\x09", None) is None  # a key version nobody wrote


def test_a_stored_group_comes_back_stable_with_its_assignments():
    g = Group("g", state=STABLE, generation=4, protocol_type="consumer", protocol="range", state_timestamp=99)
    for mid, inst in (("m1", None), ("m2", "i2")):
        g.add(Member(mid, inst, "client", "/h", 10_000, 30_000, "consumer", [("range", b"sub-" + mid.encode())],
                     assignment=b"asg-" + mid.encode()))
    g.leader = "m2"
    loaded = persistence.decode_entry(*persistence.group_entry(g))
    assert isinstance(loaded, GroupLoaded) and loaded.record is not None
    back = persistence.group_from_record("g", loaded.record)
    assert (back.state, back.generation, back.protocol, back.protocol_type, back.leader, back.state_timestamp) == \
        (STABLE, 4, "range", "consumer", "m2", 99)
    assert back.static_members == {"i2": "m2"}
    assert [(m.member_id, m.metadata("range"), m.assignment, m.session_timeout_ms, m.rebalance_timeout_ms)
            for m in back.members.values()] == \
        [("m1", b"sub-m1", b"asg-m1", 10_000, 30_000), ("m2", b"sub-m2", b"asg-m2", 10_000, 30_000)]
    assert persistence.decode_entry(*persistence.group_tombstone("g")) == GroupLoaded("g", None)


def test_an_empty_stored_group_comes_back_empty():
    rec = group_records.parse_group_value(group_records.group_value(
        group_records.GroupRecord("consumer", 7, None, None, 5, [])))
    back = persistence.group_from_record("g", rec)
    assert (back.state, back.generation, back.leader, back.members) == (EMPTY, 7, None, {})
