"""Consumer groups of the new protocol (KIP-848): ConsumerGroupHeartbeat and ConsumerGroupDescribe.

:class:`ConsumerGroups` holds the consumer groups this broker coordinates and drives the
core of :mod:`.modern` from members' heartbeats, from their session and revocation timers,
and from topics appearing, going or growing (seen at the next heartbeat). Each step
returns the ``__consumer_offsets`` records it changed (Kafka's consumer group record
types, :mod:`samsa.protocol.group_records`); the caller (:class:`.coordinator.GroupCoordinator`)
writes them before it answers, and hands the records read back on taking over a partition
to :meth:`ConsumerGroups.load`.

Whether this broker coordinates the group, and whether a classic group of that id is in
the way, is the caller's check.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from samsa.cluster.metadata import TopicInfo
from samsa.coordinator.groups.assignors import ASSIGNORS, Assignment, MemberSpec, TopicId, assignor_name
from samsa.coordinator.groups.modern import (JOIN_EPOCH, LEAVE_EPOCH, LEAVE_STATIC_EPOCH, MemberState, ModernGroup,
                                             ModernMember, reconcile)
from samsa.protocol import errors
from samsa.protocol import group_records as gr
from samsa.protocol.names import INTERNAL_TOPICS

log = logging.getLogger(__name__)

Entry = tuple[bytes, bytes | None]

#: The broker configs consumer groups read, at the time they need them.
CONFIG_KEYS = ("group.consumer.session.timeout.ms", "group.consumer.heartbeat.interval.ms",
               "group.consumer.min.session.timeout.ms", "group.consumer.max.session.timeout.ms",
               "group.consumer.min.heartbeat.interval.ms", "group.consumer.max.heartbeat.interval.ms",
               "group.consumer.max.size", "group.consumer.assignors", "group.consumer.migration.policy")



@dataclass(frozen=True)
class ConsumerHeartbeat:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: list[str] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Assignment | None = None               # TopicPartitions: None if not sent
    client_id: str = ""
    client_host: str = ""
    version: int = 1


@dataclass
class ConsumerHeartbeatResult:
    error: int = 0
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None          # None: unchanged since the last answer


@dataclass
class ConsumerGroupDescription:
    group_id: str
    error: int = 0
    message: str | None = None
    state: str = ""
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor: str = ""
    members: list[tuple[ModernMember, Assignment]] = field(default_factory=list)  # (member, its target)
    topic_names: dict[TopicId, str] = field(default_factory=dict)


class _Refused(Exception):
    def __init__(self, error: errors.KafkaError):
        self.error = error


def _refuse(cls: type[errors.KafkaError], message: str) -> _Refused:
    return _Refused(cls(message))


def _wire_partitions(a: Assignment) -> list[dict]:
    return [{"topic_id": t, "partitions": sorted(ps)} for t, ps in sorted(a.items())]


def _from_wire(tps: list[dict] | None) -> Assignment:
    return {tp["topic_id"]: frozenset(tp["partitions"]) for tp in tps or [] if tp["partitions"]}


class ConsumerGroups:
    """Consumer groups; :class:`.share_groups.ShareGroups` is the same driver with the share
    group's keys, records, validation and assignor (the class attributes below)."""

    KIND = "consumer"                    # in Kafka's messages: "The consumer group ..."
    RECORD = "ConsumerGroup"             # the prefix of the record kinds (group_records)
    CONFIG = "consumer"                  # group configs ``consumer.*``, broker keys ``group.consumer.*``
    REVOKE_FIRST = True                  # a partition has one owner: revoke before assigning

    def __init__(self, scheduler: Any, config: Callable[[str], Any], topics: Callable[[], Mapping[str, TopicInfo]],
                 write: Callable[[str, list[Entry]], None],
                 group_config: Callable[[str, str], Any] = lambda group_id, key: None):
        self.scheduler = scheduler          # call_later(delay, fn, *args) -> timer
        self.cfg = config
        self.topics = topics
        self.write = write                  # for records of timer-driven changes (expiry, fencing)
        self.group_config = group_config    # a group's config value, or None for the broker's
        self.groups: dict[str, ModernGroup] = {}
        self.rebalances = 0                 # target assignments computed (the broker's metrics)
        # group id -> (the topic names they were resolved against, regex -> matching topics)
        self._regexes: dict[str, tuple[frozenset[str], dict[str, frozenset[str]]]] = {}
        self._resolving: set[str] = set()

    # ---------------------------------------------------------------- configs

    def session_timeout_ms(self, group_id: str) -> int:
        v = self.group_config(group_id, f"{self.CONFIG}.session.timeout.ms")
        return int(v) if v is not None else self.cfg(f"group.{self.CONFIG}.session.timeout.ms")

    def heartbeat_interval_ms(self, group_id: str) -> int:
        v = self.group_config(group_id, f"{self.CONFIG}.heartbeat.interval.ms")
        return int(v) if v is not None else self.cfg(f"group.{self.CONFIG}.heartbeat.interval.ms")

    def assignors(self) -> list[str]:
        return [assignor_name(a) for a in self.cfg(f"group.{self.CONFIG}.assignors")]

    # ---------------------------------------------------------------- lifecycle

    def forget(self, group_id: str) -> ModernGroup | None:
        self._regexes.pop(group_id, None)
        g = self.groups.pop(group_id, None)
        if g is not None:
            for m in g.members.values():
                m.cancel_timers()
        return g

    def stop(self) -> None:
        for group_id in list(self.groups):
            self.forget(group_id)

    # ---------------------------------------------------------------- heartbeat

    def heartbeat(self, req: ConsumerHeartbeat) -> tuple[ConsumerHeartbeatResult, list[Entry]]:
        """The answer and the records to write before giving it."""
        try:
            self._validate(req)
            if req.member_epoch in (LEAVE_EPOCH, LEAVE_STATIC_EPOCH):
                return self._leave(req)
            return self._join_or_update(req)
        except _Refused as r:
            return ConsumerHeartbeatResult(r.error.code, r.error.message), []

    def _validate(self, req: ConsumerHeartbeat) -> None:
        if not req.group_id:
            raise _refuse(errors.InvalidRequestError, "GroupId can't be empty.")
        if req.instance_id == "":
            raise _refuse(errors.InvalidRequestError, "InstanceId can't be empty.")
        if req.rack_id == "":
            raise _refuse(errors.InvalidRequestError, "RackId can't be empty.")
        if req.member_epoch == JOIN_EPOCH:
            if not req.member_id and req.version >= 1:
                raise _refuse(errors.InvalidRequestError, "MemberId can't be empty.")
            if req.rebalance_timeout_ms == -1:
                raise _refuse(errors.InvalidRequestError, "RebalanceTimeoutMs must be provided in first request.")
            if req.subscribed_topic_names is None and not req.subscribed_topic_regex:
                raise _refuse(errors.InvalidRequestError,
                              "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining.")
            if req.owned is None or req.owned:  # Kafka wants an empty list, not null
                raise _refuse(errors.InvalidRequestError, "TopicPartitions must be empty when (re-)joining.")
        elif req.member_epoch > 0 or req.member_epoch in (LEAVE_EPOCH, LEAVE_STATIC_EPOCH):
            if not req.member_id:
                raise _refuse(errors.InvalidRequestError, "MemberId can't be empty.")
            if req.member_epoch == LEAVE_STATIC_EPOCH and req.instance_id is None:
                raise _refuse(errors.InvalidRequestError, "InstanceId can't be null.")
        else:
            raise _refuse(errors.InvalidRequestError, "MemberEpoch is invalid.")
        if req.subscribed_topic_regex:
            try:
                re.compile(req.subscribed_topic_regex)
            except re.error as e:
                raise _refuse(errors.InvalidRegularExpressionError,
                              f"SubscribedTopicRegex `{req.subscribed_topic_regex}` is not a valid regular "
                              f"expression: {e}.") from None
        if req.server_assignor is not None and req.server_assignor not in self.assignors():
            raise _refuse(errors.UnsupportedAssignorError,
                          f"ServerAssignor {req.server_assignor} is not supported. Supported assignors: "
                          f"{', '.join(self.assignors())}.")

    def _join_or_update(self, req: ConsumerHeartbeat) -> tuple[ConsumerHeartbeatResult, list[Entry]]:
        entries: list[Entry] = []
        g = self.groups.get(req.group_id)
        if g is None:
            if req.member_epoch != JOIN_EPOCH:
                raise _refuse(errors.GroupIdNotFoundError, f"{self.KIND.capitalize()} group {req.group_id} not found.")
            g = ModernGroup(req.group_id, self.KIND)
        member_id = req.member_id or str(uuid.uuid4())
        member = g.members.get(member_id)
        bump = False
        full = req.member_epoch == JOIN_EPOCH or req.owned is not None
        if req.member_epoch == JOIN_EPOCH and req.instance_id:
            held_by = g.static_members.get(req.instance_id)
            if held_by is not None and held_by != member_id:
                old = g.members[held_by]
                if old.member_epoch != LEAVE_STATIC_EPOCH:
                    raise _refuse(errors.UnreleasedInstanceIdError,
                                  f"Static member {member_id} with instance id {req.instance_id} cannot join the "
                                  f"group because the instance id is owned by {held_by} member.")
                # A static member back under a new member id: it takes the old one's place,
                # epoch and partitions, without a new assignment.
                target = g.target.get(held_by, old.assigned)
                g.remove(held_by)
                entries += self._member_tombstones(g.group_id, held_by)
                member = ModernMember(member_id, req.instance_id, member_epoch=old.previous_member_epoch,
                                      previous_member_epoch=old.previous_member_epoch, assigned=old.assigned,
                                      pending_revocation=old.pending_revocation, state=old.state,
                                      subscribed_topic_names=old.subscribed_topic_names,
                                      subscribed_topic_regex=old.subscribed_topic_regex,
                                      server_assignor=old.server_assignor,
                                      rebalance_timeout_ms=old.rebalance_timeout_ms)
                g.target[member_id] = target
                g.add(member)
                entries.append(self._target_member_entry(g, member_id))
                entries.append(self._current_entry(g, member))
        if member is None:
            if req.member_epoch != JOIN_EPOCH:
                raise _refuse(errors.UnknownMemberIdError,
                              f"Member {member_id} is not a member of group {req.group_id}.")
            if len(g.members) >= self.cfg(f"group.{self.CONFIG}.max.size"):
                raise _refuse(errors.GroupMaxSizeReachedError,
                              f"The {self.KIND} group has reached its maximum capacity of "
                              f"{self.cfg(f'group.{self.CONFIG}.max.size')} members.")
            member = ModernMember(member_id, req.instance_id)
            g.add(member)
            self.groups[g.group_id] = g
            bump = True
        elif req.member_epoch != JOIN_EPOCH:
            self._check_epoch(g, member, req)
        # The member's details and subscription.
        before = (member.instance_id, member.rack_id, member.client_id, member.client_host,
                  member.subscribed_topic_names, member.subscribed_topic_regex, member.server_assignor,
                  member.rebalance_timeout_ms)
        if req.instance_id is not None:
            member.instance_id = req.instance_id
        if req.rack_id is not None:
            member.rack_id = req.rack_id
        member.client_id, member.client_host = req.client_id, req.client_host
        if req.rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = req.rebalance_timeout_ms
        # A member subscribes to names or to a regex (librdkafka sends an empty regex with names).
        # Names and a regex may be subscribed together (their union); null leaves either as
        # it was, an empty regex removes it (librdkafka sends "" with names only).
        if req.subscribed_topic_names is not None:
            member.subscribed_topic_names = sorted(set(req.subscribed_topic_names))
        if req.subscribed_topic_regex is not None:
            member.subscribed_topic_regex = req.subscribed_topic_regex or None
        if req.server_assignor is not None or req.member_epoch == JOIN_EPOCH:
            member.server_assignor = req.server_assignor
        after = (member.instance_id, member.rack_id, member.client_id, member.client_host,
                 member.subscribed_topic_names, member.subscribed_topic_regex, member.server_assignor,
                 member.rebalance_timeout_ms)
        if after != before or bump:
            entries.append(self._member_entry(g, member))
            if after[4:7] != before[4:7]:
                bump = True
        entries += self._refresh(g, bump)
        # Reconcile this member towards its target.
        sent_before = (member.member_epoch, member.assigned)
        if reconcile(g, member, req.owned if req.member_epoch != JOIN_EPOCH else {},
                     revoke_first=self.REVOKE_FIRST) or bump:
            entries.append(self._current_entry(g, member))
        self._arm_timers(g, member)
        changed = (member.member_epoch, member.assigned) != sent_before
        return ConsumerHeartbeatResult(
            0, None, member_id, member.member_epoch, self.heartbeat_interval_ms(g.group_id),
            member.assigned if (full or changed) else None), entries

    def _check_epoch(self, g: ModernGroup, member: ModernMember, req: ConsumerHeartbeat) -> None:
        """Kafka's fencing: a newer epoch than the coordinator's, or an older one that is not
        the previous epoch with partitions all still assigned, is fenced."""
        if req.member_epoch > member.member_epoch:
            raise _refuse(errors.FencedMemberEpochError,
                          f"The {self.KIND} group member has a greater member epoch ({req.member_epoch}) than the one "
                          f"known by the group coordinator ({member.member_epoch}). The member must abandon all "
                          f"its partitions and rejoin.")
        if req.member_epoch < member.member_epoch:
            owned_ok = req.owned is None or all(ps <= member.assigned.get(t, frozenset())
                                                for t, ps in req.owned.items())
            if req.member_epoch != member.previous_member_epoch or not owned_ok:
                raise _refuse(errors.FencedMemberEpochError,
                              f"The {self.KIND} group member has a smaller member epoch ({req.member_epoch}) than the "
                              f"one known by the group coordinator ({member.member_epoch}). The member must abandon "
                              f"all its partitions and rejoin.")

    def _leave(self, req: ConsumerHeartbeat) -> tuple[ConsumerHeartbeatResult, list[Entry]]:
        g = self.groups.get(req.group_id)
        member_id = req.member_id
        if g is not None and req.instance_id and member_id not in g.members:
            member_id = g.static_members.get(req.instance_id, member_id)
        if g is None:
            raise _refuse(errors.GroupIdNotFoundError, f"{self.KIND.capitalize()} group {req.group_id} not found.")
        member = g.members.get(member_id)
        if member is None:
            raise _refuse(errors.UnknownMemberIdError,
                          f"Member {req.member_id} is not a member of group {req.group_id}.")
        if req.instance_id and member.instance_id and req.instance_id != member.instance_id:
            raise _refuse(errors.FencedInstanceIdError,
                          f"Static member {member_id} was fenced by instance id {member.instance_id}.")
        if req.member_epoch == LEAVE_STATIC_EPOCH:
            # A static member leaving for a while: it keeps its place and partitions until its
            # session expires or it comes back.
            if member.member_epoch != LEAVE_STATIC_EPOCH:
                member.previous_member_epoch, member.member_epoch = member.member_epoch, LEAVE_STATIC_EPOCH
            self._arm_timers(g, member)
            return (ConsumerHeartbeatResult(0, None, req.member_id, LEAVE_STATIC_EPOCH, 0),
                    [self._current_entry(g, member)])
        entries = self._remove(g, member_id)
        return ConsumerHeartbeatResult(0, None, req.member_id, LEAVE_EPOCH, 0), entries

    def _remove(self, g: ModernGroup, member_id: str) -> list[Entry]:
        """A member leaves or is fenced: its records go, the group epoch rises."""
        g.remove(member_id)
        entries = self._member_tombstones(g.group_id, member_id)
        entries += self._refresh(g, True)
        return entries

    # ---------------------------------------------------------------- timers

    def _arm_timers(self, g: ModernGroup, member: ModernMember) -> None:
        if member.session_timer is not None:
            member.session_timer.cancel()
        member.session_timer = self.scheduler.call_later(self.session_timeout_ms(g.group_id) / 1000, self._expire,
                                                         g, member.member_id, "session timeout")
        if member.state == MemberState.UNREVOKED_PARTITIONS:
            if member.revocation_timer is None and member.rebalance_timeout_ms > 0:
                member.revocation_timer = self.scheduler.call_later(
                    member.rebalance_timeout_ms / 1000, self._expire, g, member.member_id, "rebalance timeout")
        elif member.revocation_timer is not None:
            member.revocation_timer.cancel()
            member.revocation_timer = None

    def _expire(self, g: ModernGroup, member_id: str, why: str) -> None:
        if self.groups.get(g.group_id) is not g or member_id not in g.members:
            return
        log.info("member %s of %s group %s fenced: %s", member_id, self.KIND, g.group_id, why)
        self.write(g.group_id, self._remove(g, member_id))

    # ---------------------------------------------------------------- epochs and target assignment

    def refresh_topics(self, group_id: str) -> list[Entry]:
        """Topics changed: a new target assignment if the group's subscribed topics did."""
        g = self.groups.get(group_id)
        return self._refresh(g, False) if g is not None else []

    def _refresh(self, g: ModernGroup, bump: bool) -> list[Entry]:
        """Bump the group epoch if asked or if the subscribed topics changed; then compute
        the new target assignment. The records of what changed."""
        entries: list[Entry] = []
        self._maybe_resolve_later(g)
        topics = self._subscribed_topics(g)
        if topics != g.topics:
            g.topics = topics
            entries += self._partition_metadata_entries(g)
            bump = True
        if bump:
            g.group_epoch += 1
            entries.append(self._epoch_entry(g))
        if g.assignment_epoch < g.group_epoch:
            entries += self._assign(g)
        return entries

    def _resolve(self, group_id: str, member: ModernMember, by_name: Mapping[str, TopicInfo]) -> set[str]:
        """The member's topics: its names, and what its regex matched when last resolved."""
        names = {n for n in member.subscribed_topic_names if n in by_name}
        if member.subscribed_topic_regex is not None:
            _, resolved = self._regexes.get(group_id, (None, {}))
            names |= {n for n in resolved.get(member.subscribed_topic_regex, ()) if n in by_name}
        return names

    # Regexes are resolved as Kafka resolves them, in the background: a heartbeat that brings a
    # new regex (or comes after topics changed) is answered with the topics known so far, and the
    # matches join the target assignment in a new group epoch moments later.

    def _maybe_resolve_later(self, g: ModernGroup) -> None:
        regexes = {m.subscribed_topic_regex for m in g.members.values() if m.subscribed_topic_regex}
        seen, resolved = self._regexes.get(g.group_id, (None, {}))
        if set(resolved) - regexes:  # a regex no member subscribes to any more is forgotten
            resolved = {r: v for r, v in resolved.items() if r in regexes}
            self._regexes[g.group_id] = (seen or frozenset(), resolved)
        if not regexes or g.group_id in self._resolving:
            return
        if regexes <= set(resolved) and seen == frozenset(self.topics()):
            return
        self._resolving.add(g.group_id)
        self.scheduler.call_later(0, self._resolve_in_background, g)

    def _resolve_now(self, g: ModernGroup) -> None:
        by_name = self.topics()
        resolved = {}
        for regex in {m.subscribed_topic_regex for m in g.members.values() if m.subscribed_topic_regex}:
            try:
                pattern = re.compile(regex)
            except re.error:
                continue
            resolved[regex] = frozenset(n for n in by_name if n not in INTERNAL_TOPICS and pattern.fullmatch(n))
        self._regexes[g.group_id] = (frozenset(by_name), resolved)

    def _resolve_in_background(self, g: ModernGroup) -> None:
        self._resolving.discard(g.group_id)
        if self.groups.get(g.group_id) is not g:
            return
        self._resolve_now(g)
        self.write(g.group_id, self._refresh(g, False))

    def _subscribed_topics(self, g: ModernGroup) -> dict[TopicId, tuple[str, int]]:
        by_name = self.topics()
        names: set[str] = set()
        for m in g.members.values():
            names |= self._resolve(g.group_id, m, by_name)
        return {by_name[n].topic_id: (n, len(by_name[n].partitions)) for n in names}

    def subscribed_topic_names(self, group_id: str) -> set[str]:
        """The topics the group's members subscribe to now (names, and regexes resolved)."""
        g = self.groups.get(group_id)
        if g is None:
            return set()
        by_name = self.topics()
        return {n for m in g.members.values() for n in self._resolve(g.group_id, m, by_name)}

    def preferred_assignor(self, g: ModernGroup) -> str:
        """The assignor most members ask for; without a preference, the first configured."""
        configured = self.assignors()
        votes = Counter(m.server_assignor for m in g.members.values() if m.server_assignor in configured)
        if votes:
            return max(sorted(votes), key=lambda a: votes[a])
        return configured[0] if configured else "uniform"

    def _assign(self, g: ModernGroup) -> list[Entry]:
        by_name = self.topics()
        ids = {name: tid for tid, (name, _) in g.topics.items()}
        specs = {}
        for m in g.members.values():
            subscribed = frozenset(ids[n] for n in self._resolve(g.group_id, m, by_name) if n in ids)
            specs[m.member_id] = MemberSpec(subscribed, g.target.get(m.member_id, {}), m.rack_id, m.instance_id)
        target = ASSIGNORS[self.preferred_assignor(g)](specs, {t: n for t, (_, n) in g.topics.items()})
        entries = []
        for member_id in g.members:
            new = target.get(member_id, {})
            if new != g.target.get(member_id) or member_id not in g.target:
                g.target[member_id] = new
                entries.append(self._target_member_entry(g, member_id))
        g.assignment_epoch = g.group_epoch
        entries.append(self._record(g.group_id, None, "TargetAssignmentMetadata",
                                    {"assignment_epoch": g.assignment_epoch}))
        self.rebalances += 1
        return entries

    # ---------------------------------------------------------------- records

    def _record(self, group_id: str, member_id: str | None, kind: str, value: dict | None) -> Entry:
        """One record of this group type: ``kind`` without its prefix (``Metadata`` ...)."""
        kind = self.RECORD + kind
        return gr.consumer_key(kind, group_id, member_id), None if value is None else gr.consumer_value(kind, value)

    def _epoch_entry(self, g: ModernGroup) -> Entry:
        return self._record(g.group_id, None, "Metadata", {"epoch": g.group_epoch})

    def _member_entry(self, g: ModernGroup, m: ModernMember) -> Entry:
        return (gr.consumer_key("ConsumerGroupMemberMetadata", g.group_id, m.member_id),
                gr.consumer_value("ConsumerGroupMemberMetadata", {
                    "instance_id": m.instance_id, "rack_id": m.rack_id, "client_id": m.client_id,
                    "client_host": m.client_host, "subscribed_topic_names": m.subscribed_topic_names,
                    "subscribed_topic_regex": m.subscribed_topic_regex,
                    "rebalance_timeout_ms": m.rebalance_timeout_ms, "server_assignor": m.server_assignor,
                    "classic_member_metadata": None}))

    def _target_member_entry(self, g: ModernGroup, member_id: str) -> Entry:
        return self._record(g.group_id, member_id, "TargetAssignmentMember",
                            {"topic_partitions": _wire_partitions(g.target.get(member_id, {}))})

    def _current_entry(self, g: ModernGroup, m: ModernMember) -> Entry:
        return (gr.consumer_key("ConsumerGroupCurrentMemberAssignment", g.group_id, m.member_id),
                gr.consumer_value("ConsumerGroupCurrentMemberAssignment", {
                    "member_epoch": m.member_epoch, "previous_member_epoch": m.previous_member_epoch,
                    "state": int(m.state), "assigned_partitions": _wire_partitions(m.assigned),
                    "partitions_pending_revocation": _wire_partitions(m.pending_revocation)}))

    def _partition_metadata_entries(self, g: ModernGroup) -> list[Entry]:
        return [(gr.consumer_key("ConsumerGroupPartitionMetadata", g.group_id),
                 gr.consumer_value("ConsumerGroupPartitionMetadata", {"topics": [
                     {"topic_id": t, "topic_name": name, "num_partitions": n, "partition_metadata": []}
                     for t, (name, n) in sorted(g.topics.items())]}))]

    #: The records of the group itself, deleted last (DeleteGroups).
    GROUP_RECORDS = ("TargetAssignmentMetadata", "PartitionMetadata", "Metadata")

    def _member_tombstones(self, group_id: str, member_id: str) -> list[Entry]:
        return [self._record(group_id, member_id, kind, None)
                for kind in ("CurrentMemberAssignment", "TargetAssignmentMember", "MemberMetadata")]

    def tombstones(self, g: ModernGroup) -> list[Entry]:
        """Every record of a group, deleted (DeleteGroups, or a conversion to a classic group)."""
        out = []
        for member_id in list(g.members):
            out += self._member_tombstones(g.group_id, member_id)
        out += [self._record(g.group_id, None, kind, None) for kind in self.GROUP_RECORDS]
        return out

    # ---------------------------------------------------------------- replay

    def load(self, records: Mapping[tuple[str, str, str | None], dict]) -> None:
        """Rebuild groups from their latest records, ``(kind, group, member) -> value``
        (a key whose last record was a tombstone is absent). Members' sessions start now."""
        built: dict[str, ModernGroup] = {}

        def group(group_id: str) -> ModernGroup:
            return built.setdefault(group_id, ModernGroup(group_id, self.KIND))

        def member(g: ModernGroup, member_id: str) -> ModernMember:
            if member_id not in g.members:
                g.members[member_id] = ModernMember(member_id)
            return g.members[member_id]

        for (kind, group_id, member_id), v in records.items():
            if not kind.startswith(self.RECORD):
                continue
            kind = kind[len(self.RECORD):]
            g = group(group_id)
            if kind == "Metadata":
                g.group_epoch = v["epoch"]
            elif kind == "TargetAssignmentMetadata":
                g.assignment_epoch = v["assignment_epoch"]
            elif kind == "PartitionMetadata":
                g.topics = {t["topic_id"]: (t["topic_name"], t["num_partitions"]) for t in v["topics"]}
            elif kind == "TargetAssignmentMember" and member_id is not None:
                g.target[member_id] = _from_wire(v["topic_partitions"])
            elif kind == "MemberMetadata" and member_id is not None:
                m = member(g, member_id)
                m.instance_id, m.rack_id = v.get("instance_id"), v["rack_id"]
                m.client_id, m.client_host = v["client_id"], v["client_host"]
                m.subscribed_topic_names = list(v["subscribed_topic_names"])
                m.subscribed_topic_regex = v.get("subscribed_topic_regex")
                m.rebalance_timeout_ms, m.server_assignor = v.get("rebalance_timeout_ms", -1), v.get("server_assignor")
            elif kind == "CurrentMemberAssignment" and member_id is not None:
                m = member(g, member_id)
                m.member_epoch, m.previous_member_epoch = v["member_epoch"], v["previous_member_epoch"]
                m.state = MemberState(v["state"]) if v["state"] in MemberState._value2member_map_ else MemberState.UNKNOWN
                m.assigned = _from_wire(v["assigned_partitions"])
                m.pending_revocation = _from_wire(v.get("partitions_pending_revocation"))
        for g in built.values():
            self.forget(g.group_id)
            for m in list(g.members.values()):
                g.add(m)
                self._arm_timers(g, m)
            g.target = {k: v for k, v in g.target.items() if k in g.members}
            self.groups[g.group_id] = g
            self._resolve_now(g)  # as they were: the stored target assignment already holds the matches

    # ---------------------------------------------------------------- admin

    def describe(self, group_id: str) -> ConsumerGroupDescription:
        g = self.groups.get(group_id)
        if g is None:
            return ConsumerGroupDescription(group_id, errors.E_GROUP_ID_NOT_FOUND,
                                            f"Group {group_id} not found.")
        names = {t: name for t, (name, _) in g.topics.items()}
        for name, info in self.topics().items():
            names.setdefault(info.topic_id, name)
        return ConsumerGroupDescription(group_id, 0, None, g.state.value, g.group_epoch, g.assignment_epoch,
                                        self.preferred_assignor(g),
                                        [(m, g.target.get(m.member_id, {})) for m in g.members.values()], names)

    def check_commit(self, group_id: str, member_id: str, epoch: int, api_version: int | None = None) -> int:
        """0 if a member may commit at ``epoch``; an admin commit (no member, epoch -1) always may.
        A member of the consumer protocol commits with OffsetCommit v9+ (Kafka answers
        UNSUPPORTED_VERSION to older ones); a wrong epoch is STALE_MEMBER_EPOCH."""
        g = self.groups.get(group_id)
        if g is None or (epoch < 0 and not member_id):
            return 0
        m = g.members.get(member_id)
        if m is None:
            return errors.E_UNKNOWN_MEMBER_ID
        if api_version is not None and api_version < 9:
            return errors.E_UNSUPPORTED_VERSION
        if epoch != m.member_epoch:
            return errors.E_STALE_MEMBER_EPOCH
        return 0
