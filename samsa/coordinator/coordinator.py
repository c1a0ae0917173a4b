"""The group coordinator: classic-protocol rebalances and committed offsets.

A group belongs to the partition ``partition_for(group_id)`` of ``__consumer_offsets``; the
broker leading that partition coordinates it. Every committed offset and every completed
rebalance is written to that partition before it is acknowledged, and read back when the
broker starts, so offsets and group generations survive restarts.

All methods run on the broker's event loop. JoinGroup and SyncGroup answers that must wait
for other members are futures that the rebalance resolves.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import TYPE_CHECKING

from samsa.coordinator.group import (COMPLETING_REBALANCE, DEAD, EMPTY, PREPARING_REBALANCE, STABLE, Group,
                                     Member)
from samsa.protocol import batch, codec, errors, records
from samsa.protocol import group_records as ot

if TYPE_CHECKING:
    from samsa.server.broker import Broker

log = logging.getLogger(__name__)


def java_string_hash(s: str) -> int:
    """Java's String.hashCode over UTF-16 code units, as a signed 32-bit int."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(group_id: str, partitions: int) -> int:
    """Kafka's Utils.abs(groupId.hashCode) % partitions."""
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


def now_ms() -> int:
    return int(time.time() * 1000)


class GroupCoordinator:
    def __init__(self, broker: "Broker"):
        self.broker = broker
        self.groups: dict[str, Group] = {}
        self.offsets: dict[str, dict[tuple[str, int], ot.OffsetAndMetadata]] = {}
        self._expiry_task: asyncio.Task | None = None

    # ---------------------------------------------------------------- config

    @property
    def num_partitions(self) -> int:
        topic = self.broker.topics.get(ot.OFFSETS_TOPIC)
        return len(topic.partitions) if topic else self.broker.config["offsets.topic.num.partitions"]

    def cfg(self, key: str):
        return self.broker.config[key]

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> None:
        interval = self.cfg("offsets.retention.check.interval.ms") / 1000
        self._expiry_task = asyncio.ensure_future(self._expire_offsets_forever(interval))

    def stop(self) -> None:
        if self._expiry_task:
            self._expiry_task.cancel()
        for group in self.groups.values():
            self._cancel_timers(group)

    @staticmethod
    def _cancel_timers(group: Group) -> None:
        for m in group.members.values():
            if m.expiry:
                m.expiry.cancel()
        if group.rebalance_timer:
            group.rebalance_timer.cancel()

    def on_leader(self, topic: str, index: int) -> None:
        """This broker now leads an offsets partition: load its groups and offsets."""
        if topic != ot.OFFSETS_TOPIC:
            return
        self.on_follower(topic, index)
        plog = self.broker.partitions[(topic, index)].log
        count = 0
        offset = plog.log_start_offset
        while offset < plog.log_end_offset:
            data = plog.read(offset, 1 << 20)
            if not data:
                break
            for record in records.iter_records(data, skip_control=True):
                if record.offset >= offset:
                    self._replay(record.key, record.value)
                    count += 1
                    offset = record.offset + 1
            last = [h for _, h in batch.iter_headers(data)]
            if last:
                offset = max(offset, last[-1].next_offset)
        log.info("loaded %d records of %s-%d", count, ot.OFFSETS_TOPIC, index)

    def on_follower(self, topic: str, index: int) -> None:
        """This broker no longer leads an offsets partition: forget the groups it holds."""
        if topic != ot.OFFSETS_TOPIC:
            return
        n = self.num_partitions
        for group_id in [g for g in set(self.groups) | set(self.offsets) if partition_for(g, n) == index]:
            group = self.groups.pop(group_id, None)
            if group is not None:
                self._cancel_timers(group)
            self.offsets.pop(group_id, None)

    def _replay(self, key: bytes | None, value: bytes | None) -> None:
        if key is None:
            return
        try:
            kind, group_id, topic, partition = ot.parse_key(key)
        except (ValueError, UnicodeDecodeError):
            return
        if kind == "offset":
            offsets = self.offsets.setdefault(group_id, {})
            if value is None:
                offsets.pop((topic, partition), None)
            else:
                offsets[(topic, partition)] = ot.parse_offset_value(value)
            self.groups.setdefault(group_id, Group(group_id))
            return
        if value is None:
            self.groups.pop(group_id, None)
            return
        rec = ot.parse_group_value(value)
        group = Group(group_id, generation=rec.generation, protocol_type=rec.protocol_type or None,
                      protocol=rec.protocol, leader=None, state_timestamp=rec.state_timestamp)
        for m in rec.members:
            member = Member(m["member_id"], m["group_instance_id"], m["client_id"], m["client_host"],
                            m["session_timeout"], m["rebalance_timeout"], rec.protocol_type,
                            [(rec.protocol or "", m["subscription"])], assignment=m["assignment"])
            group.add(member)
            self._schedule_expiry(group, member)
        group.leader = rec.leader if rec.leader in group.members else next(iter(group.members), None)
        group.state = STABLE if group.members else EMPTY
        self.groups[group_id] = group

    # ---------------------------------------------------------------- routing

    def ensure_offsets_topic(self) -> None:
        if ot.OFFSETS_TOPIC in self.broker.topics:
            return
        rf = self.cfg("offsets.topic.replication.factor")
        alive = len(self.broker.alive_brokers())
        if rf > alive:
            raise errors.CoordinatorNotAvailableError(
                f"offsets.topic.replication.factor is {rf} but only {alive} broker(s) are alive")
        self.broker.create_topic(ot.OFFSETS_TOPIC, self.cfg("offsets.topic.num.partitions"), rf, configs={
            "cleanup.policy": "compact",
            "segment.bytes": str(self.cfg("offsets.topic.segment.bytes")),
            "compression.type": "producer",
        })

    def coordinator_for(self, group_id: str):
        """The broker leading the group's offsets partition (BrokerInfo)."""
        self.ensure_offsets_topic()
        topic = self.broker.topics[ot.OFFSETS_TOPIC]
        state = topic.partitions[partition_for(group_id, len(topic.partitions))]
        for b in self.broker.alive_brokers():
            if b.id == state.leader:
                return b
        raise errors.CoordinatorNotAvailableError(f"no leader for the offsets partition of group {group_id}")

    def _check_coordinator(self, group_id: str | None) -> None:
        if not group_id:
            raise errors.InvalidGroupIdError("group id must not be empty")
        if ot.OFFSETS_TOPIC not in self.broker.topics:
            raise errors.CoordinatorNotAvailableError("the offsets topic does not exist yet")
        p = self.broker.partitions.get((ot.OFFSETS_TOPIC, partition_for(group_id, self.num_partitions)))
        if p is None or not p.is_leader:
            raise errors.NotCoordinatorError(f"broker {self.broker.broker_id} is not the coordinator of {group_id}")

    # ---------------------------------------------------------------- persistence

    async def _write(self, group_id: str, entries: list[tuple[bytes, bytes | None]]) -> None:
        """Append records to the group's partition; return once they are committed."""
        partition = self.broker.partition(ot.OFFSETS_TOPIC, partition_for(group_id, self.num_partitions))
        ts = now_ms()
        data = bytearray(records.build_batch([(k, v, ts, []) for k, v in entries]))
        info = partition.append(data, batch.validate(data), ts)
        await self.broker.wait_for_high_watermark(partition, info.last_offset + 1,
                                                  self.cfg("offsets.commit.timeout.ms"))

    def _group_record(self, group: Group) -> tuple[bytes, bytes]:
        members = [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                    "client_id": m.client_id, "client_host": m.client_host,
                    "rebalance_timeout": m.rebalance_timeout_ms, "session_timeout": m.session_timeout_ms,
                    "subscription": m.metadata(group.protocol or ""), "assignment": m.assignment}
                   for m in group.members.values()]
        rec = ot.GroupRecord(group.protocol_type or "", group.generation, group.protocol, group.leader,
                             group.state_timestamp, members)
        return ot.group_key(group.group_id), ot.group_value(rec)

    def _persist_group(self, group: Group) -> None:
        task = asyncio.ensure_future(self._write(group.group_id, [self._group_record(group)]))
        task.add_done_callback(lambda t: t.cancelled() or t.exception() and log.warning(
            "could not store group %s: %s", group.group_id, t.exception()))

    # ---------------------------------------------------------------- JoinGroup

    def join(self, req: dict, version: int, client_id: str, client_host: str):
        """Returns a JoinGroup response dict, or an awaitable of one."""
        group_id = req["group_id"]
        try:
            self._check_coordinator(group_id)
            timeout = req["session_timeout_ms"]
            if not self.cfg("group.min.session.timeout.ms") <= timeout <= self.cfg("group.max.session.timeout.ms"):
                raise errors.InvalidSessionTimeoutError(
                    f"session.timeout.ms {timeout} is outside [group.min.session.timeout.ms, group.max.session.timeout.ms]")
            protocols = [(p["name"], p["metadata"]) for p in req["protocols"]]
            group = self.groups.setdefault(group_id, Group(group_id))
            if group.state == DEAD:
                raise errors.CoordinatorNotAvailableError(f"group {group_id} is being deleted")
            if not group.supports(req["protocol_type"], protocols):
                raise errors.InconsistentGroupProtocolError(
                    f"the member's protocols do not match group {group_id}'s")
        except errors.KafkaError as e:
            return self._join_error(e.code, req["member_id"])
        member_id = req["member_id"]
        instance_id = req.get("group_instance_id")
        rebalance_timeout = req["rebalance_timeout_ms"] if version >= 1 else timeout
        if member_id == "":
            return self._join_new(group, req, version, protocols, instance_id, client_id, client_host,
                                  rebalance_timeout)
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            member = Member(member_id, instance_id, client_id, client_host, req["session_timeout_ms"],
                            rebalance_timeout, req["protocol_type"], protocols)
            group.add(member)
            return self._park_join(group, member)
        return self._join_known(group, member_id, instance_id, protocols)

    def _join_error(self, code: int, member_id: str = "") -> dict:
        return {"error_code": code, "generation_id": -1, "protocol_name": None, "leader": "",
                "member_id": member_id, "members": []}

    def _join_new(self, group: Group, req: dict, version: int, protocols, instance_id, client_id, client_host,
                  rebalance_timeout):
        max_size = self.cfg("group.max.size")
        if instance_id and instance_id in group.static_members:
            return self._rejoin_static(group, group.static_members[instance_id], protocols, req, version)
        if len(group.members) + len(group.pending_members) >= max_size:
            return self._join_error(errors.E_GROUP_MAX_SIZE_REACHED)
        member_id = f"{client_id}-{uuid.uuid4()}"
        if instance_id:
            member_id = f"{instance_id}-{uuid.uuid4()}"
        elif version >= 4:
            # KIP-394: hand out the id first; the member joins again with it.
            group.pending_members.add(member_id)
            self._schedule_pending_expiry(group, member_id, req["session_timeout_ms"])
            return self._join_error(errors.E_MEMBER_ID_REQUIRED, member_id)
        member = Member(member_id, instance_id, client_id, client_host, req["session_timeout_ms"],
                        rebalance_timeout, req["protocol_type"], protocols)
        group.add(member)
        return self._park_join(group, member)

    def _rejoin_static(self, group: Group, old_id: str, protocols, req: dict, version: int):
        """A static member restarting: it takes over its old identity and assignment, and the
        group does not rebalance as long as the selected protocol stays the same."""
        old = group.members[old_id]
        new_id = f"{req.get('group_instance_id')}-{uuid.uuid4()}"
        was_leader = group.leader == old_id
        self._fence(old)
        group.remove(old_id)
        member = Member(new_id, old.group_instance_id, old.client_id, old.client_host, req["session_timeout_ms"],
                        req.get("rebalance_timeout_ms", old.rebalance_timeout_ms), req["protocol_type"], protocols,
                        assignment=old.assignment)
        group.add(member)
        if was_leader:
            group.leader = new_id
        if group.state != STABLE or group.protocol not in group.candidate_protocols() \
                or group.select_protocol() != group.protocol:
            return self._park_join(group, member)
        self._schedule_expiry(group, member)
        self._persist_group(group)
        response = {"error_code": 0, "generation_id": group.generation, "protocol_type": group.protocol_type,
                    "protocol_name": group.protocol, "member_id": new_id, "leader": group.leader,
                    "skip_assignment": False, "members": []}
        if was_leader and version >= 9:
            # KIP-814: the leader learns it leads, with the members, but must not reassign.
            response.update(skip_assignment=True, members=self._join_response(group, member)["members"])
        elif was_leader:
            # Older clients would reassign if told they lead: name the old id, as Kafka does.
            response["leader"] = old_id
        return response

    def _fenced(self, group: Group | None, member_id: str, instance_id: str | None) -> int:
        """FENCED_INSTANCE_ID for a replaced static member, UNKNOWN_MEMBER_ID for a stranger, else 0."""
        if group is not None and instance_id and instance_id in group.static_members \
                and group.static_members[instance_id] != member_id:
            return errors.E_FENCED_INSTANCE_ID
        if group is None or member_id not in group.members:
            return errors.E_UNKNOWN_MEMBER_ID
        return 0

    def _join_known(self, group: Group, member_id: str, instance_id, protocols):
        code = self._fenced(group, member_id, instance_id)
        if code:
            return self._join_error(code, member_id)
        member = group.members[member_id]
        if group.state == STABLE and not group.is_leader(member_id) and member.same_protocols(protocols):
            return self._join_response(group, member)
        if group.state == COMPLETING_REBALANCE and member.same_protocols(protocols):
            return self._join_response(group, member)
        member.protocols = protocols
        return self._park_join(group, member)

    def _park_join(self, group: Group, member: Member) -> asyncio.Future:
        loop = asyncio.get_running_loop()
        if member.join_future is not None and not member.join_future.done():
            member.join_future.set_result(self._join_error(errors.E_REBALANCE_IN_PROGRESS, member.member_id))
        fut = member.join_future = loop.create_future()
        self._schedule_expiry(group, member)
        if group.state != PREPARING_REBALANCE:
            self._prepare_rebalance(group, f"member {member.member_id} joined")
        else:
            self._maybe_complete_join(group)
        return fut

    def _prepare_rebalance(self, group: Group, reason: str) -> None:
        loop = asyncio.get_running_loop()
        if group.state == COMPLETING_REBALANCE:
            for m in group.members.values():
                if m.sync_future and not m.sync_future.done():
                    m.sync_future.set_result(self._sync_error(errors.E_REBALANCE_IN_PROGRESS))
                m.sync_future = None
        initial = group.state == EMPTY
        group.transition(PREPARING_REBALANCE, now_ms())
        log.info("preparing to rebalance group %s in state PreparingRebalance with old generation %d (reason: %s)",
                 group.group_id, group.generation, reason)
        if group.rebalance_timer:
            group.rebalance_timer.cancel()
        rebalance_s = group.max_rebalance_timeout_ms() / 1000
        group.rebalance_deadline = loop.time() + rebalance_s
        delay = self.cfg("group.initial.rebalance.delay.ms") / 1000
        if initial and delay > 0:
            # group.initial.rebalance.delay.ms: let the first members of a new group arrive together.
            group.initial_delay = True
            group.members_at_delay = len(group.members)
            group.rebalance_timer = loop.call_later(min(delay, rebalance_s), self._initial_delay_expired, group)
        else:
            group.rebalance_timer = loop.call_later(rebalance_s, self._complete_join, group)
            self._maybe_complete_join(group)

    def _initial_delay_expired(self, group: Group) -> None:
        loop = asyncio.get_running_loop()
        group.rebalance_timer = None
        if group.state != PREPARING_REBALANCE:
            return
        remaining = group.rebalance_deadline - loop.time()
        if len(group.members) > group.members_at_delay and remaining > 0:
            group.members_at_delay = len(group.members)
            delay = self.cfg("group.initial.rebalance.delay.ms") / 1000
            group.rebalance_timer = loop.call_later(min(delay, remaining), self._initial_delay_expired, group)
            return
        group.initial_delay = False
        self._complete_join(group)

    def _maybe_complete_join(self, group: Group) -> None:
        if group.state == PREPARING_REBALANCE and not group.initial_delay and group.all_joined():
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        if group.state != PREPARING_REBALANCE:
            return
        if group.rebalance_timer:
            group.rebalance_timer.cancel()
            group.rebalance_timer = None
        group.initial_delay = False
        for m in [m for m in group.members.values() if m.join_future is None]:
            log.info("member %s of group %s did not rejoin in time; removing it", m.member_id, group.group_id)
            group.remove(m.member_id)
        group.pending_members.clear()
        group.generation += 1
        if not group.members:
            group.protocol = None
            group.transition(EMPTY, now_ms())
            self._persist_group(group)
            log.info("group %s with generation %d is now empty", group.group_id, group.generation)
            return
        group.protocol = group.select_protocol()
        if group.leader not in group.members:
            group.leader = next(iter(group.members))
        group.transition(COMPLETING_REBALANCE, now_ms())
        log.info("stabilized group %s generation %d with %d members, protocol %s", group.group_id,
                 group.generation, len(group.members), group.protocol)
        for m in group.members.values():
            fut, m.join_future = m.join_future, None
            if fut is not None and not fut.done():
                fut.set_result(self._join_response(group, m))
            self._schedule_expiry(group, m)

    def _join_response(self, group: Group, member: Member) -> dict:
        leader = group.is_leader(member.member_id)
        return {
            "error_code": 0, "generation_id": group.generation, "protocol_type": group.protocol_type,
            "protocol_name": group.protocol, "leader": group.leader or "", "skip_assignment": False,
            "member_id": member.member_id,
            "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                         "metadata": m.metadata(group.protocol or "")} for m in group.members.values()]
            if leader else [],
        }

    # ---------------------------------------------------------------- SyncGroup

    def _sync_error(self, code: int) -> dict:
        return {"error_code": code, "assignment": b"", "protocol_type": None, "protocol_name": None}

    def sync(self, req: dict):
        group_id = req["group_id"]
        try:
            self._check_coordinator(group_id)
        except errors.KafkaError as e:
            return self._sync_error(e.code)
        group = self.groups.get(group_id)
        code = self._fenced(group, req["member_id"], req.get("group_instance_id"))
        if code:
            return self._sync_error(code)
        member = group.members[req["member_id"]]
        if req["generation_id"] != group.generation:
            return self._sync_error(errors.E_ILLEGAL_GENERATION)
        if (req.get("protocol_type") and req["protocol_type"] != group.protocol_type) or (
                req.get("protocol_name") and req["protocol_name"] != group.protocol):
            return self._sync_error(errors.E_INCONSISTENT_GROUP_PROTOCOL)
        if group.state == PREPARING_REBALANCE:
            return self._sync_error(errors.E_REBALANCE_IN_PROGRESS)
        self._schedule_expiry(group, member)
        if group.state == STABLE:
            return self._sync_response(group, member)
        # CompletingRebalance: the leader's assignment completes everyone's SyncGroup.
        if group.is_leader(member.member_id):
            assignments = {a["member_id"]: a["assignment"] for a in req["assignments"]}
            for m in group.members.values():
                m.assignment = assignments.get(m.member_id, b"")
            group.transition(STABLE, now_ms())
            self._persist_group(group)
            for m in group.members.values():
                if m.sync_future and not m.sync_future.done():
                    m.sync_future.set_result(self._sync_response(group, m))
                m.sync_future = None
            return self._sync_response(group, member)
        member.sync_future = asyncio.get_running_loop().create_future()
        return member.sync_future

    def _sync_response(self, group: Group, member: Member) -> dict:
        return {"error_code": 0, "protocol_type": group.protocol_type, "protocol_name": group.protocol,
                "assignment": member.assignment}

    # ---------------------------------------------------------------- Heartbeat / LeaveGroup

    def heartbeat(self, req: dict) -> int:
        group_id = req["group_id"]
        try:
            self._check_coordinator(group_id)
        except errors.KafkaError as e:
            return e.code
        group = self.groups.get(group_id)
        code = self._fenced(group, req["member_id"], req.get("group_instance_id"))
        if code:
            return code
        member = group.members[req["member_id"]]
        if req["generation_id"] != group.generation:
            return errors.E_ILLEGAL_GENERATION
        self._schedule_expiry(group, member)
        if group.state == PREPARING_REBALANCE:
            return errors.E_REBALANCE_IN_PROGRESS
        return 0

    def leave(self, group_id: str, leaving: list[tuple[str, str | None]]) -> tuple[int, list[int]]:
        """(top-level error, per-member errors) for members given as (member_id, instance_id)."""
        try:
            self._check_coordinator(group_id)
        except errors.KafkaError as e:
            return e.code, [e.code] * len(leaving)
        group = self.groups.get(group_id)
        if group is None:
            return 0, [errors.E_UNKNOWN_MEMBER_ID] * len(leaving)
        codes = []
        for member_id, instance_id in leaving:
            if instance_id:
                known = group.static_members.get(instance_id)
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
        return 0, codes

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

    def _fence(self, member: Member) -> None:
        if member.join_future and not member.join_future.done():
            member.join_future.set_result(self._join_error(errors.E_UNKNOWN_MEMBER_ID, member.member_id))
        if member.sync_future and not member.sync_future.done():
            member.sync_future.set_result(self._sync_error(errors.E_UNKNOWN_MEMBER_ID))
        if member.expiry:
            member.expiry.cancel()

    def _schedule_expiry(self, group: Group, member: Member) -> None:
        if member.expiry:
            member.expiry.cancel()
        member.expiry = asyncio.get_running_loop().call_later(
            member.session_timeout_ms / 1000, self._expire, group, member.member_id)

    def _expire(self, group: Group, member_id: str) -> None:
        member = group.members.get(member_id)
        if member is None:
            return
        waiting = (member.join_future is not None and not member.join_future.done()) or (
            member.sync_future is not None and not member.sync_future.done())
        if waiting:
            # A member waiting for its join or sync answer is alive; the rebalance bounds the wait.
            self._schedule_expiry(group, member)
            return
        self._remove_member(group, member_id, f"session timeout of {member.session_timeout_ms} ms expired")

    def _schedule_pending_expiry(self, group: Group, member_id: str, timeout_ms: int) -> None:
        def expire() -> None:
            if member_id in group.pending_members:
                group.pending_members.discard(member_id)
                self._maybe_complete_join(group)
        asyncio.get_running_loop().call_later(timeout_ms / 1000, expire)

    # ---------------------------------------------------------------- offsets

    async def commit(self, req: dict, version: int) -> dict:
        group_id = req["group_id"]
        generation = req.get("generation_id_or_member_epoch", -1)
        member_id = req.get("member_id", "")
        error = 0
        try:
            self._check_coordinator(group_id)
            group = self.groups.get(group_id)
            if group is not None and group.state == DEAD:
                raise errors.CoordinatorNotAvailableError()
            if generation < 0 and (group is None or group.state == EMPTY):
                pass  # a consumer storing offsets without group management
            elif code := self._fenced(group, member_id, req.get("group_instance_id")):
                raise errors.error_for(code)
            elif group.state == COMPLETING_REBALANCE:
                raise errors.RebalanceInProgressError()
            elif generation != group.generation:
                raise errors.IllegalGenerationError()
        except errors.KafkaError as e:
            error = e.code
        ts = now_ms()
        max_meta = self.cfg("offset.metadata.max.bytes")
        results, writes, updates = [], [], []
        for t in req["topics"]:
            parts = []
            for p in t["partitions"]:
                code = error
                meta = p.get("committed_metadata") or ""
                topic = self.broker.topics.get(t["name"])
                if not code and (topic is None or p["partition_index"] not in topic.partitions):
                    code = errors.E_UNKNOWN_TOPIC_OR_PARTITION
                elif not code and len(meta.encode()) > max_meta:
                    code = errors.E_OFFSET_METADATA_TOO_LARGE
                if not code:
                    o = ot.OffsetAndMetadata(p["committed_offset"], p.get("committed_leader_epoch", -1), meta, ts)
                    writes.append((ot.offset_key(group_id, t["name"], p["partition_index"]), ot.offset_value(o)))
                    updates.append(((t["name"], p["partition_index"]), o))
                parts.append({"partition_index": p["partition_index"], "error_code": code})
            results.append({"name": t["name"], "partitions": parts})
        if writes:
            try:
                await self._write(group_id, writes)
            except errors.KafkaError as e:
                for t in results:
                    for p in t["partitions"]:
                        if p["error_code"] == 0:
                            p["error_code"] = e.code
                updates = []
            offsets = self.offsets.setdefault(group_id, {})
            for tp, o in updates:
                offsets[tp] = o
            self.groups.setdefault(group_id, Group(group_id, state_timestamp=ts))
        return {"throttle_time_ms": 0, "topics": results}

    def fetch_offsets(self, group_id: str, topics: list[dict] | None) -> tuple[int, list[dict]]:
        """(group error, topics) with committed offsets; -1 where none is committed."""
        try:
            self._check_coordinator(group_id)
        except errors.KafkaError as e:
            return e.code, []
        committed = self.offsets.get(group_id, {})
        if topics is None:
            wanted: dict[str, list[int]] = {}
            for (topic, partition) in sorted(committed):
                wanted.setdefault(topic, []).append(partition)
        else:
            wanted = {t["name"]: t["partition_indexes"] for t in topics}
        out = []
        for topic, partitions in wanted.items():
            parts = []
            for p in partitions:
                o = committed.get((topic, p))
                parts.append({"partition_index": p, "committed_offset": o.offset if o else -1,
                              "committed_leader_epoch": o.leader_epoch if o else -1,
                              "metadata": o.metadata if o else "", "error_code": 0})
            out.append({"name": topic, "partitions": parts})
        return 0, out

    # ---------------------------------------------------------------- admin

    def list_groups(self, states: list[str] | None) -> list[dict]:
        wanted = {s.lower() for s in states or []}
        out = []
        for g in sorted(self.groups.values(), key=lambda g: g.group_id):
            if g.state == DEAD or (wanted and g.state.lower() not in wanted):
                continue
            out.append({"group_id": g.group_id, "protocol_type": g.protocol_type or "", "group_state": g.state,
                        "group_type": "classic"})
        return out

    def describe(self, group_id: str) -> dict:
        try:
            self._check_coordinator(group_id)
        except errors.KafkaError as e:
            return {"error_code": e.code, "group_id": group_id, "group_state": "", "protocol_type": "",
                    "protocol_data": "", "members": []}
        g = self.groups.get(group_id)
        if g is None:
            return {"error_code": 0, "group_id": group_id, "group_state": DEAD, "protocol_type": "",
                    "protocol_data": "", "members": [], "authorized_operations": -2147483648}
        stable = g.state == STABLE
        return {
            "error_code": 0, "group_id": group_id, "group_state": g.state, "protocol_type": g.protocol_type or "",
            "protocol_data": (g.protocol or "") if stable else "",
            "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                         "client_id": m.client_id, "client_host": m.client_host,
                         "member_metadata": m.metadata(g.protocol or "") if stable else b"",
                         "member_assignment": m.assignment if stable else b""} for m in g.members.values()],
            "authorized_operations": -2147483648,
        }

    async def delete_groups(self, group_ids: list[str]) -> list[dict]:
        out = []
        for group_id in group_ids:
            try:
                self._check_coordinator(group_id)
                g = self.groups.get(group_id)
                if g is None:
                    raise errors.GroupIdNotFoundError(f"group {group_id} does not exist")
                if g.state not in (EMPTY, DEAD):
                    raise errors.NonEmptyGroupError(f"group {group_id} has members")
                g.transition(DEAD, now_ms())
                tombstones = [(ot.offset_key(group_id, t, p), None) for (t, p) in self.offsets.get(group_id, {})]
                tombstones.append((ot.group_key(group_id), None))
                await self._write(group_id, tombstones)
                self.offsets.pop(group_id, None)
                self.groups.pop(group_id, None)
                out.append({"group_id": group_id, "error_code": 0})
            except errors.KafkaError as e:
                out.append({"group_id": group_id, "error_code": e.code})
        return out

    async def delete_offsets(self, group_id: str, topics: list[dict]) -> tuple[int, list[dict]]:
        try:
            self._check_coordinator(group_id)
        except errors.KafkaError as e:
            return e.code, []
        g = self.groups.get(group_id)
        if g is None:
            return errors.E_GROUP_ID_NOT_FOUND, []
        if g.state != EMPTY and g.protocol_type != "consumer":
            return errors.E_NON_EMPTY_GROUP, []  # only a consumer group's subscriptions are known
        subscribed = self.subscribed_topics(g) if g.state != EMPTY else set()
        committed = self.offsets.get(group_id, {})
        results, tombstones = [], []
        for t in topics:
            parts = []
            for p in t["partitions"]:
                code = errors.E_GROUP_SUBSCRIBED_TO_TOPIC if t["name"] in subscribed else 0
                if code == 0 and (t["name"], p["partition_index"]) in committed:
                    tombstones.append((t["name"], p["partition_index"]))
                parts.append({"partition_index": p["partition_index"], "error_code": code})
            results.append({"name": t["name"], "partitions": parts})
        if tombstones:
            await self._write(group_id, [(ot.offset_key(group_id, t, p), None) for t, p in tombstones])
            for tp in tombstones:
                committed.pop(tp, None)
        return 0, results

    @staticmethod
    def subscribed_topics(group: Group) -> set[str]:
        topics: set[str] = set()
        if group.protocol_type != "consumer":
            return topics
        for m in group.members.values():
            meta = m.metadata(group.protocol or "")
            if len(meta) < 2:
                continue
            version = min(int.from_bytes(meta[:2], "big", signed=True), 3)
            try:
                sub, _ = codec.decode("ConsumerProtocolSubscription", max(version, 0), memoryview(meta), 2)
                topics.update(sub["topics"])
            except errors.KafkaError:
                pass
        return topics

    # ---------------------------------------------------------------- offset expiry

    async def _expire_offsets_forever(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.expire_offsets(now_ms())
            except Exception:
                log.exception("offset expiry failed")

    async def expire_offsets(self, now: int) -> None:
        """offsets.retention.minutes: drop the offsets of groups that stayed empty that long."""
        retention = self.cfg("offsets.retention.minutes") * 60_000
        for group_id, committed in list(self.offsets.items()):
            g = self.groups.get(group_id)
            if g is not None and g.state != EMPTY:
                continue
            if g is not None and g.protocol_type and g.state_timestamp >= 0:
                expired = list(committed) if now - g.state_timestamp >= retention else []
            else:
                expired = [tp for tp, o in committed.items() if now - o.commit_timestamp >= retention]
            if not expired:
                continue
            try:
                self._check_coordinator(group_id)
            except errors.KafkaError:
                continue
            await self._write(group_id, [(ot.offset_key(group_id, t, p), None) for t, p in expired])
            for tp in expired:
                committed.pop(tp, None)
            log.info("expired %d offsets of group %s", len(expired), group_id)
            if not committed and (g is None or not g.members):
                self.offsets.pop(group_id, None)
                if g is not None and not g.protocol_type:
                    self.groups.pop(group_id, None)
