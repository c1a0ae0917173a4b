"""A consumer group under the classic rebalance protocol: members, generation, state.

States, as Kafka names them, and the only transitions :data:`VALID_PREVIOUS_STATES` allows::

    Empty --first join--> PreparingRebalance --join phase ends--> CompletingRebalance --leader syncs--> Stable
                            ^        |                                    |                              |
                            |        +--> Empty (no member rejoined)      |                              |
                            +---- a member joins, leaves or expires ------+------------------------------+
    any state --DeleteGroups--> Dead

:meth:`Group.transition_to` refuses any other move with :class:`IllegalStateTransition`; a
group is created in its first state (Empty, or as read back from the log) and changes state
only through it.
These objects only keep state; :mod:`samsa.coordinator.groups.rebalance` drives them.
Nothing here needs an event loop: a parked JoinGroup or SyncGroup answer is any
:class:`Reply` (an ``asyncio.Future`` in the broker), a timer any :class:`Timer`.
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from samsa.protocol import codec, errors

T = TypeVar("T")


class GroupState(str, enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"

    def __str__(self) -> str:
        return self.value


EMPTY = GroupState.EMPTY
PREPARING_REBALANCE = GroupState.PREPARING_REBALANCE
COMPLETING_REBALANCE = GroupState.COMPLETING_REBALANCE
STABLE = GroupState.STABLE
DEAD = GroupState.DEAD

#: For each state, the states a group may enter it from (Kafka's "valid previous states").
VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    EMPTY: frozenset({PREPARING_REBALANCE}),
    PREPARING_REBALANCE: frozenset({EMPTY, STABLE, COMPLETING_REBALANCE}),
    COMPLETING_REBALANCE: frozenset({PREPARING_REBALANCE}),
    STABLE: frozenset({COMPLETING_REBALANCE}),
    DEAD: frozenset(GroupState),
}


class IllegalStateTransition(RuntimeError):
    """A move the transition table does not allow: a bug in the coordinator, not a client error."""

    def __init__(self, group_id: str, current: GroupState, target: GroupState):
        super().__init__(f"group {group_id} cannot move from {current.value} to {target.value}")
        self.group_id, self.current, self.target = group_id, current, target


class Reply(Protocol[T]):
    """A parked answer: done once set (or once the waiting request is cancelled)."""

    def done(self) -> bool: ...

    def set_result(self, result: T, /) -> None: ...


class Timer(Protocol):
    def cancel(self) -> None: ...


@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]            # (name, metadata) in the member's preference order
    assignment: bytes = b""
    join_reply: Reply | None = None               # parked JoinGroup answer
    sync_reply: Reply | None = None               # parked SyncGroup answer
    expiry: Timer | None = None                   # session timeout

    def metadata(self, protocol: str) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""

    def same_protocols(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols

    def awaiting_answer(self) -> bool:
        """Is a JoinGroup or SyncGroup of this member parked, waiting for the rebalance?"""
        return any(r is not None and not r.done() for r in (self.join_reply, self.sync_reply))


def resolve(reply: Reply[T] | None, result: T) -> None:
    """Answer a parked request, unless it was answered or given up already."""
    if reply is not None and not reply.done():
        reply.set_result(result)


@dataclass
class Group:
    group_id: str
    state: GroupState = EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # group.instance.id -> member id
    pending_members: set[str] = field(default_factory=set)        # ids issued with MEMBER_ID_REQUIRED
    pending_sync: set[str] = field(default_factory=set)            # joined this generation, not synced yet
    sync_timer: Timer | None = None                                # bounds pending_sync by the rebalance timeout
    state_timestamp: int = -1                                      # ms, when the state last changed
    rebalance_timer: Timer | None = None
    rebalance_deadline: float = 0.0                                # scheduler time, seconds
    initial_delay: bool = False                                    # in group.initial.rebalance.delay.ms
    members_at_delay: int = 0

    def transition_to(self, target: GroupState, now_ms: int) -> None:
        """Move to ``target`` if the transition table allows it from the current state."""
        if self.state not in VALID_PREVIOUS_STATES[target]:
            raise IllegalStateTransition(self.group_id, self.state, target)
        self.state = target
        self.state_timestamp = now_ms

    def is_leader(self, member_id: str) -> bool:
        return self.leader == member_id

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader is None:
            self.leader = member.member_id

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        if member.group_instance_id and self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        if member.expiry:
            member.expiry.cancel()
        if self.leader == member_id:
            self.leader = next(iter(self.members), None)
        self.pending_sync.discard(member_id)
        return member

    def cancel_timers(self) -> None:
        for m in self.members.values():
            if m.expiry:
                m.expiry.cancel()
        if self.rebalance_timer:
            self.rebalance_timer.cancel()
        if self.sync_timer:
            self.sync_timer.cancel()

    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        """Can a member with these protocols join? (Same type, and a protocol in common.)"""
        if not self.members:
            return bool(protocol_type) and bool(protocols)
        if protocol_type != self.protocol_type:
            return False
        return bool(self.candidate_protocols() & {name for name, _ in protocols})

    def candidate_protocols(self) -> set[str]:
        sets = [{name for name, _ in m.protocols} for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def select_protocol(self) -> str:
        """Each member votes for its most preferred protocol that all members support."""
        candidates = self.candidate_protocols()
        votes = Counter(next(name for name, _ in m.protocols if name in candidates) for m in self.members.values())
        return max(sorted(votes), key=lambda name: votes[name])

    def all_joined(self) -> bool:
        return all(m.join_reply is not None for m in self.members.values()) and not self.pending_members

    def max_rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def subscribed_topics(self) -> set[str]:
        """The topics a consumer group's members subscribe to (empty for other protocol types)."""
        topics: set[str] = set()
        if self.protocol_type != "consumer":
            return topics
        for m in self.members.values():
            meta = m.metadata(self.protocol or "")
            if len(meta) < 2:
                continue
            version = min(int.from_bytes(meta[:2], "big", signed=True), 3)
            try:
                sub, _ = codec.decode("ConsumerProtocolSubscription", max(version, 0), memoryview(meta), 2)
                topics.update(sub["topics"])
            except errors.KafkaError:
                pass
        return topics
