"""The group coordinator: the service the group request handlers call.

It checks that this broker coordinates a group (leads its ``__consumer_offsets``
partition), runs the rebalance protocol of :mod:`.rebalance`, stores commits and completed
rebalances through :mod:`.persistence` before acknowledging them, loads a partition's groups
when this broker becomes its leader, and expires old offsets. It takes and gives typed
values; the handlers in ``samsa.server.handlers.groups`` translate the wire format.

All methods run on the broker's event loop. JoinGroup and SyncGroup answers that must wait
for other members are parked replies (futures) that the rebalance sets.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from samsa.broker_config import segment_bytes_config
from samsa.cluster.metadata import BrokerInfo
from samsa.coordinator.groups import group_configs, persistence
from samsa.coordinator.groups.offsets import OffsetStore, TopicPartition
from samsa.coordinator.groups.consumer_groups import CONFIG_KEYS as CONSUMER_CONFIG_KEYS
from samsa.coordinator.groups.consumer_groups import (ConsumerGroupDescription, ConsumerGroups,
                                                      ConsumerHeartbeat, ConsumerHeartbeatResult)
from samsa.coordinator.groups.persistence import (ConsumerGroupLoaded, GroupLoaded, MarkerLoaded, OffsetLoaded,
                                                  OffsetsTopicWriter, partition_for)
from samsa.coordinator.groups.share_groups import CONFIG_KEYS as SHARE_CONFIG_KEYS
from samsa.coordinator.groups.share_groups import ShareGroups, ShareHeartbeat
from samsa.coordinator.groups.streams_groups import (StreamsGroupDescription, StreamsGroups, StreamsHeartbeat,
                                                     StreamsHeartbeatResult)
from samsa.coordinator.groups.streams_topology import InternalTopic
from samsa.coordinator.groups.rebalance import CONFIG_KEYS as REBALANCE_CONFIG_KEYS
from samsa.coordinator.groups.rebalance import (HeartbeatRequest, JoinRequest, JoinResult, LeavingMember, Rebalancer,
                                                SyncRequest, SyncResult)
from samsa.coordinator.groups.state import DEAD, EMPTY, STABLE, Group, GroupState, Reply, Timer
from samsa.clock import now_ms
from samsa.coordinator.host import CoordinatorHost, ensure_internal_topic
from samsa.coordinator.share.state import PersisterError, ShareKey, SharePersister
from samsa.protocol import errors
from samsa.protocol.group_records import OFFSETS_TOPIC, OffsetAndMetadata

log = logging.getLogger(__name__)

GROUP_CONFIG_TTL = 5.0  # s: another broker's change of a group config is seen this late at most

#: Every broker config the group coordinator reads, through ``host.config[key]``.
CONFIG_KEYS = (*REBALANCE_CONFIG_KEYS, *CONSUMER_CONFIG_KEYS, *SHARE_CONFIG_KEYS, "offsets.topic.num.partitions", "offsets.topic.replication.factor",
               "offsets.topic.segment.bytes", "offsets.commit.timeout.ms", "offset.metadata.max.bytes",
               "offsets.retention.minutes", "offsets.retention.check.interval.ms")


# ---------------------------------------------------------------- typed requests and results
# (JoinGroup, SyncGroup, Heartbeat and LeaveGroup's are in .rebalance)

@dataclass(frozen=True)
class OffsetCommitEntry:
    topic: str
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str = ""


@dataclass(frozen=True)
class OffsetCommitRequest:
    group_id: str
    offsets: list[OffsetCommitEntry]
    generation_id: int = -1                       # -1: a consumer committing without group management
    member_id: str = ""
    group_instance_id: str | None = None
    api_version: int | None = None                # OffsetCommit's version (consumer group members need v9+)


@dataclass(frozen=True)
class TxnOffsetCommitRequest:
    """Offsets committed inside a producer's transaction: they take effect with its commit marker."""
    group_id: str
    producer_id: int
    producer_epoch: int
    offsets: list[OffsetCommitEntry]
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


@dataclass(frozen=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: GroupState | str
    group_type: str = "classic"                   # "classic", "consumer" (KIP-848) or "share" (KIP-932)


@dataclass(frozen=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes                               # empty unless the group is Stable
    assignment: bytes                             # empty unless the group is Stable


@dataclass
class GroupDescription:
    group_id: str
    error: int = 0
    state: str = ""                               # Kafka's state name; "Dead" for an unknown group
    protocol_type: str = ""
    protocol: str = ""                            # the selected protocol, once Stable
    members: list[MemberDescription] = field(default_factory=list)
    message: str | None = None


class _RunningLoop:
    """The rebalance Scheduler: the event loop running at the time of each call."""

    def time(self) -> float:
        return asyncio.get_running_loop().time()

    def call_later(self, delay: float, callback: Callable[..., object], *args: Any) -> Timer:
        return asyncio.get_running_loop().call_later(delay, callback, *args)

    def create_future(self) -> asyncio.Future:
        return asyncio.get_running_loop().create_future()


class GroupCoordinatorHost(CoordinatorHost, Protocol):
    """What the group coordinator asks of the broker beyond any coordinator's needs."""

    def group_configs(self, group_id: str) -> dict[str, str]:
        """A group's configs (IncrementalAlterConfigs on a GROUP resource), from the metadata store."""
        ...

    async def latest_offset(self, topic: str, partition: int) -> int:
        """A partition's high watermark, asked of its leader (a share group's lag)."""
        ...


class GroupCoordinator:
    def __init__(self, host: GroupCoordinatorHost):
        self.host = host
        self.rebalancer = Rebalancer(_RunningLoop(), self.cfg, now_ms, self._persist_group)
        self.offsets = OffsetStore()
        self.offsets_topic = OffsetsTopicWriter(host, lambda: self.num_partitions)
        # Group configs (consumer.session.timeout.ms, ...), read from the metadata store at most
        # every GROUP_CONFIG_TTL seconds: group id -> (read at, key -> value).
        self._group_configs: dict[str, tuple[float, dict[str, str]]] = {}
        self.consumer = ConsumerGroups(_RunningLoop(), self.cfg, lambda: self.host.topics, self._write_later,
                                       lambda group_id, key: self.group_configs(group_id).get(key))
        self.share = ShareGroups(_RunningLoop(), self.cfg, lambda: self.host.topics, self._write_later,
                                 lambda group_id, key: self.group_configs(group_id).get(key))
        self.streams = StreamsGroups(_RunningLoop(), self.cfg, lambda: self.host.topics, self._write_later,
                                     lambda group_id, key: self.group_configs(group_id).get(key),
                                     self._create_internal_topic)
        self._expiry_task: asyncio.Task | None = None
        # The share coordinator's state of share partitions (KIP-932), set by the broker: share
        # groups' offsets, and their state deleted with them.
        self.share_state: SharePersister | None = None
        self._loaded: list[int] | None = None  # [partitions, records] taken over since the last report
        # Transactional commits awaiting their marker: producer id -> group -> partition -> offset.
        self.pending_txn: dict[int, dict[str, dict[TopicPartition, OffsetAndMetadata]]] = {}

    @property
    def groups(self) -> dict[str, Group]:
        return self.rebalancer.groups

    def metrics(self) -> GroupMetrics:
        """A snapshot of the groups and committed offsets for the broker's metrics."""
        offsets = self.offsets
        return GroupMetrics([g.state.value for g in list(self.groups.values()) if not self._modern(g.group_id)],
                            {gid: {tp: o.offset for tp, o in offsets.committed(gid).items()}
                             for gid in offsets.group_ids()},
                            self.rebalancer.completed_rebalances,
                            [g.state.value for g in list(self.consumer.groups.values())], self.consumer.rebalances,
                            [g.state.value for g in list(self.share.groups.values())], self.share.rebalances,
                            [g.state for g in list(self.streams.groups.values())], self.streams.rebalances)

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
        self.consumer.stop()
        self.share.stop()
        self.streams.stop()

    def on_leader(self, topic: str, index: int) -> None:
        """This broker now leads an offsets partition: load its groups and offsets."""
        if topic != OFFSETS_TOPIC:
            return
        self.on_follower(topic, index)
        count = 0
        latest: dict[str, GroupLoaded] = {}  # a group's last record is the one that counts
        offsets_after: set[str] = set()  # groups with offset records after their last group record
        consumer: dict[tuple[str, str, str | None], dict] = {}  # consumer group records, latest per key
        for loaded in persistence.read_partition(self.host.partition(topic, index)):
            if isinstance(loaded, ConsumerGroupLoaded):
                key = (loaded.kind, loaded.group_id, loaded.member_id)
                if loaded.value is None:
                    consumer.pop(key, None)
                else:
                    consumer[key] = loaded.value
            elif isinstance(loaded, GroupLoaded):
                latest[loaded.group_id] = loaded
                offsets_after.discard(loaded.group_id)
            else:
                offsets_after.update(self._replay_offsets(loaded, index))
            count += 1
        for loaded in latest.values():
            # Restored once, after the whole partition is read: members' sessions (timers)
            # start for the group as it is now, not for every older record of it.
            self.rebalancer.forget(loaded.group_id)
            if loaded.record is not None:
                self.rebalancer.restore(persistence.group_from_record(loaded.group_id, loaded.record))
            elif loaded.group_id in offsets_after:  # deleted, then offsets committed without a group
                self.groups.setdefault(loaded.group_id, Group(loaded.group_id))
        self.consumer.load(consumer)
        self.share.load(consumer)
        self.streams.load(consumer)
        for group_id in [*self.consumer.groups, *self.streams.groups]:  # it replaced an empty classic one
            if (classic := self.groups.get(group_id)) is not None and not classic.members:
                self.rebalancer.forget(group_id)
        log.debug("loaded %d records of %s-%d", count, OFFSETS_TOPIC, index)
        self._report_loaded(count)

    def _report_loaded(self, records: int) -> None:
        """One log line for the offsets partitions taken over together (50 at a start), not one each."""
        if self._loaded is None:
            self._loaded = [0, 0]
            try:
                asyncio.get_running_loop().call_soon(self._log_loaded)
            except RuntimeError:  # no event loop (a unit test): report at once
                self._loaded[0], self._loaded[1] = 1, records
                self._log_loaded()
                return
        self._loaded[0] += 1
        self._loaded[1] += records

    def _log_loaded(self) -> None:
        partitions, records = self._loaded or (0, 0)
        self._loaded = None
        log.info("loaded %d records of %d %s partitions now led here", records, partitions, OFFSETS_TOPIC)

    def on_follower(self, topic: str, index: int) -> None:
        """This broker no longer leads an offsets partition: forget the groups it holds."""
        if topic != OFFSETS_TOPIC:
            return
        n = self.num_partitions
        for group_id in [g for g in set(self.groups) | set(self.offsets.group_ids()) | set(self.consumer.groups)
                         | set(self.share.groups) | set(self.streams.groups) if partition_for(g, n) == index]:
            self.rebalancer.forget(group_id)
            self.consumer.forget(group_id)
            self.share.forget(group_id)
            self.streams.forget(group_id)
            self.offsets.drop_group(group_id)
        for pid, by_group in list(self.pending_txn.items()):
            for group_id in [g for g in by_group if partition_for(g, n) == index]:
                del by_group[group_id]
            if not by_group:
                del self.pending_txn[pid]

    def _replay_offsets(self, loaded: OffsetLoaded | MarkerLoaded, index: int) -> set[str]:
        """Replay an offset record or a transaction marker, in log order; the groups whose
        committed offsets it changed."""
        if isinstance(loaded, MarkerLoaded):
            groups = set(self.pending_txn.get(loaded.producer_id, {})) if loaded.commit else set()
            self.complete_txn(loaded.producer_id, loaded.commit, index)
            return groups
        group_id = loaded.group_id
        if loaded.producer_id >= 0:  # a transactional offset: it counts once the commit marker is read
            if loaded.offset is not None:
                self.pending_txn.setdefault(loaded.producer_id, {}).setdefault(group_id, {})[
                    (loaded.topic, loaded.partition)] = loaded.offset
            return set()
        self.offsets.load(group_id, (loaded.topic, loaded.partition), loaded.offset)
        if not self._modern(group_id):
            self.groups.setdefault(group_id, Group(group_id))
        return {group_id}

    # ---------------------------------------------------------------- routing

    def ensure_offsets_topic(self) -> None:
        ensure_internal_topic(self.host, OFFSETS_TOPIC, self.cfg("offsets.topic.num.partitions"),
                              "offsets.topic.replication.factor", {
                                  "cleanup.policy": "compact",
                                  **segment_bytes_config(self.cfg("offsets.topic.segment.bytes")),
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

    def _write_later(self, group_id: str, entries: list) -> None:
        """Store records of a change no request waits for (a member's session expired)."""
        if not entries:
            return
        task = asyncio.ensure_future(self.offsets_topic.write(group_id, entries))
        task.add_done_callback(lambda t: t.cancelled() or t.exception() and log.warning(
            "could not store consumer group %s: %s", group_id, t.exception()))

    def _persist_group(self, group: Group) -> None:
        task = asyncio.ensure_future(self.offsets_topic.write(group.group_id, [persistence.group_entry(group)]))
        task.add_done_callback(lambda t: t.cancelled() or t.exception() and log.warning(
            "could not store group %s: %s", group.group_id, t.exception()))

    # ---------------------------------------------------------------- membership

    def join(self, req: JoinRequest) -> JoinResult | Reply[JoinResult]:
        """The JoinGroup answer now, or a parked one the rebalance sets."""
        if code := self._coordinator_error(req.group_id):
            return JoinResult(code, req.member_id)
        if req.group_id in self.share.groups or req.group_id in self.streams.groups:
            return JoinResult(errors.E_INCONSISTENT_GROUP_PROTOCOL, req.member_id)
        modern = self.consumer.groups.get(req.group_id)
        if modern is not None:
            if modern.members or self.cfg("group.consumer.migration.policy") not in ("downgrade", "bidirectional"):
                # Kafka lets classic members into a live consumer group (KIP-848's online
                # migration); Samsa does not yet, and answers as Kafka does with the policy disabled.
                return JoinResult(errors.E_INCONSISTENT_GROUP_PROTOCOL, req.member_id)
            # An empty consumer group becomes a classic group (its offsets stay).
            self.consumer.forget(req.group_id)
            self._write_later(req.group_id, self.consumer.tombstones(modern))
        return self.rebalancer.join(req)

    def sync(self, req: SyncRequest) -> SyncResult | Reply[SyncResult]:
        """The SyncGroup answer now, or a parked one the leader's assignment sets."""
        if code := self._coordinator_error(req.group_id):
            return SyncResult(code)
        return self.rebalancer.sync(req)

    def heartbeat(self, req: HeartbeatRequest) -> int:
        return self._coordinator_error(req.group_id) or self.rebalancer.heartbeat(req)

    # ---------------------------------------------------------------- the consumer group protocol (KIP-848)

    async def consumer_heartbeat(self, req: ConsumerHeartbeat) -> ConsumerHeartbeatResult:
        """ConsumerGroupHeartbeat: the answer once the records of what changed are stored."""
        if code := self._coordinator_error(req.group_id):
            return ConsumerHeartbeatResult(code)
        if req.group_id in self.share.groups or req.group_id in self.streams.groups:
            return ConsumerHeartbeatResult(errors.E_GROUP_ID_NOT_FOUND, f"Group {req.group_id} is not a consumer group.")
        entries = []
        classic = self.groups.get(req.group_id)
        if classic is not None and req.group_id not in self.consumer.groups:
            if classic.members or classic.state not in (EMPTY, DEAD):
                if classic.protocol_type != "consumer":
                    return ConsumerHeartbeatResult(errors.E_GROUP_ID_NOT_FOUND, (
                        f"Cannot upgrade classic group {req.group_id} to consumer group because the group does "
                        f"not use the consumer embedded protocol."))
                # Kafka converts a live classic group of consumers (online migration); Samsa
                # converts only empty ones.
                return ConsumerHeartbeatResult(errors.E_GROUP_ID_NOT_FOUND, (
                    f"Cannot upgrade classic group {req.group_id} to consumer group because it has members "
                    f"(Samsa converts only empty classic groups)."))
            if req.member_epoch != 0:
                return ConsumerHeartbeatResult(errors.E_UNKNOWN_MEMBER_ID,
                                               f"Member {req.member_id} is not a member of group {req.group_id}.")
            if self.cfg("group.consumer.migration.policy") not in ("upgrade", "bidirectional") and classic.protocol_type:
                return ConsumerHeartbeatResult(errors.E_GROUP_ID_NOT_FOUND,
                                               f"Group {req.group_id} is not a consumer group.")
            # An empty classic group becomes a consumer group (its offsets stay).
            self.rebalancer.forget(req.group_id)
            if classic.protocol_type:
                entries.append(persistence.group_tombstone(req.group_id))
        result, more = self.consumer.heartbeat(req)
        log.debug("ConsumerGroupHeartbeat %s %s epoch %d names %s regex %r owned %s -> error %d epoch %d assignment %s",
                 req.group_id, req.member_id, req.member_epoch, req.subscribed_topic_names, req.subscribed_topic_regex,
                 None if req.owned is None else sum(map(len, req.owned.values())), result.error, result.member_epoch,
                 None if result.assignment is None else sum(map(len, result.assignment.values())))
        entries += more
        return await self._stored(req.group_id, entries, result)

    async def _stored(self, group_id: str, entries: list, result: ConsumerHeartbeatResult) -> ConsumerHeartbeatResult:
        """A heartbeat's answer once its records are in ``__consumer_offsets`` (a failed write: the
        write's error, NOT_COORDINATOR for a lost leadership)."""
        if entries:
            try:
                await self.offsets_topic.write(group_id, entries)
            except errors.KafkaError as e:
                return ConsumerHeartbeatResult(errors.E_NOT_COORDINATOR if isinstance(
                    e, errors.NotLeaderOrFollowerError) else e.code, e.message)
        return result

    # ---------------------------------------------------------------- share groups (KIP-932)

    async def share_heartbeat(self, req: ShareHeartbeat) -> ConsumerHeartbeatResult:
        """ShareGroupHeartbeat: the answer once the records of what changed are stored."""
        if not req.group_id:  # Kafka validates the request before finding its coordinator
            return ConsumerHeartbeatResult(errors.E_INVALID_REQUEST, "GroupId can't be empty.")
        if code := self._coordinator_error(req.group_id):
            return ConsumerHeartbeatResult(code)
        if req.group_id in self.consumer.groups or req.group_id in self.groups or req.group_id in self.streams.groups:
            return ConsumerHeartbeatResult(errors.E_GROUP_ID_NOT_FOUND, f"Group {req.group_id} is not a share group.")
        result, entries = self.share.share_heartbeat(req)
        log.debug("ShareGroupHeartbeat %s %s epoch %d names %s -> error %d epoch %d assignment %s",
                  req.group_id, req.member_id, req.member_epoch, req.subscribed_topic_names, result.error,
                  result.member_epoch, None if result.assignment is None else sum(map(len, result.assignment.values())))
        return await self._stored(req.group_id, entries, result)

    def share_describe(self, group_id: str) -> ConsumerGroupDescription:
        if code := self._coordinator_error(group_id):
            return ConsumerGroupDescription(group_id, code)
        if group_id not in self.share.groups and (group_id in self.groups or group_id in self.consumer.groups
                                                  or group_id in self.streams.groups):
            return ConsumerGroupDescription(group_id, errors.E_GROUP_ID_NOT_FOUND,
                                            f"Group {group_id} is not a share group.")
        return self.share.describe(group_id)

    def consumer_describe(self, group_id: str) -> ConsumerGroupDescription:
        if code := self._coordinator_error(group_id):
            return ConsumerGroupDescription(group_id, code)
        if group_id not in self.consumer.groups and (group_id in self.groups or group_id in self.share.groups
                                                     or group_id in self.streams.groups):
            return ConsumerGroupDescription(group_id, errors.E_GROUP_ID_NOT_FOUND,
                                            f"Group {group_id} is not a consumer group.")
        return self.consumer.describe(group_id)

    # ---------------------------------------------------------------- streams groups (KIP-1071)

    def _modern(self, group_id: str) -> bool:
        """Is it a group of the consumer or streams protocol (whose offsets make no classic group)?"""
        return group_id in self.consumer.groups or group_id in self.streams.groups

    def _create_internal_topic(self, t: InternalTopic) -> None:
        """A streams group's repartition or changelog topic, as its topology asks."""
        self.host.create_topic(t.name, t.partitions, t.replication_factor or -1, configs=dict(t.configs))

    async def streams_heartbeat(self, req: StreamsHeartbeat) -> StreamsHeartbeatResult:
        """StreamsGroupHeartbeat: the answer once the records of what changed are stored."""
        if not req.group_id:  # validated before the coordinator is looked for, as Kafka does
            return StreamsHeartbeatResult(errors.E_INVALID_REQUEST, "GroupId can't be empty.")
        if code := self._coordinator_error(req.group_id):
            return StreamsHeartbeatResult(code)
        classic = self.groups.get(req.group_id)
        if req.group_id not in self.streams.groups and (
                req.group_id in self.consumer.groups or req.group_id in self.share.groups
                or (classic is not None and (classic.members or classic.state not in (EMPTY, DEAD)))):
            return StreamsHeartbeatResult(errors.E_GROUP_ID_NOT_FOUND, f"Group {req.group_id} is not a streams group.")
        result, entries = self.streams.streams_heartbeat(req)
        if not result.error and classic is not None and req.group_id in self.streams.groups:
            # An empty classic group (an application moving to the streams protocol) becomes the
            # streams group, as in Kafka; its committed offsets stay.
            self.rebalancer.forget(req.group_id)
            if classic.protocol_type:
                entries.insert(0, persistence.group_tombstone(req.group_id))
        log.debug("StreamsGroupHeartbeat %s %s epoch %d -> error %d epoch %d tasks %s", req.group_id, req.member_id,
                  req.member_epoch, result.error, result.member_epoch, result.tasks)
        if entries:
            try:
                await self.offsets_topic.write(req.group_id, entries)
            except errors.KafkaError as e:
                return StreamsHeartbeatResult(errors.E_NOT_COORDINATOR if isinstance(
                    e, errors.NotLeaderOrFollowerError) else e.code, e.message)
        return result

    def streams_describe(self, group_id: str) -> StreamsGroupDescription:
        if code := self._coordinator_error(group_id):
            return StreamsGroupDescription(group_id, code)
        if group_id not in self.streams.groups and (group_id in self.groups or group_id in self.consumer.groups
                                                    or group_id in self.share.groups):
            return StreamsGroupDescription(group_id, errors.E_GROUP_ID_NOT_FOUND,
                                           f"Group {group_id} is not a streams group.")
        return self.streams.describe(group_id)

    def group_configs(self, group_id: str) -> dict[str, str]:
        """The group's own configs (cached for GROUP_CONFIG_TTL s: heartbeats read them)."""
        now = time.monotonic()
        cached = self._group_configs.get(group_id)
        if cached is None or now - cached[0] > GROUP_CONFIG_TTL:
            cached = self._group_configs[group_id] = (now, dict(self.host.group_configs(group_id)))
        return cached[1]

    def share_group_config(self, group_id: str, key: str) -> Any:
        """A share group's effective ``share.*`` config (``share.record.lock.duration.ms``,
        ``share.delivery.count.limit``, ``share.auto.offset.reset``, ``share.isolation.level``,
        ...): the group's own value, else the broker's key it overrides, else Kafka's default;
        numbers as ints. For the share partitions (KIP-932)."""
        value = self.group_configs(group_id).get(key)
        if value is None:
            return group_configs.default(key, self.cfg)
        return value if key in group_configs.OWN_DEFAULTS else int(value)

    def group_configs_changed(self, group_id: str) -> None:
        """This broker altered the group's configs: read them again at the next heartbeat."""
        self._group_configs.pop(group_id, None)

    def leave(self, group_id: str, leaving: list[LeavingMember]) -> tuple[int, list[int]]:
        """(group error, one error per leaving member)."""
        if code := self._coordinator_error(group_id):
            return code, [code] * len(leaving)
        return 0, self.rebalancer.leave(group_id, leaving)

    # ---------------------------------------------------------------- offsets

    async def commit(self, req: OffsetCommitRequest) -> list[int]:
        """Store the offsets; one error code per entry of ``req.offsets``, in order."""
        group_id = req.group_id
        error = self._coordinator_error(group_id) or self._check_commit(
            group_id, req.generation_id, req.member_id, req.group_instance_id, req.api_version)
        ts = now_ms()
        codes, writes, updates = self._offset_records(group_id, req.offsets, error, ts)
        if writes:
            try:
                await self.offsets_topic.write(group_id, writes)
            except errors.KafkaError as e:
                codes = [code or e.code for code in codes]
                updates = []
            self.offsets.commit(group_id, updates)
            if not self._modern(group_id):
                self.groups.setdefault(group_id, Group(group_id, state_timestamp=ts))
        return codes

    def _check_commit(self, group_id: str, generation: int, member_id: str, instance_id: str | None,
                      api_version: int | None = None) -> int:
        if group_id in self.share.groups:  # a share group commits no offsets
            return errors.E_GROUP_ID_NOT_FOUND
        if group_id in self.consumer.groups:  # the generation is the member epoch
            return self.consumer.check_commit(group_id, member_id, generation, api_version)
        if group_id in self.streams.groups:
            return self.streams.check_commit(group_id, member_id, generation, api_version)
        return self.rebalancer.check_commit(group_id, generation, member_id, instance_id)

    def _offset_records(self, group_id: str, offsets: list, error: int, ts: int
                        ) -> tuple[list[int], list, list[tuple[TopicPartition, OffsetAndMetadata]]]:
        """For each entry: its error code, and for the good ones the record to write and the
        offset it stores (OffsetCommit and TxnOffsetCommit check entries alike)."""
        max_meta = self.cfg("offset.metadata.max.bytes")
        codes, writes, updates = [], [], []
        for entry in offsets:
            code = error
            topic = self.host.topics.get(entry.topic)
            if not code and (topic is None or entry.partition not in topic.partitions):
                code = errors.E_UNKNOWN_TOPIC_OR_PARTITION
            elif not code and len(entry.metadata.encode()) > max_meta:
                code = errors.E_OFFSET_METADATA_TOO_LARGE
            if not code:
                o = OffsetAndMetadata(entry.offset, entry.leader_epoch, entry.metadata, ts)
                writes.append(persistence.offset_entry(group_id, entry.topic, entry.partition, o))
                updates.append(((entry.topic, entry.partition), o))
            codes.append(code)
        return codes, writes, updates

    def fetch_offsets(self, group_id: str, wanted: dict[str, list[int]] | None
                      ) -> tuple[int, list[tuple[str, list[tuple[int, OffsetAndMetadata | None]]]]]:
        """(group error, [(topic, [(partition, committed offset or None)])]) for the partitions
        asked for, or for every partition the group committed when ``wanted`` is None."""
        if code := self._coordinator_error(group_id):
            return code, []
        return 0, list(self.offsets.fetch(group_id, wanted))

    def unstable(self, group_id: str, tp: TopicPartition) -> bool:
        """Does an open transaction hold an offset for this partition? (OffsetFetch require_stable)"""
        return any(tp in by_group.get(group_id, {}) for by_group in self.pending_txn.values())

    # ---------------------------------------------------------------- transactional offsets

    async def txn_commit(self, req: TxnOffsetCommitRequest) -> list[int]:
        """TxnOffsetCommit: write the offsets in the producer's transaction; one error code per
        entry. They become the group's committed offsets when the commit marker arrives."""
        group_id = req.group_id
        error = self._coordinator_error(group_id)
        if not error and req.generation_id >= 0:
            error = self._check_commit(group_id, req.generation_id, req.member_id, req.group_instance_id)
        if not error and req.generation_id < 0 and req.member_id:
            error = self._check_commit(group_id, -1, req.member_id, req.group_instance_id)
        ts = now_ms()
        codes, writes, updates = self._offset_records(group_id, req.offsets, error, ts)
        if writes:
            try:
                await self.offsets_topic.write(group_id, writes, producer_id=req.producer_id,
                                               producer_epoch=req.producer_epoch)
            except errors.KafkaError as e:
                return [code or e.code for code in codes]
            pending = self.pending_txn.setdefault(req.producer_id, {}).setdefault(group_id, {})
            pending.update(updates)
            if not self._modern(group_id):
                self.groups.setdefault(group_id, Group(group_id, state_timestamp=ts))
        return codes

    def complete_txn(self, producer_id: int, commit: bool, offsets_partition: int) -> None:
        """A marker landed on an offsets partition led here: the producer's pending offsets of
        that partition's groups take effect (commit) or go (abort)."""
        by_group = self.pending_txn.get(producer_id)
        if not by_group:
            return
        n = self.num_partitions
        for group_id in list(by_group):
            if partition_for(group_id, n) != offsets_partition:
                continue
            offsets = by_group.pop(group_id)
            if commit:
                self.offsets.commit(group_id, offsets.items())
        if not by_group:
            del self.pending_txn[producer_id]

    # ---------------------------------------------------------------- admin

    def list_groups(self, states: list[str] | None) -> list[GroupListing]:
        """The live groups, by id; only those in ``states`` (Kafka's names, any case) if given."""
        wanted = {s.lower() for s in states or []}
        out = [GroupListing(g.group_id, g.protocol_type or "", g.state)
               for g in self.groups.values() if not self._modern(g.group_id)]
        out += [GroupListing(g.group_id, "consumer", g.state.value, "consumer") for g in self.consumer.groups.values()]
        out += [GroupListing(g.group_id, "share", g.state.value, "share") for g in self.share.groups.values()]
        out += [GroupListing(g.group_id, "streams", g.state, "streams") for g in self.streams.groups.values()]
        return sorted((g for g in out if str(g.state) != DEAD.value and not (wanted and str(g.state).lower() not in wanted)),
                      key=lambda g: g.group_id)

    def describe(self, group_id: str) -> GroupDescription:
        if code := self._coordinator_error(group_id):
            return GroupDescription(group_id, code)
        if (modern := self.consumer.groups.get(group_id) or self.share.groups.get(group_id)
                or self.streams.groups.get(group_id)) is not None:
            # A consumer or share group through the classic DescribeGroups: Kafka answers
            # GROUP_ID_NOT_FOUND ("not a classic group"); the admin client asks
            # ConsumerGroupDescribe instead.
            return GroupDescription(group_id, errors.E_GROUP_ID_NOT_FOUND, state=DEAD.value,
                                    message=f"Group {group_id} is not a classic group.")
        g = self.groups.get(group_id)
        if g is None:
            return GroupDescription(group_id, state=DEAD.value)
        stable = g.state == STABLE
        members = [MemberDescription(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                     m.metadata(g.protocol or "") if stable else b"",
                                     m.assignment if stable else b"") for m in g.members.values()]
        return GroupDescription(group_id, 0, g.state.value, g.protocol_type or "",
                                (g.protocol or "") if stable else "", members)

    async def delete_groups(self, group_ids: list[str]) -> list[tuple[str, int]]:
        """(group id, error) for each group: only Empty groups can be deleted, with their offsets."""
        out = []
        for group_id in group_ids:
            try:
                self._check_coordinator(group_id)
                if (share := self.share.groups.get(group_id)) is not None:
                    if share.members:
                        raise errors.NonEmptyGroupError(f"group {group_id} has members")
                    await self._delete_share_state(group_id, set(self.share.state_topics.get(group_id, {})))
                    await self.offsets_topic.write(group_id, self.share.tombstones(share))
                    self.share.forget(group_id)
                    out.append((group_id, 0))
                    continue
                driver = self.consumer if group_id in self.consumer.groups else self.streams
                if (modern := driver.groups.get(group_id)) is not None:
                    if modern.members:
                        raise errors.NonEmptyGroupError(f"group {group_id} has members")
                    tombstones = [persistence.offset_entry(group_id, t, p, None)
                                  for t, p in self.offsets.committed(group_id)]
                    await self.offsets_topic.write(group_id, tombstones + driver.tombstones(modern))
                    driver.forget(group_id)
                    self.offsets.drop_group(group_id)
                    self.groups.pop(group_id, None)
                    out.append((group_id, 0))
                    continue
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
                out.append((group_id, 0))
            except errors.KafkaError as e:
                out.append((group_id, e.code))
        return out

    # ---------------------------------------------------------------- share groups' offsets (KIP-932)

    def _share_state(self) -> SharePersister:
        if self.share_state is None:
            raise errors.CoordinatorNotAvailableError("no share coordinator")
        return self.share_state

    async def _delete_share_state(self, group_id: str, topic_ids: set[bytes]) -> None:
        """Delete the share coordinator's state of these topics' share partitions of the group,
        then forget the topics; KafkaError if the share coordinator refuses."""
        known = self.share.state_topics.get(group_id, {})
        persister = self._share_state() if topic_ids & set(known) else None
        for t in sorted(topic_ids & set(known)):
            for p in sorted(known[t][1]):
                try:
                    await persister.delete(ShareKey(group_id, uuid.UUID(bytes=bytes(t)), p))
                except PersisterError as e:
                    raise errors.KafkaError(str(e), code=e.code) from None
        entries = self.share.remove_state_topics(group_id, topic_ids)
        if entries:
            await self.offsets_topic.write(group_id, entries)

    def _share_group_for_offsets(self, group_id: str) -> int:
        """0 if a share group of this id may be the subject of Alter/DeleteShareGroupOffsets (or
        none exists yet), else the error."""
        if group_id in self.consumer.groups or (group_id in self.groups and group_id not in self.share.groups):
            return errors.E_GROUP_ID_NOT_FOUND
        return 0

    async def describe_share_offsets(self, group_id: str, topics: dict[str, list[int]] | None
                                     ) -> tuple[int, str | None, list[tuple[str, bytes, list[dict]]]]:
        """DescribeShareGroupOffsets of one group: (error, message, [(topic, topic id, partitions)]),
        each partition ``{partition_index, start_offset, leader_epoch, lag, error_code, error_message}``.
        Without topics: every topic with share state (none for a group of another type)."""
        if code := self._coordinator_error(group_id):
            return code, None, []
        share = self.share.groups.get(group_id)
        if topics is None:
            known = self.share.state_topics.get(group_id, {}) if share is not None else {}
            wanted = [(name, t, sorted(parts)) for t, (name, parts) in sorted(known.items(), key=lambda kv: kv[1][0])]
        else:
            wanted = []
            for name, parts in topics.items():
                info = self.host.topics.get(name)
                wanted.append((name, info.topic_id if info else bytes(16), parts))
        out = []
        for name, tid, parts in wanted:
            rows = []
            for p in parts:
                row = {"partition_index": p, "start_offset": -1, "leader_epoch": 0, "lag": -1, "error_code": 0,
                       "error_message": None}
                info = self.host.topics.get(name)
                if info is None or p not in info.partitions:
                    row.update(error_code=errors.E_UNKNOWN_TOPIC_OR_PARTITION,
                               error_message="This server does not host this topic-partition.")
                elif share is not None:
                    try:
                        st = await self._share_state().read_summary(
                            ShareKey(group_id, uuid.UUID(bytes=bytes(info.topic_id)), p), 0)
                    except PersisterError as e:
                        row.update(error_code=e.code, error_message=str(e))
                    except errors.KafkaError as e:
                        row.update(error_code=e.code, error_message=e.message)
                    else:
                        row.update(start_offset=st.start_offset, leader_epoch=max(st.leader_epoch, 0))
                        if st.start_offset >= 0:
                            try:
                                end = await self.host.latest_offset(name, p)
                            except (errors.KafkaError, OSError):
                                end = None
                            if end is not None:
                                row["lag"] = end - st.start_offset - max(st.delivery_complete_count, 0)
                rows.append(row)
            out.append((name, tid, rows))
        return 0, None, out

    async def alter_share_offsets(self, group_id: str, offsets: dict[str, dict[int, int]]
                                  ) -> tuple[int, str | None, list[tuple[str, bytes, list[tuple[int, int, str | None]]]]]:
        """AlterShareGroupOffsets: each partition's share state starts afresh at its offset (a new
        state epoch); only for an empty share group, which is created if unknown, as Kafka does."""
        if code := self._coordinator_error(group_id):
            return code, None, []
        if code := self._share_group_for_offsets(group_id):
            return code, f"Group {group_id} is not a share group.", []
        share = self.share.groups.get(group_id)
        if share is not None and share.members:
            return errors.E_NON_EMPTY_GROUP, "The group is not empty.", []
        entries = self.share.create_empty(group_id) if share is None else []
        persister = self._share_state()
        out, done = [], {}
        for name, parts in offsets.items():
            info = self.host.topics.get(name)
            rows = []
            for p, offset in parts.items():
                if info is None or p not in info.partitions:
                    rows.append((p, errors.E_UNKNOWN_TOPIC_OR_PARTITION,
                                 "This server does not host this topic-partition."))
                    continue
                key = ShareKey(group_id, uuid.UUID(bytes=bytes(info.topic_id)), p)
                try:
                    current = await persister.read_summary(key, 0)
                    await persister.initialize(key, current.state_epoch + 1, offset)
                except PersisterError as e:
                    rows.append((p, e.code, str(e)))
                    continue
                rows.append((p, 0, None))
                done.setdefault(info.topic_id, (name, set()))[1].add(p)
            out.append((name, info.topic_id if info else bytes(16), rows))
        entries += self.share.add_state_topics(group_id, {t: (n, frozenset(ps)) for t, (n, ps) in done.items()})
        if entries:
            try:
                await self.offsets_topic.write(group_id, entries)
            except errors.KafkaError as e:
                return e.code, e.message, []
        return 0, None, out

    async def delete_share_offsets(self, group_id: str, topic_names: list[str]
                                   ) -> tuple[int, str | None, list[tuple[str, bytes, int, str | None]]]:
        """DeleteShareGroupOffsets: the share state of these topics goes (an empty share group only)."""
        if code := self._coordinator_error(group_id):
            return code, None, []
        if code := self._share_group_for_offsets(group_id):
            return code, f"Group {group_id} is not a share group.", []
        share = self.share.groups.get(group_id)
        if share is None:
            return errors.E_GROUP_ID_NOT_FOUND, f"Group {group_id} not found.", []
        if share.members:
            return errors.E_NON_EMPTY_GROUP, "The group is not empty.", []
        out = []
        for name in topic_names:
            info = self.host.topics.get(name)
            if info is None:
                out.append((name, bytes(16), errors.E_UNKNOWN_TOPIC_OR_PARTITION,
                            "This server does not host this topic-partition."))
                continue
            try:
                await self._delete_share_state(group_id, {info.topic_id})
            except errors.KafkaError as e:
                out.append((name, info.topic_id, e.code, e.message))
                continue
            out.append((name, info.topic_id, 0, None))
        return 0, None, out

    async def delete_offsets(self, group_id: str, partitions: list[TopicPartition]) -> tuple[int, list[int]]:
        """(group error, one error per partition): a consumer group's offsets of topics it does
        not subscribe to (or any offsets of an Empty group) can be deleted."""
        if code := self._coordinator_error(group_id):
            return code, []
        driver = self.streams if group_id in self.streams.groups else self.consumer
        modern = driver.groups.get(group_id)
        g = self.groups.get(group_id)
        if modern is not None:  # a consumer or streams group: what its members read now
            subscribed = driver.subscribed_topic_names(group_id)
        elif g is None:
            return errors.E_GROUP_ID_NOT_FOUND, []
        elif g.state != EMPTY and g.protocol_type != "consumer":
            return errors.E_NON_EMPTY_GROUP, []  # only a consumer group's subscriptions are known
        else:
            subscribed = g.subscribed_topics() if g.state != EMPTY else set()
        committed = self.offsets.committed(group_id)
        codes = [errors.E_GROUP_SUBSCRIBED_TO_TOPIC if topic in subscribed else 0 for topic, _ in partitions]
        tombstones = [tp for tp, code in zip(partitions, codes) if code == 0 and tp in committed]
        if tombstones:
            await self.offsets_topic.write(group_id, [persistence.offset_entry(group_id, t, p, None)
                                                      for t, p in tombstones])
            self.offsets.delete(group_id, tombstones)
        return 0, codes

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
            modern = self.consumer.groups.get(group_id) or self.streams.groups.get(group_id)
            if modern is not None and modern.members:
                continue  # a live consumer or streams group keeps its offsets
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


@dataclass(frozen=True)
class GroupMetrics:
    """The group coordinator's state as the broker's metrics show it (GroupMetadataManager)."""

    states: list[str]  # each classic group's state name
    committed: dict[str, dict[tuple[str, int], int]]  # group -> (topic, partition) -> committed offset
    completed_rebalances: int
    consumer_states: list[str] = field(default_factory=list)  # each consumer group's (KIP-848) state name
    consumer_rebalances: int = 0  # target assignments computed for consumer groups
    share_states: list[str] = field(default_factory=list)  # each share group's (KIP-932) state name
    share_rebalances: int = 0  # target assignments computed for share groups
    streams_states: list[str] = field(default_factory=list)  # each streams group's (KIP-1071) state name
    streams_rebalances: int = 0  # target assignments computed for streams groups
