"""The group coordinator: the service the group request handlers call.

It checks that this broker coordinates the group (leads its ``__consumer_offsets``
partition), turns wire dicts into the typed requests of :mod:`.rebalance` and typed results
back into wire dicts, stores commits and completed rebalances through :mod:`.persistence`
before acknowledging them, loads a partition's groups when this broker becomes its leader,
and expires old offsets.

All methods run on the broker's event loop. JoinGroup and SyncGroup answers that must wait
for other members are awaitables that the rebalance completes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from samsa.cluster.metadata import BrokerInfo
from samsa.coordinator.groups import persistence
from samsa.coordinator.groups.offsets import OffsetStore
from samsa.coordinator.groups.persistence import GroupLoaded, OffsetLoaded, OffsetsTopicWriter, partition_for
from samsa.coordinator.groups.rebalance import (HeartbeatRequest, JoinRequest, JoinResult, LeavingMember, Rebalancer,
                                                SyncRequest, SyncResult)
from samsa.coordinator.groups.state import DEAD, EMPTY, STABLE, Group, Timer
from samsa.coordinator.host import CoordinatorHost, now_ms
from samsa.protocol import errors
from samsa.protocol.group_records import OFFSETS_TOPIC, OffsetAndMetadata

log = logging.getLogger(__name__)

AUTHORIZED_OPERATIONS_OMITTED = -2147483648


class _RunningLoop:
    """The rebalance Scheduler: the event loop running at the time of each call."""

    def time(self) -> float:
        return asyncio.get_running_loop().time()

    def call_later(self, delay: float, callback: Callable[..., object], *args: Any) -> Timer:
        return asyncio.get_running_loop().call_later(delay, callback, *args)

    def create_future(self) -> asyncio.Future:
        return asyncio.get_running_loop().create_future()


class GroupCoordinator:
    def __init__(self, host: CoordinatorHost):
        self.host = host
        self.rebalancer = Rebalancer(_RunningLoop(), self.cfg, now_ms, self._persist_group)
        self.offsets = OffsetStore()
        self.offsets_topic = OffsetsTopicWriter(host, lambda: self.num_partitions)
        self._expiry_task: asyncio.Task | None = None

    @property
    def groups(self) -> dict[str, Group]:
        return self.rebalancer.groups

    # ---------------------------------------------------------------- config

    @property
    def num_partitions(self) -> int:
        topic = self.host.topics.get(OFFSETS_TOPIC)
        return len(topic.partitions) if topic else self.cfg("offsets.topic.num.partitions")

    def cfg(self, key: str) -> Any:
        return self.host.config[key]

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> None:
        interval = self.cfg("offsets.retention.check.interval.ms") / 1000
        self._expiry_task = asyncio.ensure_future(self._expire_offsets_forever(interval))

    def stop(self) -> None:
        if self._expiry_task:
            self._expiry_task.cancel()
        self.rebalancer.stop()

    def on_leader(self, topic: str, index: int) -> None:
        """This broker now leads an offsets partition: load its groups and offsets."""
        if topic != OFFSETS_TOPIC:
            return
        self.on_follower(topic, index)
        count = 0
        for loaded in persistence.read_partition(self.host.partition(topic, index)):
            self._replay(loaded)
            count += 1
        log.info("loaded %d records of %s-%d", count, OFFSETS_TOPIC, index)

    def on_follower(self, topic: str, index: int) -> None:
        """This broker no longer leads an offsets partition: forget the groups it holds."""
        if topic != OFFSETS_TOPIC:
            return
        n = self.num_partitions
        for group_id in [g for g in set(self.groups) | set(self.offsets.group_ids()) if partition_for(g, n) == index]:
            self.rebalancer.forget(group_id)
            self.offsets.drop_group(group_id)

    def _replay(self, loaded: OffsetLoaded | GroupLoaded) -> None:
        group_id = loaded.group_id
        if isinstance(loaded, OffsetLoaded):
            tp = (loaded.topic, loaded.partition)
            if loaded.offset is None:
                self.offsets.commit(group_id, [])
                self.offsets.delete(group_id, [tp])
            else:
                self.offsets.commit(group_id, [(tp, loaded.offset)])
            self.groups.setdefault(group_id, Group(group_id))
            return
        self.rebalancer.forget(group_id)
        if loaded.record is not None:
            self.rebalancer.restore(persistence.group_from_record(group_id, loaded.record))

    # ---------------------------------------------------------------- routing

    def ensure_offsets_topic(self) -> None:
        if OFFSETS_TOPIC in self.host.topics:
            return
        rf = self.cfg("offsets.topic.replication.factor")
        alive = len(self.host.alive_brokers())
        if rf > alive:
            raise errors.CoordinatorNotAvailableError(
                f"offsets.topic.replication.factor is {rf} but only {alive} broker(s) are alive")
        self.host.create_topic(OFFSETS_TOPIC, self.cfg("offsets.topic.num.partitions"), rf, configs={
            "cleanup.policy": "compact",
            "segment.bytes": str(self.cfg("offsets.topic.segment.bytes")),
            "compression.type": "producer",
        })

    def coordinator_for(self, group_id: str) -> BrokerInfo:
        """The broker leading the group's offsets partition."""
        self.ensure_offsets_topic()
        topic = self.host.topics[OFFSETS_TOPIC]
        state = topic.partitions[partition_for(group_id, len(topic.partitions))]
        for b in self.host.alive_brokers():
            if b.id == state.leader:
                return b
        raise errors.CoordinatorNotAvailableError(f"no leader for the offsets partition of group {group_id}")

    def _check_coordinator(self, group_id: str | None) -> None:
        if not group_id:
            raise errors.InvalidGroupIdError("group id must not be empty")
        if OFFSETS_TOPIC not in self.host.topics:
            raise errors.CoordinatorNotAvailableError("the offsets topic does not exist yet")
        try:
            self.host.partition(OFFSETS_TOPIC, partition_for(group_id, self.num_partitions))
        except errors.KafkaError:
            raise errors.NotCoordinatorError(
                f"broker {self.host.broker_id} is not the coordinator of {group_id}") from None

    def _coordinator_error(self, group_id: str | None) -> int:
        """0 if this broker coordinates the group, else the error code to answer with."""
        try:
            self._check_coordinator(group_id)
        except errors.KafkaError as e:
            return e.code
        return 0

    # ---------------------------------------------------------------- persistence

    def _persist_group(self, group: Group) -> None:
        task = asyncio.ensure_future(self.offsets_topic.write(group.group_id, [persistence.group_entry(group)]))
        task.add_done_callback(lambda t: t.cancelled() or t.exception() and log.warning(
            "could not store group %s: %s", group.group_id, t.exception()))

    # ---------------------------------------------------------------- JoinGroup / SyncGroup

    def join(self, req: dict, version: int, client_id: str, client_host: str) -> dict | Awaitable[dict]:
        """A JoinGroup response dict, or an awaitable of one."""
        if code := self._coordinator_error(req["group_id"]):
            return _join_wire(JoinResult(code, req["member_id"]))
        result = self.rebalancer.join(JoinRequest(
            group_id=req["group_id"], member_id=req["member_id"], group_instance_id=req.get("group_instance_id"),
            protocol_type=req["protocol_type"], protocols=[(p["name"], p["metadata"]) for p in req["protocols"]],
            session_timeout_ms=req["session_timeout_ms"],
            rebalance_timeout_ms=req["rebalance_timeout_ms"] if version >= 1 else req["session_timeout_ms"],
            client_id=client_id, client_host=client_host,
            member_id_required=version >= 4, leader_skips_assignment=version >= 9))
        return _join_wire(result) if isinstance(result, JoinResult) else _later(result, _join_wire)

    def sync(self, req: dict) -> dict | Awaitable[dict]:
        """A SyncGroup response dict, or an awaitable of one."""
        if code := self._coordinator_error(req["group_id"]):
            return _sync_wire(SyncResult(code))
        result = self.rebalancer.sync(SyncRequest(
            group_id=req["group_id"], member_id=req["member_id"], generation_id=req["generation_id"],
            group_instance_id=req.get("group_instance_id"), protocol_type=req.get("protocol_type"),
            protocol_name=req.get("protocol_name"),
            assignments={a["member_id"]: a["assignment"] for a in req["assignments"]}))
        return _sync_wire(result) if isinstance(result, SyncResult) else _later(result, _sync_wire)

    # ---------------------------------------------------------------- Heartbeat / LeaveGroup

    def heartbeat(self, req: dict) -> int:
        if code := self._coordinator_error(req["group_id"]):
            return code
        return self.rebalancer.heartbeat(HeartbeatRequest(req["group_id"], req["member_id"], req["generation_id"],
                                                          req.get("group_instance_id")))

    def leave(self, group_id: str, leaving: list[tuple[str, str | None]]) -> tuple[int, list[int]]:
        """(top-level error, per-member errors) for members given as (member_id, instance_id)."""
        if code := self._coordinator_error(group_id):
            return code, [code] * len(leaving)
        return 0, self.rebalancer.leave(group_id, [LeavingMember(m, i) for m, i in leaving])

    # ---------------------------------------------------------------- offsets

    async def commit(self, req: dict, version: int) -> dict:
        """An OffsetCommit response dict, once the offsets are stored."""
        group_id = req["group_id"]
        error = self._coordinator_error(group_id) or self.rebalancer.check_commit(
            group_id, req.get("generation_id_or_member_epoch", -1), req.get("member_id", ""),
            req.get("group_instance_id"))
        ts = now_ms()
        max_meta = self.cfg("offset.metadata.max.bytes")
        results, writes, updates = [], [], []
        for t in req["topics"]:
            parts = []
            for p in t["partitions"]:
                code = error
                meta = p.get("committed_metadata") or ""
                topic = self.host.topics.get(t["name"])
                if not code and (topic is None or p["partition_index"] not in topic.partitions):
                    code = errors.E_UNKNOWN_TOPIC_OR_PARTITION
                elif not code and len(meta.encode()) > max_meta:
                    code = errors.E_OFFSET_METADATA_TOO_LARGE
                if not code:
                    o = OffsetAndMetadata(p["committed_offset"], p.get("committed_leader_epoch", -1), meta, ts)
                    writes.append(persistence.offset_entry(group_id, t["name"], p["partition_index"], o))
                    updates.append(((t["name"], p["partition_index"]), o))
                parts.append({"partition_index": p["partition_index"], "error_code": code})
            results.append({"name": t["name"], "partitions": parts})
        if writes:
            try:
                await self.offsets_topic.write(group_id, writes)
            except errors.KafkaError as e:
                for t in results:
                    for p in t["partitions"]:
                        if p["error_code"] == 0:
                            p["error_code"] = e.code
                updates = []
            self.offsets.commit(group_id, updates)
            self.groups.setdefault(group_id, Group(group_id, state_timestamp=ts))
        return {"throttle_time_ms": 0, "topics": results}

    def fetch_offsets(self, group_id: str, topics: list[dict] | None) -> tuple[int, list[dict]]:
        """(group error, topics) with committed offsets; -1 where none is committed."""
        if code := self._coordinator_error(group_id):
            return code, []
        wanted = None if topics is None else {t["name"]: t["partition_indexes"] for t in topics}
        return 0, [{"name": topic, "partitions": [
                        {"partition_index": p, "committed_offset": o.offset if o else -1,
                         "committed_leader_epoch": o.leader_epoch if o else -1,
                         "metadata": o.metadata if o else "", "error_code": 0} for p, o in partitions]}
                   for topic, partitions in self.offsets.fetch(group_id, wanted)]

    # ---------------------------------------------------------------- admin

    def list_groups(self, states: list[str] | None) -> list[dict]:
        wanted = {s.lower() for s in states or []}
        out = []
        for g in sorted(self.groups.values(), key=lambda g: g.group_id):
            if g.state == DEAD or (wanted and g.state.value.lower() not in wanted):
                continue
            out.append({"group_id": g.group_id, "protocol_type": g.protocol_type or "",
                        "group_state": g.state.value, "group_type": "classic"})
        return out

    def describe(self, group_id: str) -> dict:
        if code := self._coordinator_error(group_id):
            return {"error_code": code, "group_id": group_id, "group_state": "", "protocol_type": "",
                    "protocol_data": "", "members": []}
        g = self.groups.get(group_id)
        if g is None:
            return {"error_code": 0, "group_id": group_id, "group_state": DEAD.value, "protocol_type": "",
                    "protocol_data": "", "members": [], "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED}
        stable = g.state == STABLE
        return {
            "error_code": 0, "group_id": group_id, "group_state": g.state.value,
            "protocol_type": g.protocol_type or "", "protocol_data": (g.protocol or "") if stable else "",
            "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                         "client_id": m.client_id, "client_host": m.client_host,
                         "member_metadata": m.metadata(g.protocol or "") if stable else b"",
                         "member_assignment": m.assignment if stable else b""} for m in g.members.values()],
            "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
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
                g.transition_to(DEAD, now_ms())
                tombstones = [persistence.offset_entry(group_id, t, p, None) for t, p in self.offsets.committed(group_id)]
                tombstones.append(persistence.group_tombstone(group_id))
                await self.offsets_topic.write(group_id, tombstones)
                self.offsets.drop_group(group_id)
                self.groups.pop(group_id, None)
                out.append({"group_id": group_id, "error_code": 0})
            except errors.KafkaError as e:
                out.append({"group_id": group_id, "error_code": e.code})
        return out

    async def delete_offsets(self, group_id: str, topics: list[dict]) -> tuple[int, list[dict]]:
        if code := self._coordinator_error(group_id):
            return code, []
        g = self.groups.get(group_id)
        if g is None:
            return errors.E_GROUP_ID_NOT_FOUND, []
        if g.state != EMPTY and g.protocol_type != "consumer":
            return errors.E_NON_EMPTY_GROUP, []  # only a consumer group's subscriptions are known
        subscribed = g.subscribed_topics() if g.state != EMPTY else set()
        committed = self.offsets.committed(group_id)
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
            await self.offsets_topic.write(group_id, [persistence.offset_entry(group_id, t, p, None) for t, p in tombstones])
            self.offsets.delete(group_id, tombstones)
        return 0, results

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
        for group_id in self.offsets.group_ids():
            g = self.groups.get(group_id)
            expired = self.offsets.expired(group_id, g, now, retention)
            if not expired or self._coordinator_error(group_id):
                continue
            await self.offsets_topic.write(group_id, [persistence.offset_entry(group_id, t, p, None) for t, p in expired])
            self.offsets.delete(group_id, expired)
            log.info("expired %d offsets of group %s", len(expired), group_id)
            if not self.offsets.committed(group_id) and (g is None or not g.members):
                self.offsets.drop_group(group_id)
                if g is not None and not g.protocol_type:
                    self.groups.pop(group_id, None)


# ---------------------------------------------------------------- typed results -> wire dicts

async def _later(reply: Awaitable[Any], to_wire: Callable[[Any], dict]) -> dict:
    return to_wire(await reply)


def _join_wire(r: JoinResult) -> dict:
    if r.error:
        return {"error_code": r.error, "generation_id": -1, "protocol_name": None, "leader": "",
                "member_id": r.member_id, "members": []}
    return {"error_code": 0, "generation_id": r.generation_id, "protocol_type": r.protocol_type,
            "protocol_name": r.protocol_name, "leader": r.leader, "skip_assignment": r.skip_assignment,
            "member_id": r.member_id,
            "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id, "metadata": m.metadata}
                        for m in r.members]}


def _sync_wire(r: SyncResult) -> dict:
    return {"error_code": r.error, "assignment": r.assignment, "protocol_type": r.protocol_type,
            "protocol_name": r.protocol_name}
