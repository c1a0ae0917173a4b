"""What the console's pages show, gathered with Samsa's asyncio Admin client."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from samsa.client.admin import AsyncAdmin
from samsa.client.types import (ConfigResource, ConsumerGroupDescription, NewPartitions, NewTopic, Node,
                                PartitionInfo, ShareGroupDescription, SharePartitionOffset, StreamsGroupDescription,
                                TopicPartition)
from samsa.protocol import api, errors

INACTIVE = ("Empty", "Dead")  # the group states in which offsets may be reset, as the CLI allows


class ConsoleError(Exception):
    """Something the user asked for cannot be done: shown on the page as it is worded."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


@dataclass
class BrokerRow:
    id: int
    host: str
    port: int
    rack: str | None
    controller: bool
    alive: bool


@dataclass
class TopicRow:
    name: str
    internal: bool
    partitions: int
    replication: int
    under_replicated: int
    offline: int
    size: int | None


@dataclass
class PartitionRow:
    partition: int
    leader: int | None
    replicas: list[int]
    isr: list[int]
    start: int
    end: int
    size: int | None

    @property
    def under_replicated(self) -> bool:
        return len(self.isr) < len(self.replicas)


@dataclass
class LagRow:
    topic: str
    partition: int
    committed: int | None
    end: int | None

    @property
    def lag(self) -> int | None:
        return None if self.committed is None or self.end is None else max(self.end - self.committed, 0)


@dataclass
class GroupView:
    description: ConsumerGroupDescription
    lags: list[LagRow] = field(default_factory=list)

    @property
    def total_lag(self) -> int:
        return sum(r.lag or 0 for r in self.lags)

    @property
    def active(self) -> bool:
        return self.description.state not in INACTIVE

    # what the groups list shows of every kind of group
    @property
    def type(self) -> str:
        return self.description.type

    @property
    def assignor(self) -> str:
        return self.description.partition_assignor


@dataclass
class StreamsGroupView:
    """A streams group (KIP-1071): its members' tasks, its topology, and its offsets and lag on
    its input topics (source and repartition topics)."""
    description: StreamsGroupDescription
    lags: list[LagRow] = field(default_factory=list)
    type = "streams"

    @property
    def total_lag(self) -> int:
        return sum(r.lag or 0 for r in self.lags)

    @property
    def active(self) -> bool:
        return self.description.state not in INACTIVE

    @property
    def assignor(self) -> str:
        return self.description.assignor


@dataclass
class ShareOffsetRow:
    """A share group's place in one partition, as DescribeShareGroupOffsets gives it: the start
    offset (the first record not yet delivered to completion; None: no state there yet) and the
    lag (the records not delivered to completion; None: the broker did not say), with the log
    end offset beside them. How many records are in flight (acquired, not yet acknowledged) is
    in no Kafka API, so it is not shown."""
    topic: str
    partition: int
    start: int | None
    lag: int | None
    end: int | None
    error: str | None = None


@dataclass
class ShareGroupView:
    description: ShareGroupDescription
    offsets: list[ShareOffsetRow] = field(default_factory=list)
    offsets_error: str | None = None  # DescribeShareGroupOffsets refused as a whole (an older broker)
    type = "share"

    @property
    def total_lag(self) -> int:
        return sum(r.lag or 0 for r in self.offsets)

    @property
    def active(self) -> bool:
        return self.description.state not in INACTIVE

    @property
    def assignor(self) -> str:
        return self.description.assignor


class ClusterService:
    """One AsyncAdmin on the console's event loop; every page's data is a method here."""

    def __init__(self, admin: AsyncAdmin, bootstrap: str):
        self.admin = admin
        self.bootstrap = bootstrap

    # ---------------------------------------------------------------- cluster

    async def brokers(self) -> tuple[str | None, list[BrokerRow]]:
        """(cluster id, brokers): the live ones, and those the partitions name that are not alive."""
        cluster = await self.admin.describe_cluster()
        controller = cluster.controller.id if cluster.controller else None
        rows = {n.id: BrokerRow(n.id, n.host, n.port, n.rack, n.id == controller, True) for n in cluster.brokers}
        described = await self._describe_all()
        for desc in described.values():
            for p in desc.partitions:
                for r in p.replicas:
                    rows.setdefault(r, BrokerRow(r, "", 0, None, False, False))
        return cluster.cluster_id, sorted(rows.values(), key=lambda b: b.id)

    async def api_versions(self) -> dict[str, str]:
        """The versions of the main APIs the bootstrap broker speaks (what 'version' a broker shows)."""
        conn = await self.admin.cluster.any()
        versions = conn.api_versions

        out = {}
        for key, (lo, hi) in sorted(versions.items()):
            try:
                name = api.api(key).name
            except Exception:  # noqa: BLE001 - a key this client has no schema for
                continue
            out[name] = f"v{lo}–v{hi}"
        return out

    # ---------------------------------------------------------------- topics

    async def _describe_all(self) -> dict[str, Any]:
        names = list(await self.admin.list_topics(include_internal=True))
        return await self.admin.describe_topics(names) if names else {}

    async def _sizes(self) -> dict[TopicPartition, int]:
        """Each partition's size on its leader (DescribeLogDirs); empty if the brokers refuse it."""
        try:
            dirs = await self.admin.describe_log_dirs()
        except (errors.KafkaError, OSError):
            return {}
        sizes: dict[TopicPartition, int] = {}
        for by_dir in dirs.values():
            for d in by_dir.values():
                for tp, info in d.replicas.items():
                    sizes[tp] = max(sizes.get(tp, 0), info.size)
        return sizes

    async def topics(self) -> list[TopicRow]:
        described, sizes = await asyncio.gather(self._describe_all(), self._sizes())
        rows = []
        for name, d in sorted(described.items()):
            parts = d.partitions
            size = sum(sizes.get(TopicPartition(name, p.partition), 0) for p in parts) if sizes else None
            rows.append(TopicRow(name, d.is_internal, len(parts), len(parts[0].replicas) if parts else 0,
                                 sum(1 for p in parts if len(p.isr) < len(p.replicas)),
                                 sum(1 for p in parts if p.leader is None), size))
        return rows

    async def topic(self, name: str) -> tuple[list[PartitionRow], dict[str, Any]]:
        """(partitions, the topic's configs that are not defaults)."""
        try:
            desc = (await self.admin.describe_topics([name]))[name]
        except errors.UnknownTopicOrPartitionError:
            raise ConsoleError(f"Topic '{name}' does not exist.", 404) from None
        tps = [TopicPartition(name, p.partition) for p in desc.partitions]
        starts, ends, sizes, configs = await asyncio.gather(
            self.admin.list_offsets({tp: "earliest" for tp in tps}), self.admin.list_offsets({tp: "latest" for tp in tps}),
            self._sizes(), self.admin.describe_configs([ConfigResource("topic", name)]))
        rows = [PartitionRow(p.partition, p.leader, list(p.replicas), list(p.isr),
                             starts[TopicPartition(name, p.partition)].offset, ends[TopicPartition(name, p.partition)].offset,
                             sizes.get(TopicPartition(name, p.partition)))
                for p in sorted(desc.partitions, key=lambda p: p.partition)]
        entries = next(iter(configs.values()), {})
        return rows, {k: e for k, e in sorted(entries.items())}

    async def partitions(self, name: str) -> list[PartitionInfo]:
        try:
            return (await self.admin.describe_topics([name]))[name].partitions
        except errors.UnknownTopicOrPartitionError:
            raise ConsoleError(f"Topic '{name}' does not exist.", 404) from None

    async def create_topic(self, name: str, partitions: int, replication: int, configs: dict[str, str]) -> None:
        await self.admin.create_topics([NewTopic(name, partitions, replication, config=configs)])

    async def add_partitions(self, name: str, total: int) -> None:
        await self.admin.create_partitions({name: NewPartitions(total)})

    async def delete_topic(self, name: str) -> None:
        await self.partitions(name)  # a clear message for a topic that is not there
        await self.admin.delete_topics([name])

    # ---------------------------------------------------------------- groups

    async def groups(self) -> list[GroupView | ShareGroupView | StreamsGroupView]:
        """Consumer groups (classic and KIP-848), share groups (KIP-932) and streams groups (KIP-1071),
        by group id."""
        consumer, share, streams = await asyncio.gather(self._consumer_groups(), self._share_groups(),
                                                        self._streams_groups())
        return sorted([*consumer, *share, *streams], key=lambda v: v.description.group_id)

    async def _streams_groups(self) -> list[StreamsGroupView]:
        try:
            listings = await self.admin.list_streams_groups()
        except errors.UnsupportedVersionError:  # a broker without ListGroups v5
            return []
        if not listings:
            return []
        try:
            described = await self.admin.describe_streams_groups([g.group_id for g in listings])
        except errors.GroupIdNotFoundError:  # deleted between the two requests
            return []
        return list(await asyncio.gather(*(self._streams_view(d) for d in described.values())))

    async def _streams_view(self, d: StreamsGroupDescription) -> StreamsGroupView:
        """A streams group's committed offsets and lag on every partition of its input topics."""
        committed = await self.admin.list_consumer_group_offsets(d.group_id)
        inputs = d.input_topics()
        described = await self.admin.describe_topics(inputs) if inputs else {}
        tps = sorted(set(committed) | {TopicPartition(t, p.partition) for t, info in described.items()
                                       for p in info.partitions})
        ends = await self._ends(tps)
        return StreamsGroupView(d, [LagRow(tp.topic, tp.partition, committed[tp].offset if tp in committed else None,
                                           ends.get(tp)) for tp in tps])

    async def streams_group(self, group_id: str) -> StreamsGroupView | None:
        """The streams group of this id, or None if there is none (or the broker has no streams groups)."""
        try:
            d = (await self.admin.describe_streams_groups([group_id]))[group_id]
        except (errors.GroupIdNotFoundError, errors.UnsupportedVersionError):
            return None
        return await self._streams_view(d)

    async def _consumer_groups(self) -> list[GroupView]:
        listings = await self.admin.list_consumer_groups()
        if not listings:
            return []
        ids = sorted(g.group_id for g in listings)
        described = await self.admin.describe_consumer_groups(ids)
        views = await asyncio.gather(*(self._with_lag(described[g]) for g in ids))
        return list(views)

    async def _share_groups(self) -> list[ShareGroupView]:
        try:
            listings = await self.admin.list_share_groups()
        except errors.UnsupportedVersionError:  # a broker without share groups (ListGroups < v5)
            return []
        if not listings:
            return []
        described = await self.admin.describe_share_groups([g.group_id for g in listings])
        return list(await asyncio.gather(*(self._share_view(d) for d in described.values())))

    async def _share_view(self, d: ShareGroupDescription) -> ShareGroupView:
        try:
            offsets = await self.admin.list_share_group_offsets(d.group_id)
        except errors.UnsupportedVersionError as e:  # no DescribeShareGroupOffsets (a Kafka before 4.1)
            return ShareGroupView(d, [], str(e))
        assigned = {tp for m in d.members for tp in m.assignment}
        tps = sorted(set(offsets) | assigned)
        ends = await self._ends(tps)
        rows = []
        for tp in tps:
            o = offsets.get(tp)
            if isinstance(o, SharePartitionOffset):
                rows.append(ShareOffsetRow(tp.topic, tp.partition, o.start_offset if o.start_offset >= 0 else None,
                                           o.lag if o.lag >= 0 else None, ends.get(tp)))
            else:
                rows.append(ShareOffsetRow(tp.topic, tp.partition, None, None, ends.get(tp),
                                           None if o is None else str(o.args[0] if o.args else o.name)))
        return ShareGroupView(d, rows)

    async def share_group(self, group_id: str) -> ShareGroupView | None:
        """The share group of this id, or None if there is none (or the broker has no share groups)."""
        try:
            d = (await self.admin.describe_share_groups([group_id]))[group_id]
        except (errors.GroupIdNotFoundError, errors.UnsupportedVersionError):
            return None
        return await self._share_view(d)

    async def group(self, group_id: str) -> GroupView:
        described = (await self.admin.describe_consumer_groups([group_id]))[group_id]
        view = await self._with_lag(described)
        if described.state == "Dead" and not view.lags:
            raise ConsoleError(f"Consumer group '{group_id}' does not exist.", 404)
        return view

    async def _with_lag(self, d: ConsumerGroupDescription) -> GroupView:
        committed = await self.admin.list_consumer_group_offsets(d.group_id)
        assigned = {tp for m in d.members for tp in m.assignment}
        tps = sorted(set(committed) | assigned)
        ends = await self._ends(tps)
        lags = [LagRow(tp.topic, tp.partition, committed[tp].offset if tp in committed else None, ends.get(tp))
                for tp in tps]
        return GroupView(d, lags)

    async def _ends(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        """Log end offsets; a partition of a deleted topic is left out."""
        if not tps:
            return {}
        try:
            return {tp: r.offset for tp, r in (await self.admin.list_offsets({tp: "latest" for tp in tps})).items()}
        except errors.UnknownTopicOrPartitionError:
            out: dict[TopicPartition, int] = {}
            for tp in tps:
                try:
                    out.update((k, r.offset) for k, r in (await self.admin.list_offsets({tp: "latest"})).items())
                except errors.UnknownTopicOrPartitionError:
                    pass
            return out


def node_address(node: Node | None) -> str:
    return f"{node.host}:{node.port}" if node is not None else "-"
