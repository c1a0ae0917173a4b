"""How a broker takes part in a KRaft cluster: it follows the metadata log and talks to the
active controller (KIP-500, KIP-631).

:class:`KRaftCluster` registers the broker with the controller (BrokerRegistration), sends
its heartbeats (BrokerHeartbeat: how far it has read the log, whether it wants to shut down),
applies every change of the metadata image to the broker (lead, follow, stop hosting, configs),
proposes the ISR changes of the partitions it leads (AlterPartition) and asks the controller
for elections and reassignments. :class:`KRaftMetadataStore` is the broker's metadata store in
such a cluster: it reads the image and sends each write to the controller, which decides it
and writes it to the log. Nothing here watches anything: the image is the only source.

The channel (``samsa.server.kraft_node.MetadataNode``) runs on its own thread; the broker's
loop waits on it, never the other way round.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import uuid
from typing import Any, Callable, Protocol

from samsa.broker_config import BrokerConfig
from samsa.cluster.kraft_image import BROKER, GROUP, NOT_SET, TOPIC, MetadataImage, Registration, protocol_code
from samsa.cluster.metadata import BrokerInfo, PartitionState, TopicExistsError, TopicInfo, describe_error
from samsa.cluster.replica_manager import ReplicaManager
from samsa.protocol import errors
from samsa.protocol.api_keys import ApiKey
from samsa.security.acl import PATTERN_NAMES, RESOURCE_NAMES, AclBinding
from samsa.security.quotas import DEFAULT, QUOTA_KEYS, entity_path, parse_entity_path
from samsa.security.scram import MECHANISM_TYPES, ScramCredential

log = logging.getLogger(__name__)

Advertised = Callable[[], BrokerInfo]


class Channel(Protocol):
    """The metadata side of the node, as the broker uses it (``MetadataNode``)."""
    node_id: int

    @property
    def applied_offset(self) -> int: ...
    @property
    def leader_id(self) -> int: ...
    async def wait_caught_up(self) -> None: ...
    def subscribe(self, loop: asyncio.AbstractEventLoop, callback: Callable[[Any], None]) -> Any: ...
    def read_image(self, fn: Callable[[Any], Any]) -> Any: ...
    async def request(self, api_key: int, body: dict, timeout_ms: int = 30000) -> dict: ...
    def request_sync(self, api_key: int, body: dict, timeout_ms: int = 30000) -> dict: ...


def _raise(code: int, message: str | None) -> None:
    if code:
        raise errors.error_for(code, message or "")


class KRaftMetadataStore:
    """The metadata store of a KRaft broker: reads from the image, writes through the controller."""

    def __init__(self, channel: Channel, cluster_id: str, timeout_ms: int = 30000):
        self.channel = channel
        self.cluster_id = cluster_id
        self.timeout_ms = timeout_ms
        self.broker_epoch: Callable[[], int] = lambda: -1
        # Called (on the broker's loop) when the image's ACLs, or its quotas and credentials, changed.
        self.on_acls: list[Callable[[], None]] = []
        self.on_entities: list[Callable[[], None]] = []

    def _image(self, fn: Callable[[Any], Any]) -> Any:
        return self.channel.read_image(fn)

    def topics(self) -> dict[str, TopicInfo]:
        return self._image(lambda im: copy.deepcopy(im.topics))

    def _send(self, key: int, body: dict) -> dict:
        """A write to the controller, waited for (bounded on the broker's event loop: the channel's)."""
        return self.channel.request_sync(key, body, self.timeout_ms)

    def create_topic(self, topic: TopicInfo) -> None:
        resp = self._send(ApiKey.CREATE_TOPICS, {"topics": [{
            "name": topic.name, "num_partitions": -1, "replication_factor": -1,
            "assignments": [{"partition_index": p, "broker_ids": list(s.replicas)}
                            for p, s in sorted(topic.partitions.items())],
            "configs": [{"name": k, "value": v} for k, v in topic.configs.items()]}],
            "timeout_ms": self.timeout_ms, "validate_only": False})
        t = resp["topics"][0]
        if t["error_code"] == errors.E_TOPIC_ALREADY_EXISTS:
            raise TopicExistsError(topic.name)
        _raise(t["error_code"], t.get("error_message"))
        topic.topic_id = t["topic_id"]          # the controller's

    def put_assignment(self, topic: TopicInfo) -> None:
        """More partitions (CreatePartitions with their assignments)."""
        current = self._image(lambda im: len(im.topics[topic.name].partitions) if topic.name in im.topics else 0)
        added = [list(topic.partitions[p].replicas) for p in sorted(topic.partitions) if p >= current]
        resp = self._send(ApiKey.CREATE_PARTITIONS, {"topics": [{
            "name": topic.name, "count": len(topic.partitions),
            "assignments": [{"broker_ids": r} for r in added]}], "timeout_ms": self.timeout_ms,
            "validate_only": False})
        r = resp["results"][0]
        _raise(r["error_code"], r.get("error_message"))

    def _put_configs(self, rtype: int, rname: str, configs: dict[str, str]) -> None:
        """Replace a resource's overrides: SET the new ones, DELETE those left out."""
        old = self._image(lambda im: dict(im.configs.get((rtype, rname), {})))
        ops = [{"name": k, "config_operation": 0, "value": v} for k, v in configs.items() if old.get(k) != v]
        ops += [{"name": k, "config_operation": 1, "value": None} for k in old if k not in configs]
        if not ops:
            return
        resp = self._send(ApiKey.INCREMENTAL_ALTER_CONFIGS, {"resources": [
            {"resource_type": rtype, "resource_name": rname, "configs": ops}], "validate_only": False})
        r = resp["responses"][0]
        _raise(r["error_code"], r.get("error_message"))

    def put_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        self._put_configs(TOPIC, name, configs)

    def update_partition_state(self, topic: str, partition: int, state: PartitionState) -> bool:
        raise NotImplementedError("a KRaft broker proposes ISR changes with AlterPartition (KRaftCluster)")

    def delete_topic(self, name: str) -> None:
        resp = self._send(ApiKey.DELETE_TOPICS, {"topic_names": [name], "topics": [{"name": name, "topic_id": bytes(16)}],
                                                 "timeout_ms": self.timeout_ms})
        r = resp["responses"][0]
        _raise(r["error_code"], r.get("error_message"))

    def broker_configs(self, broker_id: int | None) -> dict[str, str]:
        return self._image(lambda im: im.broker_configs(broker_id))

    def put_broker_configs(self, broker_id: int | None, configs: dict[str, str]) -> None:
        self._put_configs(BROKER, "" if broker_id is None else str(broker_id), configs)

    def next_producer_id_block(self, size: int) -> int:
        resp = self._send(ApiKey.ALLOCATE_PRODUCER_IDS, {"broker_id": self.channel.node_id,
                                                         "broker_epoch": self.broker_epoch()})
        _raise(resp["error_code"], None)
        if resp["producer_id_len"] < size:
            raise errors.UnknownServerError(f"the controller gave {resp['producer_id_len']} producer ids, {size} wanted")
        return resp["producer_id_start"]

    # ---------------------------------------------------------------- quotas, SCRAM users, group configs

    def entity_configs(self, entity: str) -> dict[str, str]:
        return self.entities().get(entity, {})

    def entities(self) -> dict[str, dict[str, str]]:
        """users/<u>, clients/<c>, users/<u>/clients/<c> (quotas, SCRAM credentials) and groups/<g>
        (group configs), as the other stores name them."""
        return self._image(_entities)

    def put_entity_configs(self, entity: str, configs: dict[str, str]) -> None:
        if entity.startswith("groups/"):
            self._put_configs(GROUP, entity[len("groups/"):], configs)
            return
        old = self.entity_configs(entity)
        ops = [{"key": k, "value": float(v), "remove": False} for k, v in configs.items()
               if k in QUOTA_KEYS and old.get(k) != v]
        ops += [{"key": k, "value": 0.0, "remove": True} for k in old if k in QUOTA_KEYS and k not in configs]
        if not ops:
            return      # SCRAM credentials change through AlterUserScramCredentials, decided by the controller
        user, client = parse_entity_path(entity)
        parts = []
        if user is not None:
            parts.append({"entity_type": "user", "entity_name": None if user == DEFAULT else user})
        if client is not None:
            parts.append({"entity_type": "client-id", "entity_name": None if client == DEFAULT else client})
        resp = self._send(ApiKey.ALTER_CLIENT_QUOTAS, {"entries": [{"entity": parts, "ops": ops}], "validate_only": False})
        r = resp["entries"][0]
        _raise(r["error_code"], r.get("error_message"))

    # ---------------------------------------------------------------- ACLs

    def acls(self) -> list[dict]:
        return self._image(_acls)

    def put_acls(self, resource: tuple[str, str, str], acls: list[dict]) -> None:
        """Make one resource's ACLs ``acls``: CreateAcls for the new ones, DeleteAcls for those gone."""
        kind, pattern, name = resource
        want = {AclBinding.from_entry(kind, pattern, name, e) for e in acls}
        have = {AclBinding.from_entry(r["resource_type"], r["pattern_type"], r["name"], e)
                for r in self.acls() if (r["resource_type"], r["pattern_type"], r["name"]) == resource
                for e in r["acls"]}
        added, gone = sorted(want - have, key=repr), sorted(have - want, key=repr)
        if added:
            resp = self._send(ApiKey.CREATE_ACLS, {"creations": [
                {"resource_type": b.resource_type, "resource_name": b.name, "resource_pattern_type": b.pattern_type,
                 "principal": b.principal, "host": b.host, "operation": b.operation,
                 "permission_type": b.permission} for b in added]})
            for r in resp["results"]:
                _raise(r["error_code"], r.get("error_message"))
        if gone:
            resp = self._send(ApiKey.DELETE_ACLS, {"filters": [
                {"resource_type_filter": b.resource_type, "resource_name_filter": b.name,
                 "pattern_type_filter": b.pattern_type, "principal_filter": b.principal, "host_filter": b.host,
                 "operation": b.operation, "permission_type": b.permission} for b in gone]})
            for r in resp["filter_results"]:
                _raise(r["error_code"], r.get("error_message"))

    def watch_acl_changes(self, callback: Callable[[], None]) -> None:
        self.on_acls.append(callback)

    # ---------------------------------------------------------------- finalized features (KIP-584)

    def features(self) -> tuple[dict[str, int], int]:
        """The image's finalized levels (its FeatureLevelRecords) and, as Kafka's epoch, the offset
        of the metadata log applied."""
        return self._image(lambda im: dict(im.features)), self.channel.applied_offset

    def ensure_features(self, initial: dict[str, int]) -> tuple[dict[str, int], int]:
        return self.features()  # the log holds what format finalized: nothing to write here

    def put_features(self, levels: dict[str, int], epoch: int) -> int | None:
        """UpdateFeatures to the active controller, which decides it by the same rules
        (``ControllerLogic.update_features``) and writes FeatureLevelRecords."""
        current = self._image(lambda im: dict(im.features))
        updates = [{"feature": n, "max_version_level": level, "upgrade_type": 1 if level > current.get(n, 0) else 2}
                   for n, level in sorted(levels.items()) if level != current.get(n, 0)]
        resp = self._send(ApiKey.UPDATE_FEATURES, {"timeout_ms": self.timeout_ms, "feature_updates": updates,
                                                   "validate_only": False})
        _raise(resp["error_code"], resp.get("error_message"))
        return self.channel.applied_offset

    def watch_config_changes(self, callback: Callable[[], None]) -> None:
        self.on_entities.append(callback)

    def close(self) -> None:
        pass


def _number(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else str(v)


def _entities(im: MetadataImage) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for (user, client), quotas in im.quotas.items():
        path = entity_path(None if user is NOT_SET else (DEFAULT if user is None else user),
                           None if client is NOT_SET else (DEFAULT if client is None else client))
        out.setdefault(path, {}).update({k: _number(v) for k, v in quotas.items()})
    names = {v: k for k, v in MECHANISM_TYPES.items()}
    for (user, mech), d in im.scram.items():
        if mech in names:
            out.setdefault(f"users/{user}", {})[names[mech]] = ScramCredential(
                d["salt"], d["stored_key"], d["server_key"], d["iterations"]).to_text()
    for (rtype, name), configs in im.configs.items():
        if rtype == GROUP:
            out[f"groups/{name}"] = dict(configs)
    return out


def _acls(im: MetadataImage) -> list[dict]:
    by_resource: dict[tuple[str, str, str], list[dict]] = {}
    for d in im.acls.values():
        b = AclBinding(d["resource_type"], d["resource_name"], d["pattern_type"], d["principal"], d["host"],
                       d["operation"], d["permission_type"])
        if b.pattern_type not in PATTERN_NAMES or b.resource_type not in RESOURCE_NAMES:
            continue
        by_resource.setdefault(b.resource_key, []).append(b.entry_json())
    return [{"resource_type": k, "pattern_type": p, "name": n, "acls": acls}
            for (k, p, n), acls in sorted(by_resource.items())]


class KRaftCluster:
    replicated = True

    def __init__(self, config: BrokerConfig, channel: Channel, store: KRaftMetadataStore, replicas: ReplicaManager,
                 advertised: Advertised, previous_epoch: int = -1,
                 supported_features: dict[str, tuple[int, int]] | None = None, log_dir_ids: list[bytes] | None = None):
        self.config = config
        self.broker_id = config.broker_id
        self.channel = channel
        self.store = store
        self.replicas = replicas
        self.advertised = advertised
        replicas.isr_writer = self.write_state
        replicas.on_offline = self._partitions_offline
        store.broker_epoch = lambda: self.epoch
        self.alive: dict[int, BrokerInfo] = {}
        self.epoch = -1
        self.previous_epoch = previous_epoch   # of the last clean shutdown (KIP-966), or -1
        self.supported_features = supported_features or {}   # declared at registration: name -> (min, max)
        self.log_dir_ids = log_dir_ids or []                 # the directory ids of meta.properties (KIP-858)
        self.fenced = True
        self.incarnation = uuid.uuid4().bytes
        self._views: list[Any] = []
        self._wake = asyncio.Event()
        self._unfenced = asyncio.Event()
        self._tasks: list[asyncio.Task] = []
        self._want_shut_down = False
        self._stopping = False

    # ---------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        log.info("[BrokerLifecycleManager id=%d] waiting for the metadata log to catch up with the quorum",
                 self.broker_id)
        await self.channel.wait_caught_up()
        full = self.channel.subscribe(loop, self._on_view)
        await self._apply(full, full=True)
        await self._register()
        self._tasks = [asyncio.ensure_future(self._reconcile_forever()),
                       asyncio.ensure_future(self._heartbeats()),
                       asyncio.ensure_future(self._every(self.config["replica.lag.time.max.ms"] / 2,
                                                         self.replicas.shrink_isrs))]
        try:
            await asyncio.wait_for(self._unfenced.wait(), self.config["broker.session.timeout.ms"] / 1000 * 3)
            log.info("[BrokerLifecycleManager id=%d] the controller unfenced this broker (epoch %d)", self.broker_id,
                     self.epoch)
        except asyncio.TimeoutError:
            log.warning("[BrokerLifecycleManager id=%d] still fenced after %d ms; serving anyway, the controller "
                        "unfences it once it has caught up", self.broker_id,
                        self.config["broker.session.timeout.ms"] * 3)

    async def stop(self) -> None:
        self._stopping = True
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _every(self, interval_ms: float, fn: Callable) -> None:
        while True:
            await asyncio.sleep(max(interval_ms, 50) / 1000)
            try:
                await fn()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("cluster task %s failed", getattr(fn, "__name__", fn))

    # ---------------------------------------------------------------- registration and heartbeats

    def _registration(self) -> dict:
        me = self.advertised()
        return {"broker_id": self.broker_id, "cluster_id": self.store.cluster_id, "incarnation_id": self.incarnation,
                "listeners": [{"name": name, "host": host, "port": port,
                               "security_protocol": protocol_code(me.protocols.get(name, "PLAINTEXT"))}
                              for name, (host, port) in me.endpoints.items()],
                "features": [{"name": n, "min_supported_version": lo, "max_supported_version": hi}
                             for n, (lo, hi) in sorted(self.supported_features.items())],
                "rack": me.rack, "is_migrating_zk_broker": False, "log_dirs": list(self.log_dir_ids),
                "previous_broker_epoch": self.epoch if self.epoch >= 0 else self.previous_epoch}

    async def _register(self) -> None:
        while not self._stopping:
            try:
                resp = await self.channel.request(ApiKey.BROKER_REGISTRATION, self._registration())
                if resp["error_code"] == 0:
                    self.epoch = resp["broker_epoch"]
                    self.fenced = True
                    self._unfenced.clear()
                    log.info("[BrokerLifecycleManager id=%d] registered with the controller, broker epoch %d",
                             self.broker_id, self.epoch)
                    return
                log.warning("[BrokerLifecycleManager id=%d] the controller refused the registration: %s",
                            self.broker_id, errors.error_name(resp["error_code"]))
            except errors.KafkaError as e:
                log.warning("[BrokerLifecycleManager id=%d] registration failed: %s", self.broker_id, describe_error(e))
            await asyncio.sleep(self.config["broker.heartbeat.interval.ms"] / 1000)

    async def _heartbeat(self) -> dict:
        return await self.channel.request(ApiKey.BROKER_HEARTBEAT, {
            "broker_id": self.broker_id, "broker_epoch": self.epoch,
            "current_metadata_offset": self.channel.applied_offset, "want_fence": False,
            "want_shut_down": self._want_shut_down, "offline_log_dirs": []},
            self.config["broker.session.timeout.ms"])

    async def _heartbeats(self) -> None:
        interval = self.config["broker.heartbeat.interval.ms"] / 1000
        while True:
            try:
                resp = await self._heartbeat()
                if resp["error_code"] in (errors.E_STALE_BROKER_EPOCH, errors.E_BROKER_ID_NOT_REGISTERED):
                    log.warning("[BrokerLifecycleManager id=%d] heartbeat answered %s: registering again",
                                self.broker_id, errors.error_name(resp["error_code"]))
                    await self._register()
                    continue
                if resp["error_code"] == 0:
                    self._heard(resp)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("[BrokerLifecycleManager id=%d] heartbeat failed: %s", self.broker_id, describe_error(e))
            # a fenced broker asks again soon: it is unfenced as soon as it has caught up
            await asyncio.sleep(interval if not self.fenced else min(interval, 0.2))

    def _heard(self, resp: dict) -> None:
        was = self.fenced
        self.fenced = resp["is_fenced"]
        if self.fenced:
            self._unfenced.clear()
        else:
            self._unfenced.set()
        if was != self.fenced:
            log.info("[BrokerLifecycleManager id=%d] the controller %s this broker", self.broker_id,
                     "fenced" if self.fenced else "unfenced")

    # ---------------------------------------------------------------- the image, applied

    def _on_view(self, view: Any) -> None:
        self._views.append(view)
        self._wake.set()

    async def _reconcile_forever(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            views, self._views = self._views, []
            for view in views:
                try:
                    await self._apply(view)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("applying metadata up to offset %d failed", view.offset)

    async def _apply(self, view: Any, full: bool = False) -> None:
        if view.brokers is not None:
            self._brokers(view.brokers)
        if view.broker_configs is not None:
            self.config.apply_dynamic(view.broker_configs.get(None, {}), view.broker_configs.get(self.broker_id, {}))
            if not full:
                self.replicas.update_log_configs()
        for changed, callbacks in ((view.acls, self.store.on_acls), (view.entities, self.store.on_entities)):
            if changed and not full:
                for fn in callbacks:
                    fn()
        gone = set(view.removed)
        if full:
            gone |= set(self.replicas.cache.topics) - set(view.topics)
        for name in sorted(gone):
            if name in self.replicas.cache.topics:
                await self.replicas.remove_topic_off_loop(name)
        for name, topic in sorted(view.topics.items()):
            before = self.replicas.cache.topics.get(name)
            configs_changed = before is not None and before.configs != topic.configs
            await self.replicas.apply_topic_off_loop(topic)
            if configs_changed:
                self.replicas.update_log_configs([name])

    def _brokers(self, registrations: list[Registration]) -> None:
        inter = self.config.inter_broker_listener
        alive = {r.id: r.info(inter) for r in registrations if not r.fenced}
        if set(alive) != set(self.alive):
            log.info("live (unfenced) brokers: %s", sorted(alive))
        self.alive = alive

    # ---------------------------------------------------------------- the view

    def alive_brokers(self) -> list[BrokerInfo]:
        return sorted(self.alive.values(), key=lambda b: b.id)

    def broker_info(self, broker_id: int) -> BrokerInfo | None:
        return self.alive.get(broker_id)

    @property
    def controller_id(self) -> int:
        """The active controller, as brokers' Metadata answers name it: Kafka 4 names a random
        live broker to clients (they send admin requests to brokers, which forward them)."""
        return self.broker_id

    # ---------------------------------------------------------------- writes through the controller

    async def write_state(self, topic: str, index: int, state: PartitionState) -> bool:
        """AlterPartition: propose the ISR of a partition led here; applied here at once when accepted."""
        info = self.replicas.cache.topics.get(topic)
        if info is None:
            return False
        try:
            resp = await self.channel.request(ApiKey.ALTER_PARTITION, {
                "broker_id": self.broker_id, "broker_epoch": self.epoch,
                "topics": [{"topic_name": topic, "topic_id": info.topic_id, "partitions": [{
                    "partition_index": index, "leader_epoch": state.leader_epoch,
                    "new_isr": list(state.isr),
                    "new_isr_with_epochs": [{"broker_id": b, "broker_epoch": -1} for b in state.isr],
                    "leader_recovery_state": 0, "partition_epoch": state.partition_epoch}]}]},
                self.config["controller.quorum.request.timeout.ms"] * 5)
        except errors.KafkaError as e:
            log.warning("AlterPartition of %s-%d failed: %s", topic, index, describe_error(e))
            return False
        if resp["error_code"]:
            log.info("AlterPartition of %s-%d refused: %s", topic, index, errors.error_name(resp["error_code"]))
            return False
        p = resp["topics"][0]["partitions"][0]
        if p["error_code"]:
            log.info("AlterPartition of %s-%d refused: %s", topic, index, errors.error_name(p["error_code"]))
            return False
        state.isr = list(p["isr"])
        state.partition_epoch = p["partition_epoch"]
        state.leader, state.leader_epoch = p["leader_id"], p["leader_epoch"]
        info = self.replicas.cache.topics.get(topic)
        if info is not None and index in info.partitions and info.partitions[index].partition_epoch < state.partition_epoch:
            info.partitions[index] = state
            self.replicas.apply_partition(topic, index, state)
        return True

    async def elect_leaders(self, partitions: list[tuple[str, int]], preferred: bool) -> dict[tuple[str, int], int]:
        by_topic: dict[str, list[int]] = {}
        for t, i in partitions:
            by_topic.setdefault(t, []).append(i)
        resp = await self.channel.request(ApiKey.ELECT_LEADERS, {
            "election_type": 0 if preferred else 1,
            "topic_partitions": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()], "timeout_ms": 30000})
        _raise(resp["error_code"], None)
        return {(r["topic"], p["partition_id"]): p["error_code"]
                for r in resp["replica_election_results"] for p in r["partition_result"]}

    async def reassign(self, topic: str, index: int, target: list[int] | None) -> None:
        resp = await self.channel.request(ApiKey.ALTER_PARTITION_REASSIGNMENTS, {
            "timeout_ms": 30000, "topics": [{"name": topic, "partitions": [
                {"partition_index": index, "replicas": target}]}]})
        _raise(resp["error_code"], resp.get("error_message"))
        p = resp["responses"][0]["partitions"][0]
        _raise(p["error_code"], p.get("error_message"))

    # ---------------------------------------------------------------- controlled shutdown

    async def controlled_shutdown(self) -> None:
        """Heartbeats that want to shut down, until the controller has moved leadership off this
        broker (``should_shut_down``); bounded by ``broker.session.timeout.ms`` in all (after that
        the controller fences it anyway: a quorum that cannot commit cannot move anything)."""
        self._want_shut_down = True
        if not set(self.alive) - {self.broker_id}:
            log.info("controlled shutdown of broker %d: no other live broker to move leadership to", self.broker_id)
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config["broker.session.timeout.ms"] / 1000
        interval = self.config["broker.heartbeat.interval.ms"] / 1000
        while loop.time() < deadline:
            try:
                resp = await asyncio.wait_for(self._heartbeat(), max(deadline - loop.time(), 0.01))
                if resp["error_code"] == 0 and resp["should_shut_down"]:
                    log.info("controlled shutdown of broker %d: leadership moved", self.broker_id)
                    return
            except (errors.KafkaError, asyncio.TimeoutError) as e:
                log.warning("controlled shutdown of broker %d: %s", self.broker_id, describe_error(e))
            await asyncio.sleep(min(interval, 0.2))
        log.warning("controlled shutdown of broker %d did not complete within broker.session.timeout.ms (%d ms); "
                    "shutting down anyway", self.broker_id, self.config["broker.session.timeout.ms"])

    def _partitions_offline(self, keys: list[tuple[str, int]]) -> None:
        log.warning("partitions %s went offline here (their log dir failed); the controller moves them once this "
                    "broker is fenced", keys)
