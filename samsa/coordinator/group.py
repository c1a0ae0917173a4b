"""A consumer group under the classic rebalance protocol: members, generation, state.

States, as Kafka names them::

    Empty --join--> PreparingRebalance --all joined--> CompletingRebalance --leader syncs--> Stable
      ^                    ^  |                                  |                            |
      |                    |  +-- no members left ---------------+----------------------------+
      +-- last member leaves or expires; Dead once deleted

The group object only keeps state; :mod:`samsa.coordinator.coordinator` drives it.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field

EMPTY = "Empty"
PREPARING_REBALANCE = "PreparingRebalance"
COMPLETING_REBALANCE = "CompletingRebalance"
STABLE = "Stable"
DEAD = "Dead"


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
    join_future: asyncio.Future | None = None     # parked JoinGroup answer
    sync_future: asyncio.Future | None = None     # parked SyncGroup answer
    expiry: asyncio.TimerHandle | None = None     # session timeout

    def metadata(self, protocol: str) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""

    def same_protocols(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols


@dataclass
class Group:
    group_id: str
    state: str = EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # group.instance.id -> member id
    pending_members: set[str] = field(default_factory=set)        # ids issued with MEMBER_ID_REQUIRED
    state_timestamp: int = -1                                      # ms, when the state last changed
    rebalance_timer: asyncio.TimerHandle | None = None
    rebalance_deadline: float = 0.0
    initial_delay: bool = False                                    # in group.initial.rebalance.delay.ms
    members_at_delay: int = 0

    def transition(self, state: str, now_ms: int) -> None:
        self.state = state
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
        return member

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
        return all(m.join_future is not None for m in self.members.values()) and not self.pending_members

    def max_rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)
