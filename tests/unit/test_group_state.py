"""The group state machine without sockets or an event loop: the transition table, and
join/sync/heartbeat/leave sequences driven through a hand-advanced scheduler."""

from __future__ import annotations

import itertools

import pytest

from samsa.coordinator.groups.rebalance import (HeartbeatRequest, JoinRequest, JoinResult, LeavingMember, Rebalancer,
                                                SyncRequest, SyncResult)
from samsa.coordinator.groups.state import (COMPLETING_REBALANCE, DEAD, EMPTY, PREPARING_REBALANCE, STABLE, Group,
                                            GroupState, IllegalStateTransition, Member)
from samsa.protocol import errors

# ---------------------------------------------------------------- the transition table

LEGAL = {
    (PREPARING_REBALANCE, EMPTY),
    (EMPTY, PREPARING_REBALANCE), (STABLE, PREPARING_REBALANCE), (COMPLETING_REBALANCE, PREPARING_REBALANCE),
    (PREPARING_REBALANCE, COMPLETING_REBALANCE),
    (COMPLETING_REBALANCE, STABLE),
    *((s, DEAD) for s in GroupState),
}


@pytest.mark.parametrize("current,target", sorted(LEGAL))
def test_legal_transitions_pass(current, target):
    g = Group("g", state=current)
    g.transition_to(target, 1234)
    assert (g.state, g.state_timestamp) == (target, 1234)


@pytest.mark.parametrize("current,target",
                         sorted(set(itertools.product(GroupState, GroupState)) - LEGAL))
def test_illegal_transitions_raise(current, target):
    g = Group("g", state=current, state_timestamp=7)
    with pytest.raises(IllegalStateTransition, match=f"from {current.value} to {target.value}"):
        g.transition_to(target, 1234)
    assert (g.state, g.state_timestamp) == (current, 7)


def test_states_carry_kafkas_names():
    assert [s.value for s in GroupState] == ["Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"]


# ---------------------------------------------------------------- a scheduler driven by hand

class FakeReply:
    def __init__(self) -> None:
        self.result = None
        self._done = False

    def done(self) -> bool:
        return self._done

    def set_result(self, result) -> None:
        assert not self._done, "answered twice"
        self.result, self._done = result, True


class FakeTimer:
    def __init__(self, when: float, fn, args) -> None:
        self.when, self.fn, self.args, self.cancelled = when, fn, args, False

    def cancel(self) -> None:
        self.cancelled = True


class FakeScheduler:
    def __init__(self) -> None:
        self.now = 0.0
        self.timers: list[FakeTimer] = []

    def time(self) -> float:
        return self.now

    def call_later(self, delay: float, fn, *args) -> FakeTimer:
        t = FakeTimer(self.now + delay, fn, args)
        self.timers.append(t)
        return t

    def create_future(self) -> FakeReply:
        return FakeReply()

    def advance(self, seconds: float) -> None:
        target = self.now + seconds
        while due := [t for t in self.timers if not t.cancelled and t.when <= target]:
            t = min(due, key=lambda t: t.when)
            self.timers.remove(t)
            self.now = t.when
            t.fn(*t.args)
        self.now = target


CONFIG = {"group.min.session.timeout.ms": 6000, "group.max.session.timeout.ms": 1800000,
          "group.max.size": 1000, "group.initial.rebalance.delay.ms": 0}
SESSION_MS, REBALANCE_MS = 10_000, 30_000


class Harness:
    def __init__(self, **config) -> None:
        self.scheduler = FakeScheduler()
        self.stored: list[tuple[str, GroupState, int]] = []
        self.rb = Rebalancer(self.scheduler, {**CONFIG, **config}.__getitem__, clock=lambda: 1000,
                             on_group_change=lambda g: self.stored.append((g.group_id, g.state, g.generation)))

    def join(self, member_id: str = "", protocols=(("range", b"m"),), instance: str | None = None,
             protocol_type: str = "consumer", required: bool = True, session_ms: int = SESSION_MS,
             client_id: str = "c"):
        return self.rb.join(JoinRequest("g", member_id, instance, protocol_type, list(protocols), session_ms,
                                        REBALANCE_MS, client_id, "/127.0.0.1", member_id_required=required))

    def new_member(self, **kw) -> tuple[str, FakeReply]:
        """A dynamic member through KIP-394: MEMBER_ID_REQUIRED, then the parked join."""
        first = self.join(**kw)
        assert isinstance(first, JoinResult) and first.error == errors.E_MEMBER_ID_REQUIRED
        reply = self.join(first.member_id, **kw)
        assert isinstance(reply, FakeReply)
        return first.member_id, reply

    def sync(self, member_id: str, generation: int, assignments: dict[str, bytes] | None = None):
        return self.rb.sync(SyncRequest("g", member_id, generation, assignments=assignments or {}))

    def heartbeat(self, member_id: str, generation: int, instance: str | None = None) -> int:
        return self.rb.heartbeat(HeartbeatRequest("g", member_id, generation, instance))

    @property
    def group(self) -> Group:
        return self.rb.groups["g"]


def stable_pair(h: Harness) -> tuple[str, str]:
    """Two members in generation 2 (the first alone in generation 1), leader a, Stable."""
    a, ra = h.new_member()
    assert ra.done() and ra.result.generation_id == 1
    assert isinstance(h.sync(a, 1, {a: b"A1"}), SyncResult)
    b, rb = h.new_member()
    assert h.group.state == PREPARING_REBALANCE and not rb.done()
    ra2 = h.join(a)
    assert ra2.done() and rb.done()
    fb = h.sync(b, 2)
    assert isinstance(fb, FakeReply) and not fb.done()
    la = h.sync(a, 2, {a: b"A", b: b"B"})
    assert la.assignment == b"A" and fb.result.assignment == b"B"
    return a, b


# ---------------------------------------------------------------- sequences

def test_first_member_leads_generation_one():
    h = Harness()
    a, reply = h.new_member()
    r = reply.result
    assert (r.error, r.generation_id, r.leader, r.member_id, r.protocol_name) == (0, 1, a, a, "range")
    assert [m.member_id for m in r.members] == [a]
    assert h.group.state == COMPLETING_REBALANCE
    s = h.sync(a, 1, {a: b"assignment"})
    assert (s.error, s.assignment, s.protocol_type) == (0, b"assignment", "consumer")
    assert h.group.state == STABLE
    assert h.stored == [("g", STABLE, 1)]


def test_second_member_rebalances_and_the_follower_waits_for_the_leader():
    h = Harness()
    a, _b = stable_pair(h)
    assert (h.group.generation, h.group.leader, h.group.state) == (2, a, STABLE)
    assert h.stored == [("g", STABLE, 1), ("g", STABLE, 2)]


def test_only_the_leader_learns_the_members():
    h = Harness()
    a, _ = h.new_member()
    h.sync(a, 1, {})
    b, rb = h.new_member()
    ra = h.join(a)
    assert sorted(m.member_id for m in ra.result.members) == sorted([a, b])
    assert rb.result.members == [] and rb.result.leader == a


def test_heartbeats_during_and_after_a_rebalance():
    h = Harness()
    a, _ = h.new_member()
    h.sync(a, 1, {})
    assert h.heartbeat(a, 1) == 0
    h.new_member()
    assert h.heartbeat(a, 1) == errors.E_REBALANCE_IN_PROGRESS
    assert h.heartbeat(a, 0) == errors.E_ILLEGAL_GENERATION
    assert h.heartbeat("stranger", 1) == errors.E_UNKNOWN_MEMBER_ID


def test_sync_errors():
    h = Harness()
    a, _ = h.new_member()
    assert h.sync(a, 5).error == errors.E_ILLEGAL_GENERATION
    assert h.sync("stranger", 1).error == errors.E_UNKNOWN_MEMBER_ID
    bad = h.rb.sync(SyncRequest("g", a, 1, protocol_name="roundrobin"))
    assert bad.error == errors.E_INCONSISTENT_GROUP_PROTOCOL


def test_join_errors():
    h = Harness()
    too_short = h.join(session_ms=10)
    assert too_short.error == errors.E_INVALID_SESSION_TIMEOUT
    h.new_member()
    assert h.join(protocol_type="connect").error == errors.E_INCONSISTENT_GROUP_PROTOCOL
    assert h.join(protocols=[("sticky", b"")]).error == errors.E_INCONSISTENT_GROUP_PROTOCOL
    assert h.join("stranger").error == errors.E_UNKNOWN_MEMBER_ID


def test_group_max_size():
    h = Harness(**{"group.max.size": 1})
    h.new_member()
    assert h.join().error == errors.E_GROUP_MAX_SIZE_REACHED


def test_leader_leaving_hands_leadership_over():
    h = Harness()
    a, b = stable_pair(h)
    assert h.rb.leave("g", [LeavingMember(a)]) == [0]
    assert h.group.state == PREPARING_REBALANCE
    rb = h.join(b)
    assert rb.done()
    assert (rb.result.generation_id, rb.result.leader) == (3, b)
    assert h.rb.leave("g", [LeavingMember(a)]) == [errors.E_UNKNOWN_MEMBER_ID]


def test_last_member_leaving_empties_the_group():
    h = Harness()
    a, _ = h.new_member()
    h.sync(a, 1, {})
    assert h.rb.leave("g", [LeavingMember(a)]) == [0]
    assert (h.group.state, h.group.generation, h.group.leader, h.group.protocol) == (EMPTY, 2, None, None)
    assert h.stored[-1] == ("g", EMPTY, 2)


def test_session_timeout_removes_a_silent_member():
    h = Harness()
    a, b = stable_pair(h)
    h.scheduler.advance(SESSION_MS / 1000 / 2)
    assert h.heartbeat(a, 2) == 0
    h.scheduler.advance(SESSION_MS / 1000 * 0.75)  # b's session has run out, a's has not
    assert b not in h.group.members and h.group.state == PREPARING_REBALANCE
    ra = h.join(a)
    assert (ra.result.generation_id, [m.member_id for m in ra.result.members]) == (3, [a])


def test_a_member_that_does_not_rejoin_within_the_rebalance_timeout_is_dropped():
    h = Harness()
    a, b = stable_pair(h)
    h.join(a, protocols=[("range", b"new")])  # a rejoins with new metadata: a rebalance
    for _ in range(5):  # b keeps its session alive but never rejoins
        h.scheduler.advance(REBALANCE_MS / 1000 / 5)
        h.heartbeat(b, 2)
    assert b not in h.group.members
    assert (h.group.generation, h.group.leader, h.group.state) == (3, a, COMPLETING_REBALANCE)


def test_initial_rebalance_delay_gathers_the_first_members():
    h = Harness(**{"group.initial.rebalance.delay.ms": 3000})
    _a, ra = h.new_member()
    h.scheduler.advance(1)
    _b, rb = h.new_member()
    assert not ra.done() and not rb.done()
    h.scheduler.advance(2)  # at 3 s the delay ran out with a newcomer since: it starts again
    assert not ra.done() and not rb.done()
    h.scheduler.advance(3)  # and runs out with no newcomer
    assert ra.done() and rb.done()
    assert ra.result.generation_id == rb.result.generation_id == 1
    assert len(ra.result.members) == 2


def test_static_member_restart_keeps_its_assignment_without_a_rebalance():
    h = Harness()
    first = h.join(instance="i1", required=False)
    old_id = first.result.member_id
    assert old_id.startswith("i1-")
    h.sync(old_id, 1, {old_id: b"A"})
    again = h.join(instance="i1", required=False)
    assert isinstance(again, JoinResult)
    assert again.member_id != old_id and again.generation_id == 1 and again.leader == old_id  # old clients
    assert h.group.state == STABLE and h.group.members[again.member_id].assignment == b"A"
    assert h.heartbeat(old_id, 1, instance="i1") == errors.E_FENCED_INSTANCE_ID
    assert h.heartbeat(again.member_id, 1, instance="i1") == 0


def test_commit_checks():
    h = Harness()
    assert h.rb.check_commit("g", -1, "", None) == 0  # no group management
    a, _ = h.new_member()
    assert h.rb.check_commit("g", 1, a, None) == errors.E_REBALANCE_IN_PROGRESS  # CompletingRebalance
    # A stale generation is told so first, during a rebalance too (librdkafka's 0113 expects it).
    assert h.rb.check_commit("g", 0, a, None) == errors.E_ILLEGAL_GENERATION
    h.sync(a, 1, {})
    assert h.rb.check_commit("g", 1, a, None) == 0
    assert h.rb.check_commit("g", 0, a, None) == errors.E_ILLEGAL_GENERATION
    assert h.rb.check_commit("g", 1, "stranger", None) == errors.E_UNKNOWN_MEMBER_ID
    h.group.transition_to(DEAD, 0)
    assert h.rb.check_commit("g", 1, a, None) == errors.E_COORDINATOR_NOT_AVAILABLE


def test_a_dead_group_refuses_joins():
    h = Harness()
    h.rb.groups["g"] = Group("g", state=DEAD)
    assert h.join().error == errors.E_COORDINATOR_NOT_AVAILABLE


def test_a_member_that_never_syncs_is_removed_after_the_rebalance_timeout():
    h = Harness()
    a, b = stable_pair(h)
    c, rc = h.new_member()                    # a third member: generation 3, a leads
    ra, rb = h.join(a), h.join(b)
    assert rc.done() and ra.done() and rb.done() and h.group.state == COMPLETING_REBALANCE
    fb, fc = h.sync(b, 3), h.sync(c, 3)       # the followers wait for the leader, which only heartbeats
    for _ in range(int(REBALANCE_MS / 1000) - 1):
        h.scheduler.advance(1)
        assert h.heartbeat(a, 3) == h.heartbeat(b, 3) == h.heartbeat(c, 3) == 0
    h.scheduler.advance(2)
    assert a not in h.group.members and h.group.state == PREPARING_REBALANCE
    assert fb.result.error == fc.result.error == errors.E_REBALANCE_IN_PROGRESS
    assert h.heartbeat(a, 3) == errors.E_UNKNOWN_MEMBER_ID


def test_synced_members_are_not_removed_by_the_sync_timeout():
    h = Harness()
    a, b = stable_pair(h)
    for _ in range(int(REBALANCE_MS / 1000) + 5):  # both synced: nothing pending
        assert h.heartbeat(a, 2) == h.heartbeat(b, 2) == 0
        h.scheduler.advance(1)
    assert set(h.group.members) == {a, b} and h.group.state == STABLE


def test_timers_of_a_replaced_group_object_do_nothing():
    """A group read back twice (as when its records are replayed): the first object's session
    timers must not expire members of, or store, a group that is no longer the one coordinated."""
    h = Harness()
    a, _ = h.new_member()
    h.sync(a, 1, {a: b"A"})
    old = h.rb.groups["g"]
    h.stored.clear()
    replacement = Group("g", state=STABLE, generation=1, protocol_type="consumer", protocol="range", leader=a)
    replacement.add(Member(a, None, "c", "/127.0.0.1", SESSION_MS, REBALANCE_MS, "consumer", [("range", b"m")]))
    h.rb.groups["g"] = replacement            # replaced without its timers being cancelled
    h.rb.restore(replacement)
    h.scheduler.advance(SESSION_MS / 2000)
    assert h.heartbeat(a, 1) == 0             # keeps the new object's session alive
    h.scheduler.advance(SESSION_MS / 2000 + 1)  # the old object's timer is due, the new one not yet
    assert a in h.rb.groups["g"].members and h.stored == [] and old.members
