"""Streams groups (KIP-1071): StreamsGroupHeartbeat and StreamsGroupDescribe.

A streams group is a group of the new protocol on the core consumer and share groups use
(:mod:`.modern`, driven by :class:`.consumer_groups.ConsumerGroups`: member epochs, session and
revocation timers, the target assignment, reconciliation with revocation first). What differs
is declared here:

- what is assigned: *tasks*, not partitions. Task (subtopology, p) reads partition p of its
  subtopology's source topics. An assignment is kept in the core's form with the key
  ``(kind, subtopology id)``, kind ``active``/``standby``/``warmup``; only active tasks have a
  single holder (``exclusive``), so only they wait for their previous holder to revoke them;
- the topology: sent by a member when it joins, recorded for the group, and made concrete
  against the cluster's topics (:mod:`.streams_topology`): task counts, internal
  (repartition and changelog) topics created as the topology asks, a status telling members
  why nothing is assigned (missing source or internal topics, wrongly partitioned topics);
- the assignor: Kafka's sticky task assignor (:func:`.assignors.sticky_tasks`), with
  ``streams.num.standby.replicas`` standby replicas per task; no warm-up tasks;
- the initial rebalance delay: a new group's first assignment waits
  ``group.streams.initial.rebalance.delay.ms`` (status ASSIGNMENT_DELAYED meanwhile); later
  target assignments come at most every ``group.streams.assignment.interval.ms``;
- its keys: ``group.streams.*`` on the broker, ``streams.*`` per group;
- its records in ``__consumer_offsets``: ``StreamsGroup*`` (key versions 17, 19 to 23).
"""

from __future__ import annotations

import hashlib
import logging
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from samsa.coordinator.groups import streams_topology as st
from samsa.coordinator.groups.assignors import StreamsMemberSpec, sticky_tasks
from samsa.coordinator.groups.consumer_groups import (ConsumerGroupDescription, ConsumerGroups, ConsumerHeartbeat,
                                                      Entry, _refuse, _Refused)
from samsa.coordinator.groups.modern import (JOIN_EPOCH, LEAVE_EPOCH, LEAVE_STATIC_EPOCH, MemberState, ModernGroup,
                                             ModernMember, reconcile)
from samsa.protocol import errors

log = logging.getLogger(__name__)

#: The broker configs streams groups read.
CONFIG_KEYS = ("group.streams.session.timeout.ms", "group.streams.heartbeat.interval.ms",
               "group.streams.min.session.timeout.ms", "group.streams.max.session.timeout.ms",
               "group.streams.min.heartbeat.interval.ms", "group.streams.max.heartbeat.interval.ms",
               "group.streams.max.size", "group.streams.num.standby.replicas", "group.streams.max.standby.replicas",
               "group.streams.initial.rebalance.delay.ms", "group.streams.assignment.interval.ms",
               "group.streams.assignors")

ACTIVE, STANDBY, WARMUP = "active", "standby", "warmup"
KINDS = (ACTIVE, STANDBY, WARMUP)
#: StreamsGroupHeartbeatResponse's TaskOffsetIntervalMs and AcceptableRecoveryLag (Kafka 4.4's defaults).
TASK_OFFSET_INTERVAL_MS = 60000
ACCEPTABLE_RECOVERY_LAG = 10000

Tasks = dict[tuple[str, str], frozenset[int]]        # (kind, subtopology id) -> partitions


def tasks_from_wire(active: list | None, standby: list | None, warmup: list | None) -> Tasks | None:
    """The tasks a member says it owns (None: it did not say)."""
    if active is None and standby is None and warmup is None:
        return None
    out: Tasks = {}
    for kind, ids in ((ACTIVE, active), (STANDBY, standby), (WARMUP, warmup)):
        for t in ids or []:
            if t["partitions"]:
                key = (kind, t["subtopology_id"])
                out[key] = out.get(key, frozenset()) | frozenset(t["partitions"])
    return out


def tasks_wire(tasks: Tasks, kind: str) -> list[dict]:
    return [{"subtopology_id": sub, "partitions": sorted(ps)} for (k, sub), ps in sorted(tasks.items()) if k == kind]


@dataclass(frozen=True)
class StreamsHeartbeat:
    group_id: str
    member_id: str
    member_epoch: int
    endpoint_information_epoch: int = 0
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    topology: dict | None = None
    active_tasks: list | None = None
    standby_tasks: list | None = None
    warmup_tasks: list | None = None
    process_id: str | None = None
    user_endpoint: tuple[str, int] | None = None
    client_tags: dict[str, str] | None = None
    task_offsets: list | None = None
    task_end_offsets: list | None = None
    shutdown_application: bool = False
    client_id: str = ""
    client_host: str = ""


@dataclass
class StreamsHeartbeatResult:
    error: int = 0
    message: str | None = None
    member_id: str = ""
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    status: list[tuple[int, str]] | None = None
    tasks: Tasks | None = None                     # None: unchanged since the last answer
    endpoint_information_epoch: int = 0
    partitions_by_user_endpoint: list[dict] | None = None

    @property
    def assignment(self) -> Tasks | None:          # as ConsumerHeartbeatResult, for the shared driver
        return self.tasks


@dataclass
class StreamsMember(ModernMember):
    process_id: str = ""
    user_endpoint: tuple[str, int] | None = None
    client_tags: dict[str, str] = field(default_factory=dict)
    topology_epoch: int = 0
    task_offsets: list = field(default_factory=list)
    task_end_offsets: list = field(default_factory=list)


@dataclass
class StreamsGroup(ModernGroup):
    group_type: str = "streams"
    topology: dict | None = None
    configured: st.Configured | None = None
    endpoint_epoch: int = 0
    delayed: bool = False                           # in the initial rebalance delay
    shutdown: bool = False                          # a member asked the application to shut down
    creation_failures: dict[str, str] = field(default_factory=dict)
    assigned_at: float | None = None                # scheduler time of the last target assignment
    assign_pending: bool = False                    # a target assignment is due after the interval

    @property
    def state(self) -> Any:
        if not self.dead and self.members and (self.configured is None or not self.configured.ready):
            return "NotReady"
        return super().state.value


@dataclass
class StreamsGroupDescription(ConsumerGroupDescription):
    topology: dict | None = None


class StreamsGroups(ConsumerGroups):
    KIND = "streams"
    RECORD = "StreamsGroup"
    CONFIG = "streams"
    REVOKE_FIRST = True
    GROUP_RECORDS = ("TargetAssignmentMetadata", "Topology", "Metadata")

    def __init__(self, scheduler: Any, config: Callable[[str], Any], topics: Callable[[], Mapping[str, Any]],
                 write: Callable[[str, list[Entry]], None], group_config: Callable[[str, str], Any] = lambda g, k: None,
                 create_topic: Callable[[st.InternalTopic], None] | None = None):
        super().__init__(scheduler, config, topics, write, group_config)
        self.create_topic = create_topic

    def num_standby(self, group_id: str) -> int:
        v = self.group_config(group_id, "streams.num.standby.replicas")
        return int(v) if v is not None else self.cfg("group.streams.num.standby.replicas")

    def initial_delay_ms(self, group_id: str) -> int:
        v = self.group_config(group_id, "streams.initial.rebalance.delay.ms")
        return int(v) if v is not None else self.cfg("group.streams.initial.rebalance.delay.ms")

    def assignment_interval_ms(self, group_id: str) -> int:
        v = self.group_config(group_id, "streams.assignment.interval.ms")
        return int(v) if v is not None else self.cfg("group.streams.assignment.interval.ms")

    def assignors(self) -> list[str]:
        return ["sticky"]

    # ---------------------------------------------------------------- heartbeat

    def streams_heartbeat(self, req: StreamsHeartbeat) -> tuple[StreamsHeartbeatResult, list[Entry]]:
        """The answer and the records to write before giving it."""
        try:
            self._validate_streams(req)
            if req.member_epoch in (LEAVE_EPOCH, LEAVE_STATIC_EPOCH):
                return self._leave_streams(req)
            return self._join_or_update_streams(req)
        except _Refused as r:
            return StreamsHeartbeatResult(r.error.code, r.error.message), []

    def _validate_streams(self, req: StreamsHeartbeat) -> None:
        """Kafka 4.4's checks, in its order and words."""
        if not req.group_id:
            raise _refuse(errors.InvalidRequestError, "GroupId can't be empty.")
        if req.instance_id == "":
            raise _refuse(errors.InvalidRequestError, "InstanceId can't be empty.")
        if req.rack_id == "":
            raise _refuse(errors.InvalidRequestError, "RackId can't be empty.")
        if req.member_epoch == JOIN_EPOCH:
            if not req.member_id:
                raise _refuse(errors.InvalidRequestError, "MemberId can't be empty.")
            if req.rebalance_timeout_ms == -1:
                raise _refuse(errors.InvalidRequestError, "RebalanceTimeoutMs must be provided in first request.")
            if req.topology is None:
                raise _refuse(errors.InvalidRequestError, "Topology must be non-null when (re-)joining.")
            for name, tasks in (("ActiveTasks", req.active_tasks), ("StandbyTasks", req.standby_tasks),
                                ("WarmupTasks", req.warmup_tasks)):
                if tasks is None or tasks:
                    raise _refuse(errors.InvalidRequestError, f"{name} must be empty when (re-)joining.")
        elif req.member_epoch < LEAVE_STATIC_EPOCH:
            raise _refuse(errors.InvalidRequestError,
                          f"MemberEpoch is {req.member_epoch}, but must be greater than or equal to -2.")
        else:
            if not req.member_id:
                raise _refuse(errors.InvalidRequestError, "MemberId can't be empty.")
            if req.member_epoch == LEAVE_STATIC_EPOCH and req.instance_id is None:
                raise _refuse(errors.InvalidRequestError, "InstanceId can't be null.")

    def _leave_streams(self, req: StreamsHeartbeat) -> tuple[StreamsHeartbeatResult, list[Entry]]:
        """A member leaves (-1), or a static member leaves for a while (-2: it keeps its place and
        tasks until its session expires or its instance id comes back): the consumer groups' rules."""
        r, entries = self._leave(ConsumerHeartbeat(req.group_id, req.member_id, req.member_epoch, req.instance_id))
        g = self.groups.get(req.group_id)
        if isinstance(g, StreamsGroup) and req.member_epoch == LEAVE_EPOCH:
            g.endpoint_epoch += 1
            if not g.members:
                g.shutdown = False
        return StreamsHeartbeatResult(r.error, r.message, req.member_id, r.member_epoch), entries

    def _join_or_update_streams(self, req: StreamsHeartbeat) -> tuple[StreamsHeartbeatResult, list[Entry]]:
        entries: list[Entry] = []
        g = self.groups.get(req.group_id)
        if g is None:
            if req.member_epoch != JOIN_EPOCH:
                raise _refuse(errors.GroupIdNotFoundError, f"Streams group {req.group_id} not found.")
            g = StreamsGroup(req.group_id)
        assert isinstance(g, StreamsGroup)
        member = g.members.get(req.member_id)
        bump = False
        joined = req.member_epoch == JOIN_EPOCH
        if (joined and g.topology is not None and req.topology != g.topology
                and (req.topology or {}).get("epoch", 0) >= g.topology.get("epoch", 0)
                and any(m.member_id != req.member_id for m in g.members.values())):
            raise _refuse(errors.InvalidRequestError, "Topology updates are not supported yet.")
        if joined and req.instance_id and (held_by := g.static_members.get(req.instance_id)) not in (None,
                                                                                               req.member_id):
            old = g.members[held_by]
            if old.member_epoch != LEAVE_STATIC_EPOCH:
                raise _refuse(errors.UnreleasedInstanceIdError,
                              f"Static member {req.member_id} with instance id {req.instance_id} cannot join the "
                              f"group because the instance id is owned by {held_by} member.")
            # The static member is back under a new member id: it takes its predecessor's place,
            # epoch and tasks, without a new assignment.
            assert isinstance(old, StreamsMember)
            target = g.target.get(held_by, old.assigned)
            g.remove(held_by)
            entries += self._member_tombstones(g.group_id, held_by)
            member = StreamsMember(req.member_id, req.instance_id, member_epoch=old.previous_member_epoch,
                                   previous_member_epoch=old.previous_member_epoch, assigned=old.assigned,
                                   pending_revocation=old.pending_revocation, state=old.state,
                                   rebalance_timeout_ms=old.rebalance_timeout_ms, process_id=old.process_id,
                                   user_endpoint=old.user_endpoint, client_tags=old.client_tags,
                                   topology_epoch=old.topology_epoch)
            g.target[req.member_id] = target
            g.add(member)
            entries.append(self._target_member_entry(g, req.member_id))
            entries.append(self._current_entry(g, member))
        if member is None:
            if not joined:
                raise _refuse(errors.UnknownMemberIdError,
                              f"Member {req.member_id} is not a member of group {req.group_id}.")
            if len(g.members) >= self.cfg("group.streams.max.size"):
                raise _refuse(errors.GroupMaxSizeReachedError,
                              f"The streams group has reached its maximum capacity of "
                              f"{self.cfg('group.streams.max.size')} members.")
            if not g.members and req.group_id not in self.groups:
                delay = self.initial_delay_ms(g.group_id)
                if delay > 0:
                    g.delayed = True
                    self.scheduler.call_later(delay / 1000, self._end_delay, g)
            member = StreamsMember(req.member_id, req.instance_id)
            g.add(member)
            self.groups[g.group_id] = g
            g.endpoint_epoch += 1
            bump = True
        elif not joined:
            self._check_streams_epoch(g, member, req)
        assert isinstance(member, StreamsMember)
        # The topology: the first member's is the group's; a member with another epoch is told it is stale.
        if joined:  # the group's topology is its members'; a member of an older one is told it is stale
            topology = req.topology or {}
            if g.topology != topology and (g.topology is None or len(g.members) == 1):
                g.topology = topology
                g.configured = None
                entries.append(self._topology_entry(g))
                bump = True
            member.topology_epoch = topology.get("epoch", 0)
        before = (member.instance_id, member.rack_id, member.client_id, member.client_host, member.rebalance_timeout_ms,
                  member.process_id, member.user_endpoint, member.client_tags, member.topology_epoch)
        if req.instance_id is not None:
            member.instance_id = req.instance_id
        if req.rack_id is not None:
            member.rack_id = req.rack_id
        member.client_id, member.client_host = req.client_id, req.client_host
        if req.rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = req.rebalance_timeout_ms
        if req.process_id is not None:
            member.process_id = req.process_id
        if req.user_endpoint is not None or joined:
            member.user_endpoint = req.user_endpoint
        if req.client_tags is not None:
            member.client_tags = dict(req.client_tags)
        if req.task_offsets is not None:
            member.task_offsets = list(req.task_offsets)
        if req.task_end_offsets is not None:
            member.task_end_offsets = list(req.task_end_offsets)
        after = (member.instance_id, member.rack_id, member.client_id, member.client_host, member.rebalance_timeout_ms,
                 member.process_id, member.user_endpoint, member.client_tags, member.topology_epoch)
        if after != before or bump:
            entries.append(self._member_entry(g, member))
            if (after[1], after[5], after[7]) != (before[1], before[5], before[7]):
                bump = True
        if req.shutdown_application:
            g.shutdown = True
        entries += self._refresh(g, bump)
        sent_before = (member.member_epoch, member.assigned)
        owned = {} if joined else tasks_from_wire(req.active_tasks, req.standby_tasks, req.warmup_tasks)
        if reconcile(g, member, owned, revoke_first=True, exclusive=lambda key: key[0] == ACTIVE) or bump:
            entries.append(self._current_entry(g, member))
        self._arm_timers(g, member)
        changed = (member.member_epoch, member.assigned) != sent_before
        if member.assigned != sent_before[1]:
            g.endpoint_epoch += 1
        endpoints = None
        if member.user_endpoint is not None and (joined or req.endpoint_information_epoch != g.endpoint_epoch):
            endpoints = self._endpoints(g)
        return StreamsHeartbeatResult(
            0, None, member.member_id, member.member_epoch, self.heartbeat_interval_ms(g.group_id),
            self._status(g, member), member.assigned if (joined or changed) else None, g.endpoint_epoch,
            endpoints), entries

    def _check_streams_epoch(self, g: ModernGroup, member: ModernMember, req: StreamsHeartbeat) -> None:
        if req.member_epoch > member.member_epoch:
            raise _refuse(errors.FencedMemberEpochError,
                          f"The streams group member has a greater member epoch ({req.member_epoch}) than the one "
                          f"known by the group coordinator ({member.member_epoch}). The member must abandon all its "
                          f"partitions and rejoin.")
        if req.member_epoch < member.member_epoch and not (
                req.member_epoch == member.previous_member_epoch and req.active_tasks is not None):
            raise _refuse(errors.FencedMemberEpochError,
                          f"The streams group member has a smaller member epoch ({req.member_epoch}) than the one "
                          f"known by the group coordinator ({member.member_epoch}). The member must abandon all its "
                          f"partitions and rejoin.")

    def _status(self, g: StreamsGroup, member: StreamsMember) -> list[tuple[int, str]]:
        out = []
        if g.topology is not None and member.topology_epoch < g.topology.get("epoch", 0):
            out.append((st.STALE_TOPOLOGY, f"The member's topology epoch {member.topology_epoch} is behind the "
                                           f"group's topology epoch {g.topology.get('epoch', 0)}."))
        if g.delayed:
            out.append((st.ASSIGNMENT_DELAYED, "Assignment delayed due to the configured initial rebalance delay."))
        c = g.configured
        if c is not None and c.error is not None:
            out.append(c.error)
        elif c is not None and c.to_create:
            detail = f"Internal topics are missing: {', '.join(t.name for t in c.to_create)}"
            failed = [f"{n} ({why})" for n, why in sorted(g.creation_failures.items())]
            if failed:
                detail += f"; Creation failed: {', '.join(failed)}."
            out.append((st.MISSING_INTERNAL_TOPICS, detail))
        if g.shutdown:
            out.append((st.SHUTDOWN_APPLICATION, "A KafkaStreams instance encountered a fatal error and requested "
                                                 "a shutdown for the entire application."))
        return out

    def _endpoints(self, g: StreamsGroup) -> list[dict]:
        out = []
        counts = {n: len(t.partitions) for n, t in self.topics().items()}
        for m in g.members.values():
            assert isinstance(m, StreamsMember)
            if m.user_endpoint is None:
                continue
            active: dict[str, set[int]] = {}
            standby: dict[str, set[int]] = {}
            for (kind, sub), ps in m.assigned.items():
                into = active if kind == ACTIVE else standby
                for topic in st.task_partitions(g.topology or {}, sub, counts):
                    into.setdefault(topic, set()).update(ps)
            out.append({"user_endpoint": {"host": m.user_endpoint[0], "port": m.user_endpoint[1]},
                        "active_partitions": [{"topic": t, "partitions": sorted(ps)} for t, ps in active.items()],
                        "standby_partitions": [{"topic": t, "partitions": sorted(ps)} for t, ps in standby.items()]})
        return out

    def _end_delay(self, g: StreamsGroup) -> None:
        if self.groups.get(g.group_id) is not g or not g.delayed:
            return
        g.delayed = False
        self.write(g.group_id, self._refresh(g, g.assignment_epoch == g.group_epoch))

    # ---------------------------------------------------------------- epochs, topology and target assignment

    def _refresh(self, g: ModernGroup, bump: bool) -> list[Entry]:
        assert isinstance(g, StreamsGroup)
        entries: list[Entry] = []
        if g.topology is not None:
            by_name = self.topics()
            g.configured = st.configure(g.topology, {n: len(t.partitions) for n, t in by_name.items()})
            if g.configured.to_create and self.create_topic is not None and g.members:
                for t in g.configured.to_create:
                    try:
                        self.create_topic(t)
                        g.creation_failures.pop(t.name, None)
                    except errors.KafkaError as e:
                        g.creation_failures[t.name] = e.message or e.error_name
                        log.warning("streams group %s: could not create %s: %s", g.group_id, t.name, e)
                by_name = self.topics()
                g.configured = st.configure(g.topology, {n: len(t.partitions) for n, t in by_name.items()})
            counts = {n: len(t.partitions) for n, t in by_name.items()}
            names = st.topic_names(g.topology, counts)
            topics = {by_name[n].topic_id: (n, len(by_name[n].partitions)) for n in names if n in by_name}
            if topics != g.topics:
                g.topics = topics
                bump = True
        if bump:
            g.group_epoch += 1
            entries.append(self._epoch_entry(g))
        if g.assignment_epoch < g.group_epoch and (not g.delayed or g.assignment_epoch == 0):
            # A new target at most every streams.assignment.interval.ms: changes in between wait for it.
            wait = 0.0 if g.assigned_at is None else (
                g.assigned_at + self.assignment_interval_ms(g.group_id) / 1000 - self.scheduler.time())
            if wait <= 0:
                entries += self._assign(g)
            elif not g.assign_pending:
                g.assign_pending = True
                self.scheduler.call_later(wait, self._assign_later, g)
        return entries

    def _assign_later(self, g: StreamsGroup) -> None:
        g.assign_pending = False
        if self.groups.get(g.group_id) is g:
            self.write(g.group_id, self._refresh(g, False))

    def _assign(self, g: ModernGroup) -> list[Entry]:
        assert isinstance(g, StreamsGroup)
        tasks = g.configured.tasks if g.configured is not None and g.configured.ready and not g.delayed else {}
        specs = {}
        for m in g.members.values():
            assert isinstance(m, StreamsMember)
            target = g.target.get(m.member_id, {})
            specs[m.member_id] = StreamsMemberSpec(
                m.process_id or m.member_id,
                frozenset((sub, p) for (k, sub), ps in target.items() if k == ACTIVE for p in ps),
                frozenset((sub, p) for (k, sub), ps in target.items() if k == STANDBY for p in ps))
        stateful = frozenset(sub["subtopology_id"] for sub in (g.topology or {}).get("subtopologies", [])
                             if sub.get("state_changelog_topics"))
        result = sticky_tasks(specs, tasks, self.num_standby(g.group_id), stateful)
        g.assigned_at = self.scheduler.time()
        entries = []
        for member_id in g.members:
            active, standby = result.get(member_id, (frozenset(), frozenset()))
            new: Tasks = {}
            for kind, ts in ((ACTIVE, active), (STANDBY, standby)):
                for sub, p in ts:
                    new[(kind, sub)] = new.get((kind, sub), frozenset()) | {p}
            if new != g.target.get(member_id) or member_id not in g.target:
                g.target[member_id] = new
                entries.append(self._target_member_entry(g, member_id))
        g.assignment_epoch = g.group_epoch
        entries.append(self._record(g.group_id, None, "TargetAssignmentMetadata",
                                    {"assignment_epoch": g.assignment_epoch, "assignment_timestamp": 0}))
        self.rebalances += 1
        return entries

    # ---------------------------------------------------------------- records

    def _epoch_entry(self, g: ModernGroup) -> Entry:
        assert isinstance(g, StreamsGroup)
        return self._record(g.group_id, None, "Metadata", {
            "epoch": g.group_epoch, "metadata_hash": _hash(g),
            "validated_topology_epoch": g.topology.get("epoch", 0) if g.topology is not None else -1})

    def _topology_entry(self, g: StreamsGroup) -> Entry:
        t = g.topology or {}
        return self._record(g.group_id, None, "Topology", {"epoch": t.get("epoch", 0), "subtopologies": [
            {"subtopology_id": s["subtopology_id"], "source_topics": list(s.get("source_topics") or []),
             "source_topic_regex": list(s.get("source_topic_regex") or []),
             "repartition_sink_topics": list(s.get("repartition_sink_topics") or []),
             "state_changelog_topics": [_topic_info(i) for i in s.get("state_changelog_topics") or []],
             "repartition_source_topics": [_topic_info(i) for i in s.get("repartition_source_topics") or []],
             "copartition_groups": list(s.get("copartition_groups") or [])}
            for s in t.get("subtopologies", [])]})

    def _member_entry(self, g: ModernGroup, m: ModernMember) -> Entry:
        assert isinstance(m, StreamsMember)
        return self._record(g.group_id, m.member_id, "MemberMetadata", {
            "instance_id": m.instance_id, "rack_id": m.rack_id, "client_id": m.client_id,
            "client_host": m.client_host, "rebalance_timeout_ms": m.rebalance_timeout_ms,
            "topology_epoch": m.topology_epoch, "process_id": m.process_id,
            "user_endpoint": None if m.user_endpoint is None else {"host": m.user_endpoint[0],
                                                                   "port": m.user_endpoint[1]},
            "client_tags": [{"key": k, "value": v} for k, v in sorted(m.client_tags.items())]})

    def _target_member_entry(self, g: ModernGroup, member_id: str) -> Entry:
        t = g.target.get(member_id, {})
        return self._record(g.group_id, member_id, "TargetAssignmentMember",
                            {f"{kind}_tasks": tasks_wire(t, kind) for kind in KINDS})

    def _current_entry(self, g: ModernGroup, m: ModernMember) -> Entry:
        value = {"member_epoch": m.member_epoch, "previous_member_epoch": m.previous_member_epoch,
                 "state": int(m.state)}
        for kind in KINDS:
            value[f"{kind}_tasks"] = tasks_wire(m.assigned, kind)
            value[f"{kind}_tasks_pending_revocation"] = tasks_wire(m.pending_revocation, kind)
        return self._record(g.group_id, m.member_id, "CurrentMemberAssignment", value)

    def _partition_metadata_entries(self, g: ModernGroup) -> list[Entry]:
        return []  # the topics' hash is in StreamsGroupMetadata

    # ---------------------------------------------------------------- replay

    def load(self, records: Mapping[tuple[str, str, str | None], dict]) -> None:
        built: dict[str, StreamsGroup] = {}

        def group(group_id: str) -> StreamsGroup:
            return built.setdefault(group_id, StreamsGroup(group_id))

        def member(g: StreamsGroup, member_id: str) -> StreamsMember:
            if member_id not in g.members:
                g.members[member_id] = StreamsMember(member_id)
            m = g.members[member_id]
            assert isinstance(m, StreamsMember)
            return m

        for (kind, group_id, member_id), v in records.items():
            if not kind.startswith(self.RECORD):
                continue
            kind = kind[len(self.RECORD):]
            g = group(group_id)
            if kind == "Metadata":
                g.group_epoch = v["epoch"]
            elif kind == "TargetAssignmentMetadata":
                g.assignment_epoch = v["assignment_epoch"]
            elif kind == "Topology":
                g.topology = v
            elif kind == "TargetAssignmentMember" and member_id is not None:
                g.target[member_id] = _tasks_from_record(v, "")
            elif kind == "MemberMetadata" and member_id is not None:
                m = member(g, member_id)
                m.instance_id, m.rack_id = v.get("instance_id"), v.get("rack_id")
                m.client_id, m.client_host = v["client_id"], v["client_host"]
                m.rebalance_timeout_ms, m.topology_epoch = v["rebalance_timeout_ms"], v["topology_epoch"]
                m.process_id = v["process_id"]
                e = v.get("user_endpoint")
                m.user_endpoint = None if e is None else (e["host"], e["port"])
                m.client_tags = {kv["key"]: kv["value"] for kv in v.get("client_tags") or []}
            elif kind == "CurrentMemberAssignment" and member_id is not None:
                m = member(g, member_id)
                m.member_epoch, m.previous_member_epoch = v["member_epoch"], v["previous_member_epoch"]
                m.state = MemberState(v["state"]) if v["state"] in MemberState._value2member_map_ else MemberState.UNKNOWN
                m.assigned = _tasks_from_record(v, "")
                m.pending_revocation = _tasks_from_record(v, "_pending_revocation")
        for g in built.values():
            self.forget(g.group_id)
            for m in list(g.members.values()):
                g.add(m)
                self._arm_timers(g, m)
            g.target = {k: v for k, v in g.target.items() if k in g.members}
            self.groups[g.group_id] = g
            if g.topology is not None:
                by_name = self.topics()
                g.configured = st.configure(g.topology, {n: len(t.partitions) for n, t in by_name.items()})
                counts = {n: len(t.partitions) for n, t in by_name.items()}
                g.topics = {by_name[n].topic_id: (n, len(by_name[n].partitions))
                            for n in st.topic_names(g.topology, counts) if n in by_name}

    # ---------------------------------------------------------------- admin

    def subscribed_topic_names(self, group_id: str) -> set[str]:
        """The topics the group's tasks read while it has members (its offsets there stay)."""
        g = self.groups.get(group_id)
        if g is None or not g.members or not isinstance(g, StreamsGroup) or g.topology is None:
            return set()
        counts = {n: len(t.partitions) for n, t in self.topics().items()}
        return {t for sub in g.topology.get("subtopologies", [])
                for t in st.task_partitions(g.topology, sub["subtopology_id"], counts)}

    def describe(self, group_id: str) -> StreamsGroupDescription:
        g = self.groups.get(group_id)
        if g is None:
            return StreamsGroupDescription(group_id, errors.E_GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
        assert isinstance(g, StreamsGroup)
        return StreamsGroupDescription(
            group_id, 0, None, g.state, g.group_epoch, g.assignment_epoch, "sticky",
            [(m, g.target.get(m.member_id, {})) for m in g.members.values()], {},
            None if g.topology is None else st.described(g.topology, g.configured))


def _topic_info(t: dict) -> dict:
    return {"name": t["name"], "partitions": t.get("partitions", 0), "replication_factor": t.get("replication_factor", 0),
            "topic_configs": [{"key": kv["key"], "value": kv["value"]} for kv in t.get("topic_configs") or []]}


def _tasks_from_record(v: dict, suffix: str) -> Tasks:
    out: Tasks = {}
    for kind in KINDS:
        for t in v.get(f"{kind}_tasks{suffix}") or []:
            if t["partitions"]:
                out[(kind, t["subtopology_id"])] = frozenset(t["partitions"])
    return out


def _hash(g: ModernGroup) -> int:
    """A 64-bit digest of the topology's topics (names, partition counts): it changes when they do.
    Kafka's value is computed otherwise; only the coordinator that wrote it reads it."""
    h = hashlib.sha256()
    for _, (name, n) in sorted(g.topics.items()):
        h.update(name.encode() + struct.pack(">i", n))
    return struct.unpack(">q", h.digest()[:8])[0]
