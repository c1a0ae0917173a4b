"""The admin client: topics, partitions, configs, offsets, consumer groups, cluster and log dirs.

:class:`AsyncAdmin` is the asyncio client; :class:`Admin` offers the same methods as plain
blocking calls, running an AsyncAdmin on a private event loop in a background thread.
Configuration uses Kafka's admin client keys (``bootstrap.servers``, ``client.id``,
``request.timeout.ms``, ``default.api.timeout.ms``, ``retry.backoff.ms``,
``socket.connection.setup.timeout.ms``).

An error in a response raises the :mod:`samsa.protocol.errors` exception for its code,
carrying the broker's error message when it sent one.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any, Coroutine, Iterable, Mapping, TypeVar

from samsa.client.admin_driver import CONTROLLER, COORDINATOR_MOVED, TRANSACTION, To
from samsa.client.admin_driver import check as _check
from samsa.client.admin_driver import error as _error
from samsa.client.admin_driver import group_error as _group_error
from samsa.client.admin_security import QuotaEntity, SecurityAdmin
from samsa.client.admin_share import ShareAdmin
from samsa.client.admin_streams import StreamsAdmin
from samsa.client.connection import BrokerConnection
from samsa.client.loop import LoopThread
from samsa.client.metadata import ClusterMetadata
from samsa.client.types import (
    ALTER_OPS,
    CONFIG_SOURCES,
    OFFSET_SPECS,
    RESOURCE_TYPES,
    AlterConfigOp,
    ClusterDescription,
    ConfigEntry,
    ConfigResource,
    ConfigSynonym,
    ConsumerGroupDescription,
    ConsumerGroupListing,
    ListOffsetsResultInfo,
    LogDirDescription,
    MemberDescription,
    NewPartitions,
    NewTopic,
    Node,
    OffsetAndMetadata,
    PartitionInfo,
    FencedProducer,
    ProducerState,
    ReplicaInfo,
    ShareGroupDescription,
    ShareGroupListing,
    StreamsGroupDescription,
    StreamsGroupListing,
    SharePartitionOffset,
    TopicDescription,
    TopicListing,
    TopicPartition,
    TransactionDescription,
    TransactionListing,
    uuid_to_str,
)
from samsa.client.security import security_of
from samsa.protocol import codec, errors
from samsa.security.acl import AclBinding, AclFilter
from samsa.protocol.api_keys import ApiKey

T = TypeVar("T")


_RESOURCE_NAMES = {v: k for k, v in RESOURCE_TYPES.items()}
_ISOLATION = {"read_uncommitted": 0, "read_committed": 1}
# InitProducerId errors after which fence_producers finds the coordinator again and retries
# (CONCURRENT_TRANSACTIONS: the coordinator is still aborting the transaction it fenced).
_FENCE_RETRY = COORDINATOR_MOVED | {errors.E_CONCURRENT_TRANSACTIONS}


def _consumer_group(g: dict, node: Node) -> ConsumerGroupDescription:
    """A ConsumerGroupDescribe entry as a description (members with epochs and target assignments)."""
    def tps(assignment: dict) -> list[TopicPartition]:
        return sorted(TopicPartition(t["topic_name"], p) for t in assignment["topic_partitions"] for p in t["partitions"])
    members = [MemberDescription(m["member_id"], m["instance_id"], m["client_id"], m["client_host"],
                                 tps(m["assignment"]), m["member_epoch"], tps(m["target_assignment"]))
               for m in g["members"]]
    return ConsumerGroupDescription(g["group_id"], False, g["group_state"], "consumer", g["assignor_name"], node,
                                    members, "consumer", g["group_epoch"], g["assignment_epoch"])


def decode_assignment(data: bytes | None) -> list[TopicPartition]:
    """The partitions of a consumer-protocol member assignment (empty if there is none)."""
    if not data or len(data) < 2:
        return []
    version = int.from_bytes(data[:2], "big", signed=True)
    if version < 0:
        return []
    # A newer version only appends fields: read it with the newest layout known here.
    try:
        body, _ = codec.decode("ConsumerProtocolAssignment", min(version, 3), memoryview(data), 2)
    except errors.KafkaError:  # not the consumer protocol's layout: nothing we can show
        return []
    return [TopicPartition(t["topic"], p) for t in body["assigned_partitions"] for p in t["partitions"]]


class AsyncAdmin(SecurityAdmin, ShareAdmin, StreamsAdmin):
    def __init__(self, config: Mapping[str, Any]):
        servers = config.get("bootstrap.servers")
        if not servers:
            raise ValueError("bootstrap.servers must be set")
        self.request_timeout_ms = int(config.get("request.timeout.ms", 30000))
        self.default_api_timeout_ms = int(config.get("default.api.timeout.ms", 60000))
        self.retry_backoff_ms = int(config.get("retry.backoff.ms", 100))
        self.cluster = ClusterMetadata(
            servers, client_id=config.get("client.id", "samsa-admin"),
            request_timeout_ms=self.request_timeout_ms,
            connect_timeout_ms=int(config.get("socket.connection.setup.timeout.ms", 10000)),
            bootstrap_timeout_ms=min(self.request_timeout_ms, self.default_api_timeout_ms),
            retry_backoff_ms=self.retry_backoff_ms,
            reconnect_backoff_ms=int(config.get("reconnect.backoff.ms", 50)),
            reconnect_backoff_max_ms=int(config.get("reconnect.backoff.max.ms", 1000)),
            security=security_of(config))
        self._ready_lock = asyncio.Lock()
        self._bootstrapped = False

    async def __aenter__(self) -> "AsyncAdmin":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self.cluster.aclose()

    async def _ready(self) -> ClusterMetadata:
        async with self._ready_lock:
            if not self._bootstrapped:
                await self.cluster.bootstrap()
                self._bootstrapped = True
        return self.cluster

    # ------------------------------------------------------------------ topics

    async def create_topics(self, new_topics: Iterable[NewTopic], validate_only: bool = False) -> None:
        topics = list(new_topics)
        body = {
            "topics": [{
                "name": t.name,
                "num_partitions": -1 if t.replica_assignment else t.num_partitions,
                "replication_factor": -1 if t.replica_assignment else t.replication_factor,
                "assignments": [{"partition_index": p, "broker_ids": list(r)}
                                for p, r in sorted((t.replica_assignment or {}).items())],
                "configs": [{"name": k, "value": v} for k, v in t.config.items()],
            } for t in topics],
            "timeout_ms": self.request_timeout_ms,
            "validate_only": validate_only,
        }
        needs_defaults = any(t.num_partitions == -1 or t.replication_factor == -1
                             for t in topics if not t.replica_assignment)

        async def attempt() -> None:
            resp = await self._send(CONTROLLER, ApiKey.CREATE_TOPICS, body, min_version=4 if needs_defaults else 1)
            for r in resp["topics"]:
                _check(r["error_code"], r.get("error_message"), f"Creating topic {r['name']}")
        await self._call(attempt)

    async def delete_topics(self, names: Iterable[str]) -> None:
        names = list(names)
        body = {"topics": [{"name": n} for n in names], "topic_names": names, "timeout_ms": self.request_timeout_ms}

        async def attempt() -> None:
            resp = await self._send(CONTROLLER, ApiKey.DELETE_TOPICS, body)
            for r in resp["responses"]:
                _check(r["error_code"], r.get("error_message"), f"Deleting topic {r['name']}")
        await self._call(attempt)

    async def list_topics(self, include_internal: bool = False) -> dict[str, TopicListing]:
        """Topic name -> listing, sorted by name."""
        cluster = await self._ready()
        resp = await cluster.refresh()
        out = {}
        for t in sorted(resp["topics"], key=lambda t: t["name"] or ""):
            if t["error_code"] or t["name"] is None or (t.get("is_internal") and not include_internal):
                continue
            out[t["name"]] = TopicListing(t["name"], uuid_to_str(t.get("topic_id") or bytes(16)),
                                          t.get("is_internal", False))
        return out

    async def describe_topics(self, names: Iterable[str]) -> dict[str, TopicDescription]:
        names = list(names)
        cluster = await self._ready()
        resp = await cluster.refresh(names)
        by_name = {t["name"]: t for t in resp["topics"]}
        out = {}
        for name in names:
            t = by_name.get(name)
            if t is None or t["error_code"] == errors.UnknownTopicOrPartitionError.code:
                raise errors.UnknownTopicOrPartitionError(f"Topic '{name}' does not exist")
            _check(t["error_code"], None, f"Describing topic {name}")
            out[name] = TopicDescription(
                name, uuid_to_str(t.get("topic_id") or bytes(16)), t.get("is_internal", False),
                [PartitionInfo(p["partition_index"], p["leader_id"] if p["leader_id"] >= 0 else None,
                               list(p["replica_nodes"]), list(p["isr_nodes"]), list(p.get("offline_replicas") or []))
                 for p in sorted(t["partitions"], key=lambda p: p["partition_index"])])
        return out

    async def create_partitions(self, new_partitions: Mapping[str, int | NewPartitions],
                                validate_only: bool = False) -> None:
        topics = []
        for name, spec in new_partitions.items():
            if isinstance(spec, int):
                spec = NewPartitions(spec)
            topics.append({"name": name, "count": spec.total_count,
                           "assignments": None if spec.new_assignments is None
                           else [{"broker_ids": list(r)} for r in spec.new_assignments]})
        body = {"topics": topics, "timeout_ms": self.request_timeout_ms, "validate_only": validate_only}

        async def attempt() -> None:
            resp = await self._send(CONTROLLER, ApiKey.CREATE_PARTITIONS, body)
            for r in resp["results"]:
                _check(r["error_code"], r.get("error_message"), f"Creating partitions of {r['name']}")
        await self._call(attempt)

    # ------------------------------------------------------------------ configs

    @staticmethod
    def _config_node(resource: ConfigResource) -> int | None:
        """Broker resources go to that broker; the rest (and the cluster default) anywhere."""
        if resource.type in ("broker", "broker_logger") and resource.name:
            try:
                return int(resource.name)
            except ValueError:
                raise errors.InvalidRequestError(f"Broker id must be an integer, got {resource.name!r}") from None
        return None

    @staticmethod
    def _group(resources: Iterable[ConfigResource]) -> dict[int | None, list[ConfigResource]]:
        groups: dict[int | None, list[ConfigResource]] = defaultdict(list)
        for r in resources:
            groups[AsyncAdmin._config_node(r)].append(r)
        return groups

    async def describe_configs(self, resources: Iterable[ConfigResource], include_synonyms: bool = False
                               ) -> dict[ConfigResource, dict[str, ConfigEntry]]:
        resources = list(resources)
        out: dict[ConfigResource, dict[str, ConfigEntry]] = {}
        for node_id, group in self._group(resources).items():
            body = {"resources": [{"resource_type": RESOURCE_TYPES[r.type], "resource_name": r.name,
                                   "configuration_keys": None} for r in group],
                    "include_synonyms": include_synonyms, "include_documentation": False}
            resp = await self._request(To.node(node_id), ApiKey.DESCRIBE_CONFIGS, body)
            for res in resp["results"]:
                resource = ConfigResource(_RESOURCE_NAMES.get(res["resource_type"], "topic"), res["resource_name"])
                _check(res["error_code"], res.get("error_message"), f"Describing configs of {resource.type} {resource.name}")
                out[resource] = {c["name"]: self._entry(c) for c in res["configs"]}
        return {r: out[r] for r in resources if r in out}

    @staticmethod
    def _entry(c: dict[str, Any]) -> ConfigEntry:
        if "config_source" in c:  # v1+
            source = CONFIG_SOURCES.get(c["config_source"], "UNKNOWN")
        else:
            source = "DEFAULT_CONFIG" if c.get("is_default") else "UNKNOWN"
        return ConfigEntry(
            c["name"], c["value"], source, source == "DEFAULT_CONFIG", c["read_only"], c["is_sensitive"],
            [ConfigSynonym(s["name"], s["value"], CONFIG_SOURCES.get(s["source"], "UNKNOWN"))
             for s in c.get("synonyms") or []])

    async def _alter(self, api_key: int, payload: dict[ConfigResource, list[dict[str, Any]]], validate_only: bool) -> None:
        for node_id, group in self._group(payload).items():
            body = {"resources": [{"resource_type": RESOURCE_TYPES[r.type], "resource_name": r.name,
                                   "configs": payload[r]} for r in group],
                    "validate_only": validate_only}

            async def attempt(node_id: int | None = node_id, body: dict = body) -> None:
                resp = await self._send(CONTROLLER if node_id is None else To.node(node_id), api_key, body)
                for res in resp["responses"]:
                    _check(res["error_code"], res.get("error_message"),
                           f"Altering configs of {_RESOURCE_NAMES.get(res['resource_type'])} {res['resource_name']}")
            await self._call(attempt)

    async def alter_configs(self, configs: Mapping[ConfigResource, Mapping[str, str | None]],
                            validate_only: bool = False) -> None:
        """Replace each resource's dynamic configs with the ones given (AlterConfigs)."""
        payload = {r: [{"name": k, "value": v} for k, v in c.items()] for r, c in configs.items()}
        await self._alter(ApiKey.ALTER_CONFIGS, payload, validate_only)

    async def incremental_alter_configs(self, ops: Mapping[ConfigResource, Iterable[AlterConfigOp]],
                                        validate_only: bool = False) -> None:
        payload = {r: [{"name": o.name, "config_operation": ALTER_OPS[o.op], "value": o.value} for o in o_list]
                   for r, o_list in ops.items()}
        await self._alter(ApiKey.INCREMENTAL_ALTER_CONFIGS, payload, validate_only)

    # ------------------------------------------------------------------ cluster

    async def describe_cluster(self) -> ClusterDescription:
        async def attempt() -> ClusterDescription:
            cluster = await self._ready()
            conn = await cluster.any()
            if ApiKey.DESCRIBE_CLUSTER in conn.api_versions:
                resp = await conn.request(ApiKey.DESCRIBE_CLUSTER, {"include_cluster_authorized_operations": False,
                                                                    "endpoint_type": 1})
                assert resp is not None
                _check(resp["error_code"], resp.get("error_message"), "DescribeCluster")
                brokers = [Node(b["broker_id"], b["host"], b["port"], b.get("rack")) for b in resp["brokers"]]
                controller_id, cluster_id = resp["controller_id"], resp["cluster_id"]
            else:
                await cluster.refresh([])
                brokers = list(cluster.brokers.values())
                controller_id, cluster_id = cluster.controller_id or -1, cluster.cluster_id
            by_id = {b.id: b for b in brokers}
            return ClusterDescription(cluster_id, by_id.get(controller_id), sorted(brokers, key=lambda b: b.id))
        return await self._call(attempt)

    async def describe_log_dirs(self, brokers: Iterable[int] | None = None
                                ) -> dict[int, dict[str, LogDirDescription]]:
        cluster = await self._ready()
        if brokers is None:
            await cluster.refresh([])
            brokers = sorted(cluster.brokers)
        out: dict[int, dict[str, LogDirDescription]] = {}
        for broker_id in brokers:
            resp = await self._request(To.node(broker_id), ApiKey.DESCRIBE_LOG_DIRS, {"topics": None})
            _check(resp.get("error_code", 0), None, f"DescribeLogDirs on broker {broker_id}")
            dirs = {}
            for d in resp["results"]:
                replicas = {TopicPartition(t["name"], p["partition_index"]):
                            ReplicaInfo(p["partition_size"], p["offset_lag"], p["is_future_key"])
                            for t in d["topics"] for p in t["partitions"]}
                error = _error(d["error_code"], None, d["log_dir"]) if d["error_code"] else None
                total = d.get("total_bytes", -1)
                usable = d.get("usable_bytes", -1)
                dirs[d["log_dir"]] = LogDirDescription(error, replicas, total if total >= 0 else None,
                                                       usable if usable >= 0 else None)
            out[broker_id] = dirs
        return out

    # ------------------------------------------------------------------ offsets / records

    async def list_offsets(self, specs: Mapping[TopicPartition, str | int],
                           isolation_level: str = "read_uncommitted") -> dict[TopicPartition, ListOffsetsResultInfo]:
        """Offsets by spec: "earliest", "latest", "max_timestamp" or a timestamp in ms."""
        timestamps: dict[TopicPartition, int] = {}
        for tp, spec in specs.items():
            if isinstance(spec, str):
                if spec not in OFFSET_SPECS:
                    raise ValueError(f"unknown offset spec {spec!r}; expected earliest, latest, max_timestamp or a timestamp")
                timestamps[tp] = OFFSET_SPECS[spec]
            else:
                timestamps[tp] = int(spec)
        min_version = 7 if -3 in timestamps.values() else (2 if isolation_level != "read_uncommitted" else 1)

        async def send(conn: BrokerConnection, group: list[TopicPartition]) -> dict[TopicPartition, tuple[int, Any]]:
            by_topic: dict[str, list[dict]] = defaultdict(list)
            for tp in group:
                by_topic[tp.topic].append({"partition_index": tp.partition, "current_leader_epoch": -1,
                                           "timestamp": timestamps[tp]})
            body = {"replica_id": -1, "isolation_level": _ISOLATION[isolation_level],
                    "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
                    "timeout_ms": self.request_timeout_ms}
            resp = await conn.request(ApiKey.LIST_OFFSETS, body, min_version=min_version)
            assert resp is not None
            return {TopicPartition(t["name"], p["partition_index"]):
                    (p["error_code"], ListOffsetsResultInfo(p["offset"], p["timestamp"],
                                                            p.get("leader_epoch", -1) if p.get("leader_epoch", -1) >= 0 else None))
                    for t in resp["topics"] for p in t["partitions"]}
        return await self._by_leader(list(timestamps), send)

    async def delete_records(self, before: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Delete the records below each offset (-1: the high watermark); returns the new low watermarks."""
        async def send(conn: BrokerConnection, group: list[TopicPartition]) -> dict[TopicPartition, tuple[int, Any]]:
            by_topic: dict[str, list[dict]] = defaultdict(list)
            for tp in group:
                by_topic[tp.topic].append({"partition_index": tp.partition, "offset": before[tp]})
            body = {"topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
                    "timeout_ms": self.request_timeout_ms}
            resp = await conn.request(ApiKey.DELETE_RECORDS, body)
            assert resp is not None
            return {TopicPartition(t["name"], p["partition_index"]): (p["error_code"], p["low_watermark"])
                    for t in resp["topics"] for p in t["partitions"]}
        return await self._by_leader(list(before), send)

    # ------------------------------------------------------------------ consumer groups

    @staticmethod
    def _raise_first(results: dict[str, Any]) -> None:
        for value in results.values():
            if isinstance(value, BaseException):
                raise value

    async def list_consumer_groups(self, states: Iterable[str] | None = None) -> list[ConsumerGroupListing]:
        """The consumer groups of every broker (ListGroups), sorted by id; ``states`` keeps
        only groups in those states (needs ListGroups v4+). Groups of other protocol types
        (Kafka Connect workers ...) are left out, as in Kafka's admin client."""
        states = [s for s in states or [] if s]
        return await self._list_groups(
            states, [], 4 if states else None,
            lambda g: ConsumerGroupListing(g["group_id"], g["protocol_type"] == "", g.get("group_state"),
                                           g.get("group_type")) if g["protocol_type"] in ("consumer", "") else None)

    async def describe_consumer_groups(self, group_ids: Iterable[str]) -> dict[str, ConsumerGroupDescription]:
        """Group id -> description (DescribeGroups on each coordinator). A group that does not
        exist is described with state "Dead", as Kafka's brokers do."""
        group_ids = list(dict.fromkeys(group_ids))

        async def send(node: Node, conn: BrokerConnection, groups: list[str]) -> dict[str, Any]:
            out: dict[str, Any] = {}
            if ApiKey.CONSUMER_GROUP_DESCRIBE in conn.api_versions:
                # Consumer groups (KIP-848) first, as Java's admin does; the rest are classic groups.
                resp = await conn.request(ApiKey.CONSUMER_GROUP_DESCRIBE,
                                          {"group_ids": groups, "include_authorized_operations": False})
                assert resp is not None
                for g in resp["groups"]:
                    if g["error_code"] == errors.E_GROUP_ID_NOT_FOUND:
                        continue
                    if g["error_code"]:
                        out[g["group_id"]] = _group_error(g["error_code"], g.get("error_message"),
                                                          f"Describing group {g['group_id']}")
                        continue
                    out[g["group_id"]] = _consumer_group(g, node)
                groups = [gid for gid in groups if gid not in out]
                if not groups:
                    return out
            resp = await conn.request(ApiKey.DESCRIBE_GROUPS,
                                      {"groups": groups, "include_authorized_operations": False})
            assert resp is not None
            for g in resp["groups"]:
                if g["error_code"]:
                    out[g["group_id"]] = _group_error(g["error_code"], g.get("error_message"),
                                                      f"Describing group {g['group_id']}")
                    continue
                consumer = g["protocol_type"] == "consumer"
                members = [MemberDescription(m["member_id"], m.get("group_instance_id"), m["client_id"],
                                             m["client_host"],
                                             decode_assignment(m["member_assignment"]) if consumer else [])
                           for m in g["members"]]
                out[g["group_id"]] = ConsumerGroupDescription(
                    g["group_id"], g["protocol_type"] == "", g["group_state"], g["protocol_type"],
                    g["protocol_data"], node, members)
            return out
        results = await self._for_groups(group_ids, send)
        self._raise_first({g: results[g] for g in group_ids})
        return {g: results[g] for g in group_ids}

    async def delete_consumer_groups(self, group_ids: Iterable[str]) -> None:
        """Delete groups with their committed offsets (DeleteGroups): only empty groups can go.
        All are tried; the first failure (in the order given) is raised."""
        group_ids = list(dict.fromkeys(group_ids))

        async def send(node: Node, conn: BrokerConnection, groups: list[str]) -> dict[str, Any]:
            resp = await conn.request(ApiKey.DELETE_GROUPS, {"groups_names": groups})
            assert resp is not None
            return {r["group_id"]: _group_error(r["error_code"], None, f"Deleting group {r['group_id']}")
                    if r["error_code"] else None for r in resp["results"]}
        results = await self._for_groups(group_ids, send)
        self._raise_first({g: results[g] for g in group_ids})

    async def list_consumer_group_offsets(self, group_id: str, partitions: Iterable[TopicPartition] | None = None
                                          ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The group's committed offsets (OffsetFetch), sorted; ``partitions`` limits them to
        those. Partitions without a committed offset are left out."""
        wanted = None if partitions is None else list(dict.fromkeys(partitions))
        topics = None
        if wanted is not None:
            by_topic: dict[str, list[int]] = defaultdict(list)
            for tp in wanted:
                by_topic[tp.topic].append(tp.partition)
            topics = [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()]

        async def send(node: Node, conn: BrokerConnection) -> dict[TopicPartition, OffsetAndMetadata]:
            version = conn.pick_version(ApiKey.OFFSET_FETCH, min_version=2)  # v2+: all topics, group error
            if version >= 8:
                body = {"groups": [{"group_id": group_id, "member_id": None, "member_epoch": -1, "topics": topics}],
                        "require_stable": False}
            else:
                body = {"group_id": group_id, "topics": topics, "require_stable": False}
            resp = await conn.request(ApiKey.OFFSET_FETCH, body, version=version)
            assert resp is not None
            if version >= 8:
                g = next((g for g in resp["groups"] if g["group_id"] == group_id), None)
                if g is None:
                    raise errors.UnknownServerError(f"OffsetFetch answered without group {group_id}")
                code, answer_topics = g["error_code"], g["topics"]
            else:
                code, answer_topics = resp["error_code"], resp["topics"]
            if code:
                raise _group_error(code, None, f"Fetching the offsets of group {group_id}")
            out = {}
            for t in answer_topics:
                for p in t["partitions"]:
                    tp = TopicPartition(t["name"], p["partition_index"])
                    if p["error_code"]:
                        raise _group_error(p["error_code"], None, f"Fetching the offset of {tp} for group {group_id}")
                    if p["committed_offset"] < 0:
                        continue
                    epoch = p.get("committed_leader_epoch", -1)
                    out[tp] = OffsetAndMetadata(p["committed_offset"], p.get("metadata") or "",
                                                epoch if epoch >= 0 else None)
            return dict(sorted(out.items()))
        return await self._for_group(group_id, send)

    async def alter_consumer_group_offsets(self, group_id: str,
                                           offsets: Mapping[TopicPartition, int | OffsetAndMetadata]) -> None:
        """Commit offsets for the group from outside it (OffsetCommit with generation -1 and
        no member id): the coordinator takes them only while the group has no members."""
        by_topic: dict[str, list[dict]] = defaultdict(list)
        for tp, o in offsets.items():
            if not isinstance(o, OffsetAndMetadata):
                o = OffsetAndMetadata(int(o))
            by_topic[tp.topic].append({
                "partition_index": tp.partition, "committed_offset": o.offset,
                "committed_leader_epoch": -1 if o.leader_epoch is None else o.leader_epoch,
                "commit_timestamp": -1, "committed_metadata": o.metadata})
        body = {"group_id": group_id, "generation_id_or_member_epoch": -1, "member_id": "",
                "group_instance_id": None, "retention_time_ms": -1,
                "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}

        async def send(node: Node, conn: BrokerConnection) -> None:
            resp = await conn.request(ApiKey.OFFSET_COMMIT, body, min_version=2)
            assert resp is not None
            failed = [(TopicPartition(t["name"], p["partition_index"]), p["error_code"])
                      for t in resp["topics"] for p in t["partitions"] if p["error_code"]]
            # A coordinator error first, so that the call is sent again to the new coordinator.
            failed.sort(key=lambda f: f[1] not in COORDINATOR_MOVED)
            if failed:
                tp, code = failed[0]
                raise _group_error(code, None, f"Committing the offset of {tp} for group {group_id}")
        if by_topic:
            await self._for_group(group_id, send)

    async def delete_consumer_group_offsets(self, group_id: str, partitions: Iterable[TopicPartition]
                                            ) -> dict[TopicPartition, errors.KafkaError | None]:
        """Delete the group's committed offsets of ``partitions`` (OffsetDelete).

        A failure of the whole request (no such group, ...) raises. Partitions fail one by
        one (GROUP_SUBSCRIBED_TO_TOPIC while the group's members read the topic): the result
        maps each partition to None (deleted, or nothing was committed) or its exception,
        like the per-partition results of Kafka's DeleteConsumerGroupOffsetsResult."""
        by_topic: dict[str, list[dict]] = defaultdict(list)
        for tp in dict.fromkeys(partitions):
            by_topic[tp.topic].append({"partition_index": tp.partition})
        body = {"group_id": group_id, "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}

        async def send(node: Node, conn: BrokerConnection) -> dict[TopicPartition, errors.KafkaError | None]:
            resp = await conn.request(ApiKey.OFFSET_DELETE, body)
            assert resp is not None
            if resp["error_code"]:
                raise _group_error(resp["error_code"], None, f"Deleting offsets of group {group_id}")
            out: dict[TopicPartition, errors.KafkaError | None] = {}
            for t in resp["topics"]:
                for p in t["partitions"]:
                    tp = TopicPartition(t["name"], p["partition_index"])
                    out[tp] = _group_error(p["error_code"], None, f"Deleting the offset of {tp}") \
                        if p["error_code"] else None
            return dict(sorted(out.items()))
        return await self._for_group(group_id, send)


    # ------------------------------------------------------------------ replicas and leaders

    async def elect_leaders(self, partitions: Iterable[TopicPartition] | None, unclean: bool = False
                            ) -> dict[TopicPartition, errors.KafkaError | None]:
        """Preferred (or unclean) leader election; None partitions = every partition."""
        wanted: dict[str, list[int]] | None = None
        if partitions is not None:
            wanted = {}
            for tp in partitions:
                wanted.setdefault(tp.topic, []).append(tp.partition)
        body = {"election_type": 1 if unclean else 0, "timeout_ms": self.request_timeout_ms,
                "topic_partitions": None if wanted is None else
                [{"topic": t, "partitions": ps} for t, ps in wanted.items()]}

        async def attempt() -> dict[TopicPartition, errors.KafkaError | None]:
            resp = await self._send(CONTROLLER, ApiKey.ELECT_LEADERS, body)
            _check(resp.get("error_code", 0), None, "Electing leaders")
            return {TopicPartition(t["topic"], r["partition_id"]):
                    _error(r["error_code"], r.get("error_message")) if r["error_code"] else None
                    for t in resp["replica_election_results"] for r in t["partition_result"]}
        return await self._call(attempt)

    async def alter_partition_reassignments(self, targets: Mapping[TopicPartition, list[int] | None]
                                            ) -> dict[TopicPartition, errors.KafkaError | None]:
        """Start moving partitions to new replica lists (None cancels an ongoing move)."""
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for tp, replicas in targets.items():
            by_topic.setdefault(tp.topic, []).append({"partition_index": tp.partition, "replicas": replicas})
        body = {"timeout_ms": self.request_timeout_ms,
                "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}

        async def attempt() -> dict[TopicPartition, errors.KafkaError | None]:
            resp = await self._send(CONTROLLER, ApiKey.ALTER_PARTITION_REASSIGNMENTS, body)
            _check(resp["error_code"], resp.get("error_message"), "Reassigning partitions")
            return {TopicPartition(t["name"], p["partition_index"]):
                    _error(p["error_code"], p.get("error_message")) if p["error_code"] else None
                    for t in resp["responses"] for p in t["partitions"]}
        return await self._call(attempt)

    async def list_partition_reassignments(self, partitions: Iterable[TopicPartition] | None = None
                                           ) -> dict[TopicPartition, dict[str, list[int]]]:
        """Ongoing reassignments: replicas, adding_replicas, removing_replicas per partition."""
        topics = None
        if partitions is not None:
            grouped: dict[str, list[int]] = {}
            for tp in partitions:
                grouped.setdefault(tp.topic, []).append(tp.partition)
            topics = [{"name": t, "partition_indexes": ps} for t, ps in grouped.items()]

        async def attempt() -> dict[TopicPartition, dict[str, list[int]]]:
            resp = await self._send(CONTROLLER, ApiKey.LIST_PARTITION_REASSIGNMENTS,
                                             {"timeout_ms": self.request_timeout_ms, "topics": topics})
            _check(resp["error_code"], resp.get("error_message"), "Listing reassignments")
            return {TopicPartition(t["name"], p["partition_index"]):
                    {k: list(p[k]) for k in ("replicas", "adding_replicas", "removing_replicas")}
                    for t in resp["topics"] for p in t["partitions"]}
        return await self._call(attempt)

    # ------------------------------------------------------------------ transactions

    async def list_transactions(self, states: Iterable[str] = (), producer_ids: Iterable[int] = (),
                                duration_ms: int = -1) -> dict[int, list[TransactionListing]]:
        """The transactional ids of every broker's coordinator, by broker id (ListTransactions)."""
        body = {"state_filters": list(states), "producer_id_filters": list(producer_ids),
                "duration_filter": duration_ms}

        async def attempt() -> dict[int, list[TransactionListing]]:
            cluster = await self._ready()
            await cluster.refresh([])
            out: dict[int, list[TransactionListing]] = {}
            for node_id in sorted(cluster.brokers):
                resp = await self._send(To.node(node_id), ApiKey.LIST_TRANSACTIONS, body)
                _check(resp["error_code"], None, f"Listing transactions at broker {node_id}")
                out[node_id] = [TransactionListing(t["transactional_id"], t["producer_id"], t["transaction_state"])
                                for t in resp["transaction_states"]]
            return out
        return await self._call(attempt)

    async def describe_transactions(self, transactional_ids: Iterable[str]) -> dict[str, TransactionDescription]:
        """Each id as its coordinator has it (FindCoordinator key type 1, DescribeTransactions)."""
        out: dict[str, TransactionDescription] = {}
        for txn_id in transactional_ids:
            async def attempt(txn_id: str = txn_id) -> TransactionDescription:
                coordinator = await self._coordinator(TRANSACTION, txn_id)
                resp = await self._send(To.node(coordinator.id), ApiKey.DESCRIBE_TRANSACTIONS,
                                        {"transactional_ids": [txn_id]})
                d = resp["transaction_states"][0]
                _check(d["error_code"], None, f"Describing transactional id {txn_id}")
                return TransactionDescription(coordinator.id, d["transaction_state"], d["producer_id"],
                                              d["producer_epoch"], d["transaction_timeout_ms"],
                                              d["transaction_start_time_ms"],
                                              [TopicPartition(t["topic"], p) for t in d["topics"]
                                               for p in t["partitions"]])
            out[txn_id] = await self._call(attempt, COORDINATOR_MOVED)
        return out

    async def fence_producers(self, transactional_ids: Iterable[str]) -> dict[str, FencedProducer]:
        """Fence the producers of each transactional id, as Kafka's Admin.fenceProducers (KIP-618):
        an InitProducerId for the id at its coordinator bumps the id's epoch, aborting its open
        transaction; a producer still using an older epoch is then refused (PRODUCER_FENCED)."""
        out: dict[str, FencedProducer] = {}
        for txn_id in transactional_ids:
            async def attempt(txn_id: str = txn_id) -> FencedProducer:
                # No producer id or epoch of ours, and a timeout of 1 ms: this epoch never writes.
                resp = await self._send(To.coordinator(TRANSACTION, txn_id), ApiKey.INIT_PRODUCER_ID, {
                    "transactional_id": txn_id, "transaction_timeout_ms": 1, "producer_id": -1, "producer_epoch": -1})
                _check(resp["error_code"], None, f"Fencing the producers of transactional id {txn_id}")
                return FencedProducer(resp["producer_id"], resp["producer_epoch"])
            out[txn_id] = await self._call(attempt, _FENCE_RETRY)
        return out

    async def describe_producers(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, list[ProducerState]]:
        """The producers each partition's leader knows (DescribeProducers)."""
        async def send(conn: BrokerConnection, group: list[TopicPartition]) -> dict[TopicPartition, tuple[int, Any]]:
            by_topic: dict[str, list[int]] = defaultdict(list)
            for tp in group:
                by_topic[tp.topic].append(tp.partition)
            resp = await conn.request(ApiKey.DESCRIBE_PRODUCERS, {
                "topics": [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()]})
            assert resp is not None
            return {TopicPartition(t["name"], p["partition_index"]): (p["error_code"], [
                ProducerState(a["producer_id"], a["producer_epoch"], a["last_sequence"], a["last_timestamp"],
                              a["coordinator_epoch"], a["current_txn_start_offset"]) for a in p["active_producers"]])
                for t in resp["topics"] for p in t["partitions"]}
        return await self._by_leader(list(partitions), send)

    async def abort_transaction(self, partition: TopicPartition, producer_id: int, producer_epoch: int,
                                coordinator_epoch: int) -> None:
        """Write an abort marker for the producer's open transaction on ``partition`` (a hanging
        transaction its coordinator no longer knows), as Kafka's Admin.abortTransaction."""
        async def send(conn: BrokerConnection, group: list[TopicPartition]) -> dict[TopicPartition, tuple[int, Any]]:
            resp = await conn.request(ApiKey.WRITE_TXN_MARKERS, {"markers": [{
                "producer_id": producer_id, "producer_epoch": producer_epoch, "transaction_result": False,
                "coordinator_epoch": coordinator_epoch,
                "topics": [{"name": partition.topic, "partition_indexes": [partition.partition]}]}]})
            assert resp is not None
            return {TopicPartition(t["name"], p["partition_index"]): (p["error_code"], None)
                    for m in resp["markers"] for t in m["topics"] for p in t["partitions"]}
        await self._by_leader([partition], send)


class Admin:
    """Blocking admin client: :class:`AsyncAdmin` on a private event loop thread."""

    def __init__(self, config: Mapping[str, Any]):
        self._thread = LoopThread("samsa-admin")
        try:
            self._admin: AsyncAdmin = self._run(self._make(config))
        except BaseException:
            self._thread.stop()
            raise

    @staticmethod
    async def _make(config: Mapping[str, Any]) -> AsyncAdmin:
        return AsyncAdmin(config)

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._thread.run(coro)

    def close(self) -> None:
        if self._thread.closed:
            return
        try:
            self._run(self._admin.close())
        finally:
            self._thread.stop()

    def __enter__(self) -> "Admin":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def create_topics(self, new_topics: Iterable[NewTopic], validate_only: bool = False) -> None:
        return self._run(self._admin.create_topics(list(new_topics), validate_only))

    def delete_topics(self, names: Iterable[str]) -> None:
        return self._run(self._admin.delete_topics(list(names)))

    def list_topics(self, include_internal: bool = False) -> dict[str, TopicListing]:
        return self._run(self._admin.list_topics(include_internal))

    def describe_topics(self, names: Iterable[str]) -> dict[str, TopicDescription]:
        return self._run(self._admin.describe_topics(list(names)))

    def create_partitions(self, new_partitions: Mapping[str, int | NewPartitions], validate_only: bool = False) -> None:
        return self._run(self._admin.create_partitions(new_partitions, validate_only))

    def describe_configs(self, resources: Iterable[ConfigResource], include_synonyms: bool = False
                         ) -> dict[ConfigResource, dict[str, ConfigEntry]]:
        return self._run(self._admin.describe_configs(list(resources), include_synonyms))

    def alter_configs(self, configs: Mapping[ConfigResource, Mapping[str, str | None]],
                      validate_only: bool = False) -> None:
        return self._run(self._admin.alter_configs(configs, validate_only))

    def incremental_alter_configs(self, ops: Mapping[ConfigResource, Iterable[AlterConfigOp]],
                                  validate_only: bool = False) -> None:
        return self._run(self._admin.incremental_alter_configs(ops, validate_only))

    def describe_cluster(self) -> ClusterDescription:
        return self._run(self._admin.describe_cluster())

    def describe_log_dirs(self, brokers: Iterable[int] | None = None) -> dict[int, dict[str, LogDirDescription]]:
        return self._run(self._admin.describe_log_dirs(None if brokers is None else list(brokers)))

    def list_offsets(self, specs: Mapping[TopicPartition, str | int],
                     isolation_level: str = "read_uncommitted") -> dict[TopicPartition, ListOffsetsResultInfo]:
        return self._run(self._admin.list_offsets(specs, isolation_level))

    def delete_records(self, before: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        return self._run(self._admin.delete_records(before))

    def list_consumer_groups(self, states: Iterable[str] | None = None) -> list[ConsumerGroupListing]:
        return self._run(self._admin.list_consumer_groups(None if states is None else list(states)))

    def describe_consumer_groups(self, group_ids: Iterable[str]) -> dict[str, ConsumerGroupDescription]:
        return self._run(self._admin.describe_consumer_groups(list(group_ids)))

    def delete_consumer_groups(self, group_ids: Iterable[str]) -> None:
        return self._run(self._admin.delete_consumer_groups(list(group_ids)))

    def list_consumer_group_offsets(self, group_id: str, partitions: Iterable[TopicPartition] | None = None
                                    ) -> dict[TopicPartition, OffsetAndMetadata]:
        return self._run(self._admin.list_consumer_group_offsets(
            group_id, None if partitions is None else list(partitions)))

    def alter_consumer_group_offsets(self, group_id: str,
                                     offsets: Mapping[TopicPartition, int | OffsetAndMetadata]) -> None:
        return self._run(self._admin.alter_consumer_group_offsets(group_id, dict(offsets)))

    def delete_consumer_group_offsets(self, group_id: str, partitions: Iterable[TopicPartition]
                                      ) -> dict[TopicPartition, errors.KafkaError | None]:
        return self._run(self._admin.delete_consumer_group_offsets(group_id, list(partitions)))

    # share groups (KIP-932)
    def list_share_groups(self, states: Iterable[str] | None = None) -> list[ShareGroupListing]:
        return self._run(self._admin.list_share_groups(None if states is None else list(states)))

    def describe_share_groups(self, group_ids: Iterable[str]) -> dict[str, ShareGroupDescription]:
        return self._run(self._admin.describe_share_groups(list(group_ids)))

    def delete_share_groups(self, group_ids: Iterable[str]) -> dict[str, errors.KafkaError | None]:
        return self._run(self._admin.delete_share_groups(list(group_ids)))

    def list_share_group_offsets(self, group_id: str, partitions: Iterable[TopicPartition] | None = None
                                 ) -> dict[TopicPartition, SharePartitionOffset | errors.KafkaError]:
        return self._run(self._admin.list_share_group_offsets(
            group_id, None if partitions is None else list(partitions)))

    def alter_share_group_offsets(self, group_id: str, offsets: Mapping[TopicPartition, int]
                                  ) -> dict[TopicPartition, errors.KafkaError | None]:
        return self._run(self._admin.alter_share_group_offsets(group_id, dict(offsets)))

    def delete_share_group_offsets(self, group_id: str, topics: Iterable[str]) -> dict[str, errors.KafkaError | None]:
        return self._run(self._admin.delete_share_group_offsets(group_id, list(topics)))

    def list_streams_groups(self, states: Iterable[str] | None = None) -> list[StreamsGroupListing]:
        return self._run(self._admin.list_streams_groups(None if states is None else list(states)))

    def describe_streams_groups(self, group_ids: Iterable[str]) -> dict[str, StreamsGroupDescription]:
        return self._run(self._admin.describe_streams_groups(list(group_ids)))

    def delete_streams_groups(self, group_ids: Iterable[str]) -> dict[str, errors.KafkaError | None]:
        return self._run(self._admin.delete_streams_groups(list(group_ids)))

    def elect_leaders(self, partitions: Iterable[TopicPartition] | None, unclean: bool = False
                      ) -> dict[TopicPartition, errors.KafkaError | None]:
        return self._run(self._admin.elect_leaders(None if partitions is None else list(partitions), unclean))

    def alter_partition_reassignments(self, targets: Mapping[TopicPartition, list[int] | None]
                                      ) -> dict[TopicPartition, errors.KafkaError | None]:
        return self._run(self._admin.alter_partition_reassignments(dict(targets)))

    def list_partition_reassignments(self, partitions: Iterable[TopicPartition] | None = None
                                     ) -> dict[TopicPartition, dict[str, list[int]]]:
        return self._run(self._admin.list_partition_reassignments(
            None if partitions is None else list(partitions)))

    def list_transactions(self, states: Iterable[str] = (), producer_ids: Iterable[int] = (),
                          duration_ms: int = -1) -> dict[int, list[TransactionListing]]:
        return self._run(self._admin.list_transactions(list(states), list(producer_ids), duration_ms))

    def describe_transactions(self, transactional_ids: Iterable[str]) -> dict[str, TransactionDescription]:
        return self._run(self._admin.describe_transactions(list(transactional_ids)))

    def fence_producers(self, transactional_ids: Iterable[str]) -> dict[str, FencedProducer]:
        return self._run(self._admin.fence_producers(list(transactional_ids)))

    def describe_producers(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, list[ProducerState]]:
        return self._run(self._admin.describe_producers(list(partitions)))

    def abort_transaction(self, partition: TopicPartition, producer_id: int, producer_epoch: int,
                          coordinator_epoch: int) -> None:
        return self._run(self._admin.abort_transaction(partition, producer_id, producer_epoch, coordinator_epoch))

    # ---- security (samsa.client.admin_security)

    def create_acls(self, bindings: Iterable[AclBinding]) -> None:
        return self._run(self._admin.create_acls(list(bindings)))

    def describe_acls(self, flt: AclFilter = AclFilter()) -> list[AclBinding]:
        return self._run(self._admin.describe_acls(flt))

    def delete_acls(self, filters: Iterable[AclFilter]) -> list[list[AclBinding]]:
        return self._run(self._admin.delete_acls(list(filters)))

    def describe_user_scram_credentials(self, users: Iterable[str] | None = None) -> dict[str, list[tuple[str, int]]]:
        return self._run(self._admin.describe_user_scram_credentials(None if users is None else list(users)))

    def alter_user_scram_credentials(self, upsertions: Iterable[tuple[str, str, int, str]] = (),
                                     deletions: Iterable[tuple[str, str]] = ()) -> None:
        return self._run(self._admin.alter_user_scram_credentials(list(upsertions), list(deletions)))

    def describe_client_quotas(self, components: Iterable[tuple[str, str | None, bool]] = (),
                               strict: bool = False) -> list[tuple[dict[str, str | None], dict[str, float]]]:
        return self._run(self._admin.describe_client_quotas(list(components), strict))

    def alter_client_quotas(self, changes: Iterable[tuple[QuotaEntity, Mapping[str, float | None]]],
                            validate_only: bool = False) -> None:
        return self._run(self._admin.alter_client_quotas(list(changes), validate_only))
