"""The core of the new group protocols (KIP-848), without a broker: the server-side assignors and
reconciliation (revoke before assign, epochs)."""

from __future__ import annotations

from samsa.coordinator.groups.assignors import MemberSpec, range_, uniform
from samsa.coordinator.groups.modern import MemberState, ModernGroup, ModernMember, reconcile

T1, T2 = b"\x01" * 16, b"\x02" * 16


def counts(a):
    return {m: sum(len(ps) for ps in by_t.values()) for m, by_t in a.items()}


def test_uniform_balances_and_sticks():
    specs = {"a": MemberSpec(frozenset({T1})), "b": MemberSpec(frozenset({T1}))}
    first = uniform(specs, {T1: 6})
    assert counts(first) == {"a": 3, "b": 3}
    # a third member takes one partition from each, the others keep the rest
    specs = {m: MemberSpec(frozenset({T1}), first[m]) for m in first}
    specs["c"] = MemberSpec(frozenset({T1}))
    second = uniform(specs, {T1: 6})
    assert counts(second) == {"a": 2, "b": 2, "c": 2}
    assert second["a"][T1] <= first["a"][T1] and second["b"][T1] <= first["b"][T1]
    every = [p for a in second.values() for p in a.get(T1, ())]
    assert sorted(every) == list(range(6))


def test_uniform_heterogeneous_subscriptions():
    specs = {"a": MemberSpec(frozenset({T1})), "b": MemberSpec(frozenset({T1, T2}))}
    a = uniform(specs, {T1: 2, T2: 4})
    assert a["a"] == {T1: frozenset({0, 1})} and a["b"] == {T2: frozenset({0, 1, 2, 3})}


def test_range_contiguous_per_topic():
    specs = {"a": MemberSpec(frozenset({T1, T2})), "b": MemberSpec(frozenset({T1, T2}))}
    a = range_(specs, {T1: 3, T2: 2})
    assert a == {"a": {T1: frozenset({0, 1}), T2: frozenset({0})}, "b": {T1: frozenset({2}), T2: frozenset({1})}}


def test_reconcile_revokes_before_assigning():
    g = ModernGroup("g", group_epoch=1, assignment_epoch=1)
    a = ModernMember("a", member_epoch=1, assigned={T1: frozenset({0, 1})})
    g.add(a)
    b = ModernMember("b")
    g.add(b)
    g.group_epoch = g.assignment_epoch = 2
    g.target = {"a": {T1: frozenset({0})}, "b": {T1: frozenset({1})}}
    # b cannot have partition 1 while a holds it: b moves to epoch 2 with nothing yet
    assert reconcile(g, b, {})
    assert (b.member_epoch, b.state, b.assigned) == (2, MemberState.UNRELEASED_PARTITIONS, {})
    # a must revoke 1 first, keeping its epoch
    assert reconcile(g, a, None)
    assert (a.member_epoch, a.state, a.assigned, a.pending_revocation) == (
        1, MemberState.UNREVOKED_PARTITIONS, {T1: frozenset({0})}, {T1: frozenset({1})})
    # still owning it: nothing changes
    assert not reconcile(g, a, {T1: frozenset({0, 1})})
    # revoked: a gets epoch 2, and b can take partition 1
    assert reconcile(g, a, {T1: frozenset({0})})
    assert (a.member_epoch, a.previous_member_epoch, a.state) == (2, 1, MemberState.STABLE)
    assert reconcile(g, b, {})
    assert (b.state, b.assigned) == (MemberState.STABLE, {T1: frozenset({1})})
    assert g.state.value == "Stable"


def test_reconcile_without_revocation_for_share_groups():
    g = ModernGroup("s", group_type="share", group_epoch=2, assignment_epoch=2)
    a = ModernMember("a", member_epoch=1, assigned={T1: frozenset({0, 1})})
    b = ModernMember("b")
    g.add(a)
    g.add(b)
    g.target = {"a": {T1: frozenset({0, 1})}, "b": {T1: frozenset({0, 1})}}
    assert reconcile(g, b, {}, revoke_first=False)
    assert (b.member_epoch, b.state, b.assigned) == (2, MemberState.STABLE, {T1: frozenset({0, 1})})
