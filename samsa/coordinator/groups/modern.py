"""The core of the new group protocols (KIP-848), shared by consumer groups and share groups.

A *modern* group is driven by its members' heartbeats, not by a join/sync barrier:

- the **group epoch** rises whenever what the assignment depends on changes (a member
  joins, leaves, changes its subscription; a subscribed topic appears, goes or grows);
- the coordinator then computes a **target assignment** with a server-side assignor
  (:mod:`.assignors`) and stamps it with the **assignment epoch** (= the group epoch);
- each member moves towards its target at its own pace (:func:`reconcile`): a consumer
  member first gives up the partitions it must lose (``UNREVOKED_PARTITIONS``: its member
  epoch stays), then gets its new epoch and the partitions that are free
  (``UNRELEASED_PARTITIONS`` while some are still held by others), then is ``STABLE``.
  A share group reconciles without revocation (``revoke_first=False``): many members may
  read one partition, so nothing waits for another member.

These objects only keep state and the rules on it; :mod:`.consumer_groups` drives them
from heartbeats, timers and topic changes, and stores them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from collections.abc import Callable
from typing import Any

from samsa.coordinator.groups.assignors import Assignment, TopicId

#: Member epochs with a meaning in a heartbeat (Kafka's LEAVE_GROUP_MEMBER_EPOCH and friends).
JOIN_EPOCH = 0
LEAVE_EPOCH = -1
LEAVE_STATIC_EPOCH = -2


class MemberState(enum.IntEnum):
    """Kafka's MemberState, with its record byte values."""
    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127


class ModernGroupState(str, enum.Enum):
    """Kafka's ConsumerGroupState names (share groups use Empty, Stable and Dead of them)."""
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"

    def __str__(self) -> str:
        return self.value


@dataclass
class ModernMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: list[str] = field(default_factory=list)
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    rebalance_timeout_ms: int = -1
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)            # held now (sent to the member)
    pending_revocation: Assignment = field(default_factory=dict)  # it must give these up first
    # runtime only (not stored): timers of the driver
    session_timer: Any = None
    revocation_timer: Any = None

    def cancel_timers(self) -> None:
        for t in (self.session_timer, self.revocation_timer):
            if t is not None:
                t.cancel()
        self.session_timer = self.revocation_timer = None


@dataclass
class ModernGroup:
    group_id: str
    group_type: str = "consumer"                                 # "consumer" or "share"
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ModernMember] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    target: dict[str, Assignment] = field(default_factory=dict)   # member id -> its target assignment
    topics: dict[TopicId, tuple[str, int]] = field(default_factory=dict)  # subscribed topics: id -> (name, partitions)
    dead: bool = False

    @property
    def state(self) -> ModernGroupState:
        if self.dead:
            return ModernGroupState.DEAD
        if not self.members:
            return ModernGroupState.EMPTY
        if self.assignment_epoch != self.group_epoch:
            return ModernGroupState.ASSIGNING
        if any(m.member_epoch != self.assignment_epoch or m.state != MemberState.STABLE
               for m in self.members.values()):
            return ModernGroupState.RECONCILING
        return ModernGroupState.STABLE

    def add(self, member: ModernMember) -> None:
        self.members[member.member_id] = member
        if member.instance_id:
            self.static_members[member.instance_id] = member.member_id

    def remove(self, member_id: str) -> ModernMember | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        member.cancel_timers()
        if member.instance_id and self.static_members.get(member.instance_id) == member_id:
            del self.static_members[member.instance_id]
        self.target.pop(member_id, None)
        return member

    def owners(self) -> dict[tuple[TopicId, int], str]:
        """Who holds each partition now: assigned to it, or still to be revoked by it."""
        out: dict[tuple[TopicId, int], str] = {}
        for m in self.members.values():
            for held in (m.assigned, m.pending_revocation):
                for t, ps in held.items():
                    for p in ps:
                        out[(t, p)] = m.member_id
        return out


def _minus(a: Assignment, b: Assignment) -> Assignment:
    out = {t: ps - b.get(t, frozenset()) for t, ps in a.items()}
    return {t: ps for t, ps in out.items() if ps}


def _and(a: Assignment, b: Assignment) -> Assignment:
    out = {t: ps & b.get(t, frozenset()) for t, ps in a.items()}
    return {t: ps for t, ps in out.items() if ps}


def _union(a: Assignment, b: Assignment) -> Assignment:
    out = dict(a)
    for t, ps in b.items():
        out[t] = out.get(t, frozenset()) | ps
    return {t: ps for t, ps in out.items() if ps}


def overlaps(a: Assignment, b: Assignment) -> bool:
    return any(ps & b.get(t, frozenset()) for t, ps in a.items())


def reconcile(group: ModernGroup, member: ModernMember, owned: Assignment | None, *,
              revoke_first: bool = True, exclusive: Callable[[Any], bool] | None = None) -> bool:
    """Move ``member`` one step towards its target (Kafka's CurrentAssignmentBuilder).

    ``owned`` is what the member says it holds (None: it did not say). ``exclusive`` says of an
    assignment key whether each of its partitions has one holder (default: every key); a
    streams group's standby tasks may be held by several members. Returns True if the
    member's epoch, state or partitions changed."""
    before = (member.member_epoch, member.state, member.assigned, member.pending_revocation)
    target_epoch = group.assignment_epoch
    target = group.target.get(member.member_id, {})
    if member.state == MemberState.UNREVOKED_PARTITIONS:
        if owned is None or overlaps(owned, member.pending_revocation):
            return False                                  # still revoking
        member.pending_revocation = {}
    elif member.member_epoch == target_epoch and member.state == MemberState.STABLE:
        return False
    keep = _and(member.assigned, target)
    revoke = _minus(member.assigned, target)
    if revoke and revoke_first:
        member.assigned, member.pending_revocation = keep, revoke
        member.state = MemberState.UNREVOKED_PARTITIONS
    else:
        wanted = _minus(target, keep)
        if revoke_first:
            owners = group.owners()
            free: Assignment = {}
            for t, ps in wanted.items():
                if exclusive is not None and not exclusive(t):
                    free[t] = ps
                    continue
                mine = frozenset(p for p in ps if owners.get((t, p), member.member_id) == member.member_id)
                if mine:
                    free[t] = mine
        else:
            free = wanted
        member.assigned = _union(keep, free)
        member.pending_revocation = {}
        if member.member_epoch != target_epoch:
            member.previous_member_epoch, member.member_epoch = member.member_epoch, target_epoch
        member.state = MemberState.STABLE if free == wanted else MemberState.UNRELEASED_PARTITIONS
    return before != (member.member_epoch, member.state, member.assigned, member.pending_revocation)
