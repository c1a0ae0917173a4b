"""The classic rebalance protocol: JoinGroup, SyncGroup, Heartbeat and LeaveGroup.

:class:`Rebalancer` holds the groups this broker coordinates and moves them through the
states of :mod:`.state`. It takes typed requests and gives typed results; an answer that
must wait for other members is a parked :class:`~.state.Reply` that a later step of the
rebalance sets. Timers and parked replies come from a :class:`Scheduler` (the running
event loop in the broker, a hand-driven fake in unit tests), so nothing here does I/O;
a group whose rebalance completed is handed to ``on_group_change`` to be stored.

Whether this broker coordinates a group at all is the caller's check
(:class:`~samsa.coordinator.groups.coordinator.GroupCoordinator`).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from samsa.coordinator.groups.state import (COMPLETING_REBALANCE, DEAD, EMPTY, PREPARING_REBALANCE, STABLE, Group,
                                            Member, Reply, Timer, resolve)
from samsa.protocol import errors

log = logging.getLogger(__name__)

#: The broker configs the rebalance protocol reads (at the time it needs them: they are dynamic).
CONFIG_KEYS = ("group.min.session.timeout.ms", "group.max.session.timeout.ms", "group.max.size",
               "group.initial.rebalance.delay.ms")


class Scheduler(Protocol):
    """Timers and parked replies; ``asyncio``'s running loop is one."""

    def time(self) -> float: ...

    def call_later(self, delay: float, callback: Callable[..., object], *args: Any) -> Timer: ...

    def create_future(self) -> Reply: ...


# ---------------------------------------------------------------- typed requests and results

@dataclass(frozen=True)
class JoinRequest:
    group_id: str
    member_id: str                                # "" for a member joining for the first time
    group_instance_id: str | None                 # static membership (KIP-345)
    protocol_type: str
    protocols: list[tuple[str, bytes]]            # (name, metadata), most preferred first
    session_timeout_ms: int
    rebalance_timeout_ms: int
    client_id: str = ""
    client_host: str = ""
    member_id_required: bool = False              # JoinGroup v4+: hand out the id first (KIP-394)
    leader_skips_assignment: bool = False         # JoinGroup v9+: a rejoining static leader keeps (KIP-814)


@dataclass(frozen=True)
class JoinedMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass
class JoinResult:
    error: int = 0
    member_id: str = ""
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    skip_assignment: bool = False
    members: list[JoinedMember] = field(default_factory=list)   # for the leader only


@dataclass(frozen=True)
class SyncRequest:
    group_id: str
    member_id: str
    generation_id: int
    group_instance_id: str | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignments: dict[str, bytes] = field(default_factory=dict)  # from the leader: member id -> assignment


@dataclass
class SyncResult:
    error: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True)
class HeartbeatRequest:
    group_id: str
    member_id: str
    generation_id: int
    group_instance_id: str | None = None


@dataclass(frozen=True)
class LeavingMember:
    member_id: str
    group_instance_id: str | None = None


# ---------------------------------------------------------------- the protocol

class Rebalancer:
    def __init__(self, scheduler: Scheduler, config: Callable[[str], Any], clock: Callable[[], int],
                 on_group_change: Callable[[Group], None] = lambda group: None):
        self.scheduler = scheduler
        self.cfg = config
        self.clock = clock
        self.on_group_change = on_group_change
        self.groups: dict[str, Group] = {}
        self.completed_rebalances = 0  # joins that ended in a new generation (the broker's metrics)

    def restore(self, group: Group) -> None:
        """A group read back from ``__consumer_offsets``: its members' sessions start now."""
        self.groups[group.group_id] = group
        for member in group.members.values():
            self._schedule_expiry(group, member)

    def forget(self, group_id: str) -> Group | None:
        """Stop coordinating a group (this broker no longer leads its partition)."""
        group = self.groups.pop(group_id, None)
        if group is not None:
            group.cancel_timers()
        return group

    def stop(self) -> None:
        for group in self.groups.values():
            group.cancel_timers()

    def _current(self, group: Group) -> bool:
        """Is ``group`` the object this broker coordinates? A timer of a group replaced since
        (read back again, forgotten) must do nothing: acting on it would store a stale group."""
        return self.groups.get(group.group_id) is group

    # ---------------------------------------------------------------- JoinGroup

    def join(self, req: JoinRequest) -> JoinResult | Reply[JoinResult]:
        """The answer now, or a parked one that the rebalance sets."""
        try:
            timeout = req.session_timeout_ms
            if not self.cfg("group.min.session.timeout.ms") <= timeout <= self.cfg("group.max.session.timeout.ms"):
                raise errors.InvalidSessionTimeoutError(
                    f"session.timeout.ms {timeout} is outside [group.min.session.timeout.ms, group.max.session.timeout.ms]")
            group = self.groups.setdefault(req.group_id, Group(req.group_id))
            if group.state == DEAD:
                raise errors.CoordinatorNotAvailableError(f"group {req.group_id} is being deleted")
            if not group.supports(req.protocol_type, req.protocols):
                raise errors.InconsistentGroupProtocolError(
                    f"the member's protocols do not match group {req.group_id}'s")
        except errors.KafkaError as e:
            return JoinResult(e.code, req.member_id)
        if req.member_id == "":
            return self._join_new(group, req)
        if req.member_id in group.pending_members:
            group.pending_members.discard(req.member_id)
            member = self._new_member(req, req.member_id)
            group.add(member)
            return self._park_join(group, member)
        return self._join_known(group, req)

    @staticmethod
    def _new_member(req: JoinRequest, member_id: str) -> Member:
        return Member(member_id, req.group_instance_id, req.client_id, req.client_host, req.session_timeout_ms,
                      req.rebalance_timeout_ms, req.protocol_type, req.protocols)

    def _join_new(self, group: Group, req: JoinRequest) -> JoinResult | Reply[JoinResult]:
        instance_id = req.group_instance_id
        if instance_id and instance_id in group.static_members:
            return self._rejoin_static(group, group.static_members[instance_id], req)
        if len(group.members) + len(group.pending_members) >= self.cfg("group.max.size"):
            return JoinResult(errors.E_GROUP_MAX_SIZE_REACHED)
        member_id = f"{req.client_id}-{uuid.uuid4()}"
        if instance_id:
            member_id = f"{instance_id}-{uuid.uuid4()}"
        elif req.member_id_required:
            # KIP-394: hand out the id first; the member joins again with it.
            group.pending_members.add(member_id)
            self._schedule_pending_expiry(group, member_id, req.session_timeout_ms)
            return JoinResult(errors.E_MEMBER_ID_REQUIRED, member_id)
        member = self._new_member(req, member_id)
        group.add(member)
        return self._park_join(group, member)

    def _rejoin_static(self, group: Group, old_id: str, req: JoinRequest) -> JoinResult | Reply[JoinResult]:
        """A static member restarting: it takes over its old identity and assignment, and the
        group does not rebalance as long as the selected protocol stays the same."""
        old = group.members[old_id]
        new_id = f"{req.group_instance_id}-{uuid.uuid4()}"
        was_leader = group.leader == old_id
        self._fence(old)
        group.remove(old_id)
        member = Member(new_id, old.group_instance_id, old.client_id, old.client_host, req.session_timeout_ms,
                        req.rebalance_timeout_ms, req.protocol_type, req.protocols, assignment=old.assignment)
        group.add(member)
        if was_leader:
            group.leader = new_id
        if group.state != STABLE or group.protocol not in group.candidate_protocols() \
                or group.select_protocol() != group.protocol:
            return self._park_join(group, member)
        self._schedule_expiry(group, member)
        self.on_group_change(group)
        result = JoinResult(0, new_id, group.generation, group.protocol_type, group.protocol, group.leader or "")
        if was_leader and req.leader_skips_assignment:
            # KIP-814: the leader learns it leads, with the members, but must not reassign.
            result.skip_assignment = True
            result.members = self._join_result(group, member).members
        elif was_leader:
            # Older clients would reassign if told they lead: name the old id, as Kafka does.
            result.leader = old_id
        return result

    @staticmethod
    def _fenced(group: Group | None, member_id: str, instance_id: str | None) -> int:
        """FENCED_INSTANCE_ID for a replaced static member, UNKNOWN_MEMBER_ID for a stranger, else 0."""
        if group is not None and instance_id and instance_id in group.static_members \
                and group.static_members[instance_id] != member_id:
            return errors.E_FENCED_INSTANCE_ID
        if group is None or member_id not in group.members:
            return errors.E_UNKNOWN_MEMBER_ID
        return 0

    def _join_known(self, group: Group, req: JoinRequest) -> JoinResult | Reply[JoinResult]:
        code = self._fenced(group, req.member_id, req.group_instance_id)
        if code:
            return JoinResult(code, req.member_id)
        member = group.members[req.member_id]
        if group.state == STABLE and not group.is_leader(member.member_id) and member.same_protocols(req.protocols):
            return self._join_result(group, member)
        if group.state == COMPLETING_REBALANCE and member.same_protocols(req.protocols):
            return self._join_result(group, member)
        member.protocols = req.protocols
        return self._park_join(group, member)

    def _park_join(self, group: Group, member: Member) -> Reply[JoinResult]:
        resolve(member.join_reply, JoinResult(errors.E_REBALANCE_IN_PROGRESS, member.member_id))
        reply = member.join_reply = self.scheduler.create_future()
        self._schedule_expiry(group, member)
        if group.state != PREPARING_REBALANCE:
            self._prepare_rebalance(group, f"member {member.member_id} joined")
        else:
            self._maybe_complete_join(group)
        return reply

    def _prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.state == COMPLETING_REBALANCE:
            for m in group.members.values():
                resolve(m.sync_reply, SyncResult(errors.E_REBALANCE_IN_PROGRESS))
                m.sync_reply = None
        initial = group.state == EMPTY
        group.transition_to(PREPARING_REBALANCE, self.clock())
        log.info("preparing to rebalance group %s in state PreparingRebalance with old generation %d (reason: %s)",
                 group.group_id, group.generation, reason)
        if group.rebalance_timer:
            group.rebalance_timer.cancel()
        if group.sync_timer:
            group.sync_timer.cancel()
            group.sync_timer = None
        group.pending_sync.clear()
        rebalance_s = group.max_rebalance_timeout_ms() / 1000
        group.rebalance_deadline = self.scheduler.time() + rebalance_s
        delay = self.cfg("group.initial.rebalance.delay.ms") / 1000
        if initial and delay > 0:
            # group.initial.rebalance.delay.ms: let the first members of a new group arrive together.
            group.initial_delay = True
            group.members_at_delay = len(group.members)
            group.rebalance_timer = self.scheduler.call_later(min(delay, rebalance_s), self._initial_delay_expired,
                                                              group)
        else:
            group.rebalance_timer = self.scheduler.call_later(rebalance_s, self._complete_join, group)
            self._maybe_complete_join(group)

    def _initial_delay_expired(self, group: Group) -> None:
        group.rebalance_timer = None
        if group.state != PREPARING_REBALANCE or not self._current(group):
            return
        remaining = group.rebalance_deadline - self.scheduler.time()
        if len(group.members) > group.members_at_delay and remaining > 0:
            group.members_at_delay = len(group.members)
            delay = self.cfg("group.initial.rebalance.delay.ms") / 1000
            group.rebalance_timer = self.scheduler.call_later(min(delay, remaining), self._initial_delay_expired,
                                                              group)
            return
        group.initial_delay = False
        self._complete_join(group)

    def _maybe_complete_join(self, group: Group) -> None:
        if group.state == PREPARING_REBALANCE and not group.initial_delay and group.all_joined():
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        if group.state != PREPARING_REBALANCE or not self._current(group):
            return
        if group.rebalance_timer:
            group.rebalance_timer.cancel()
            group.rebalance_timer = None
        group.initial_delay = False
        for m in [m for m in group.members.values() if m.join_reply is None]:
            log.info("member %s of group %s did not rejoin in time; removing it", m.member_id, group.group_id)
            group.remove(m.member_id)
        group.pending_members.clear()
        group.generation += 1
        self.completed_rebalances += 1
        if not group.members:
            group.protocol = None
            group.transition_to(EMPTY, self.clock())
            self.on_group_change(group)
            log.info("group %s with generation %d is now empty", group.group_id, group.generation)
            return
        group.protocol = group.select_protocol()
        if group.leader not in group.members:
            group.leader = next(iter(group.members))
        group.transition_to(COMPLETING_REBALANCE, self.clock())
        log.info("stabilized group %s generation %d with %d members, protocol %s", group.group_id,
                 group.generation, len(group.members), group.protocol)
        for m in group.members.values():
            reply, m.join_reply = m.join_reply, None
            resolve(reply, self._join_result(group, m))
            self._schedule_expiry(group, m)
        # Every member must now SyncGroup within the rebalance timeout, or leave the group:
        # one that only heartbeats would otherwise hold the group in CompletingRebalance.
        group.pending_sync = set(group.members)
        group.sync_timer = self.scheduler.call_later(group.max_rebalance_timeout_ms() / 1000,
                                                     self._sync_expired, group, group.generation)

    def _sync_expired(self, group: Group, generation: int) -> None:
        group.sync_timer = None
        if not self._current(group) or group.generation != generation or not group.pending_sync:
            return
        if group.state not in (COMPLETING_REBALANCE, STABLE):
            return
        missing = sorted(group.pending_sync)
        log.info("members %s of group %s did not SyncGroup within the rebalance timeout; removing them",
                 ", ".join(missing), group.group_id)
        for member_id in missing:
            member = group.remove(member_id)
            if member is not None:
                self._fence(member)
        self._prepare_rebalance(group, f"{len(missing)} member(s) did not sync in generation {generation}")

    @staticmethod
    def _join_result(group: Group, member: Member) -> JoinResult:
        members = [JoinedMember(m.member_id, m.group_instance_id, m.metadata(group.protocol or ""))
                   for m in group.members.values()] if group.is_leader(member.member_id) else []
        return JoinResult(0, member.member_id, group.generation, group.protocol_type, group.protocol,
                          group.leader or "", members=members)

    # ---------------------------------------------------------------- SyncGroup

    def sync(self, req: SyncRequest) -> SyncResult | Reply[SyncResult]:
        """The answer now, or a parked one that the leader's assignment sets."""
        group = self.groups.get(req.group_id)
        code = self._fenced(group, req.member_id, req.group_instance_id)
        if code:
            return SyncResult(code)
        assert group is not None
        member = group.members[req.member_id]
        if req.generation_id != group.generation:
            return SyncResult(errors.E_ILLEGAL_GENERATION)
        if (req.protocol_type and req.protocol_type != group.protocol_type) or (
                req.protocol_name and req.protocol_name != group.protocol):
            return SyncResult(errors.E_INCONSISTENT_GROUP_PROTOCOL)
        if group.state == PREPARING_REBALANCE:
            return SyncResult(errors.E_REBALANCE_IN_PROGRESS)
        self._schedule_expiry(group, member)
        group.pending_sync.discard(member.member_id)
        if not group.pending_sync and group.sync_timer:
            group.sync_timer.cancel()
            group.sync_timer = None
        if group.state == STABLE:
            return self._sync_result(group, member)
        # CompletingRebalance: the leader's assignment completes everyone's SyncGroup.
        if group.is_leader(member.member_id):
            for m in group.members.values():
                m.assignment = req.assignments.get(m.member_id, b"")
            group.transition_to(STABLE, self.clock())
            self.on_group_change(group)
            for m in group.members.values():
                resolve(m.sync_reply, self._sync_result(group, m))
                m.sync_reply = None
            return self._sync_result(group, member)
        member.sync_reply = self.scheduler.create_future()
        return member.sync_reply

    @staticmethod
    def _sync_result(group: Group, member: Member) -> SyncResult:
        return SyncResult(0, group.protocol_type, group.protocol, member.assignment)

    # ---------------------------------------------------------------- Heartbeat / LeaveGroup

    def heartbeat(self, req: HeartbeatRequest) -> int:
        """The error code to answer with (0: carry on)."""
        group = self.groups.get(req.group_id)
        code = self._fenced(group, req.member_id, req.group_instance_id)
        if code:
            return code
        assert group is not None
        member = group.members[req.member_id]
        if req.generation_id != group.generation:
            return errors.E_ILLEGAL_GENERATION
        self._schedule_expiry(group, member)
        if group.state == PREPARING_REBALANCE:
            return errors.E_REBALANCE_IN_PROGRESS
        return 0

    def leave(self, group_id: str, leaving: list[LeavingMember]) -> list[int]:
        """One error code per leaving member."""
        group = self.groups.get(group_id)
        if group is None:
            return [errors.E_UNKNOWN_MEMBER_ID] * len(leaving)
        codes = []
        for m in leaving:
            member_id = m.member_id
            if m.group_instance_id:
                known = group.static_members.get(m.group_instance_id)
                if known is None or (member_id and member_id != known):
                    codes.append(errors.E_UNKNOWN_MEMBER_ID if known is None else errors.E_FENCED_INSTANCE_ID)
                    continue
                member_id = known
            if member_id in group.pending_members:
                group.pending_members.discard(member_id)
                codes.append(0)
                continue
            if member_id not in group.members:
                codes.append(errors.E_UNKNOWN_MEMBER_ID)
                continue
            self._remove_member(group, member_id, "the member left the group")
            codes.append(0)
        return codes

    def _remove_member(self, group: Group, member_id: str, reason: str) -> None:
        member = group.remove(member_id)
        if member is None:
            return
        self._fence(member)
        log.info("member %s left group %s: %s", member_id, group.group_id, reason)
        if group.state in (STABLE, COMPLETING_REBALANCE):
            self._prepare_rebalance(group, reason)
        elif group.state == PREPARING_REBALANCE:
            self._maybe_complete_join(group)
            if not group.members and group.state == PREPARING_REBALANCE and not group.pending_members:
                self._complete_join(group)

    @staticmethod
    def _fence(member: Member) -> None:
        resolve(member.join_reply, JoinResult(errors.E_UNKNOWN_MEMBER_ID, member.member_id))
        resolve(member.sync_reply, SyncResult(errors.E_UNKNOWN_MEMBER_ID))
        if member.expiry:
            member.expiry.cancel()

    def _schedule_expiry(self, group: Group, member: Member) -> None:
        if member.expiry:
            member.expiry.cancel()
        member.expiry = self.scheduler.call_later(member.session_timeout_ms / 1000, self._expire, group,
                                                  member.member_id)

    def _expire(self, group: Group, member_id: str) -> None:
        member = group.members.get(member_id)
        if member is None or not self._current(group):
            return
        if member.awaiting_answer():
            # A member waiting for its join or sync answer is alive; the rebalance bounds the wait.
            self._schedule_expiry(group, member)
            return
        self._remove_member(group, member_id, f"session timeout of {member.session_timeout_ms} ms expired")

    def _schedule_pending_expiry(self, group: Group, member_id: str, timeout_ms: int) -> None:
        def expire() -> None:
            if member_id in group.pending_members and self._current(group):
                group.pending_members.discard(member_id)
                self._maybe_complete_join(group)
        self.scheduler.call_later(timeout_ms / 1000, expire)

    # ---------------------------------------------------------------- OffsetCommit

    def check_commit(self, group_id: str, generation_id: int, member_id: str, instance_id: str | None) -> int:
        """May this member commit offsets for the group now? 0, or the error code to answer with."""
        group = self.groups.get(group_id)
        if group is not None and group.state == DEAD:
            return errors.E_COORDINATOR_NOT_AVAILABLE
        if generation_id < 0 and (group is None or group.state == EMPTY):
            return 0  # a consumer storing offsets without group management
        if code := self._fenced(group, member_id, instance_id):
            return code
        assert group is not None
        if generation_id != group.generation:  # checked first, as Kafka does: a stale member must rejoin
            return errors.E_ILLEGAL_GENERATION
        if group.state == COMPLETING_REBALANCE:
            return errors.E_REBALANCE_IN_PROGRESS
        return 0
