"""Cluster metadata in ZooKeeper, under Kafka's own paths, through kazoo.

The same :class:`~samsa.cluster.metadata.MetadataStore` interface as the local file store,
plus what only a shared store has: broker registration (ephemeral ``/brokers/ids/<id>``)
and the controller election node. Layout, as Kafka writes it::

    /cluster/id                                  {"version":"1","id":...}
    /brokers/ids/<id>                            ephemeral, endpoints of a live broker
    /brokers/topics/<topic>                      {"version":3,"topic_id":...,"partitions":{"0":[0,1,2]}}
    /brokers/topics/<topic>/partitions/<p>/state {"controller_epoch":..,"leader":..,"leader_epoch":..,"isr":[..],"version":1}
    /config/topics/<topic>                       {"version":1,"config":{...}}
    /config/brokers/<id> | <default>             {"version":1,"config":{...}}
    /controller                                  ephemeral {"version":2,"brokerid":..,"timestamp":..}
    /latest_producer_id_block                    {"version":1,"broker":..,"block_start":..,"block_end":..}
    /feature                                     {"version":2,"status":1,"features":{"transaction.version":{"max_version_level":2},..}}

``zookeeper.connect`` may name several servers and a chroot (``h1:2181,h2:2181/kafka``);
the chroot is created when missing, as Kafka does.
"""

from __future__ import annotations

import base64
import json
import re
import logging
import threading
import time
import uuid
from typing import Callable

from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.protocol.states import WatchedEvent

from samsa.cluster.metadata import BrokerInfo, PartitionState, TopicExistsError, TopicInfo

log = logging.getLogger(__name__)


Watcher = Callable[[WatchedEvent], None]


class ZooKeeperError(RuntimeError):
    """The broker cannot take its place in the cluster (start-up fails with this message)."""


class DuplicateBrokerIdError(ZooKeeperError):
    """Another live broker is registered with this broker.id."""


def _json(data: dict) -> bytes:
    return json.dumps(data, separators=(",", ":")).encode()


def _id_str(topic_id: bytes) -> str:
    return base64.urlsafe_b64encode(topic_id).decode().rstrip("=")


def _id_bytes(s: str) -> bytes:
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


class ZooKeeperMetadataStore:
    def __init__(self, connect: str, *, session_timeout_ms: int = 18000, connection_timeout_ms: int | None = None):
        hosts, _, chroot = connect.partition("/")
        timeout = (connection_timeout_ms or session_timeout_ms) / 1000
        if chroot:
            root = self._connect(hosts, session_timeout_ms, timeout)
            root.ensure_path("/" + chroot)
            root.stop()
            root.close()
        self.zk = self._connect(connect, session_timeout_ms, timeout)
        for path in ("/brokers/ids", "/brokers/topics", "/config/topics", "/config/brokers", "/admin/delete_topics"):
            self.zk.ensure_path(path)
        self.cluster_id = self._cluster_id()

    @staticmethod
    def _connect(hosts: str, session_timeout_ms: int, timeout_s: float) -> KazooClient:
        zk = KazooClient(hosts=hosts, timeout=session_timeout_ms / 1000)
        try:
            zk.start(timeout=timeout_s)
        except KazooTimeoutError:
            zk.close()
            raise ZooKeeperError(f"Timed out waiting for connection to ZooKeeper at {hosts} "
                                 f"(zookeeper.connection.timeout.ms={int(timeout_s * 1000)})") from None
        return zk

    def _cluster_id(self) -> str:
        new = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        try:
            self.zk.create("/cluster/id", _json({"version": "1", "id": new}), makepath=True)
            return new
        except NodeExistsError:
            data, _ = self.zk.get("/cluster/id")
            return json.loads(data)["id"]

    # ---------------------------------------------------------------- brokers

    def register_broker(self, broker: BrokerInfo, endpoints: list[str], wait_s: float = 0.0) -> int:
        """Ephemeral /brokers/ids/<id>; returns the broker epoch (the node's czxid, KIP-380).

        A node left by this broker's previous life (killed before its session ended) names
        the endpoints this process has just bound, so no live broker can own it: it is
        replaced at once, and the new czxid tells the controller this is a new life. A node
        with other endpoints is another live broker with this id: wait up to ``wait_s`` for
        it to go, then fail.
        """
        protocols = broker.protocols or {"PLAINTEXT": "PLAINTEXT"}
        data = {"listener_security_protocol_map": protocols, "endpoints": endpoints,
                "jmx_port": -1, "features": {}, "host": broker.host, "timestamp": str(int(time.time() * 1000)),
                "port": broker.port, "version": 5, "rack": broker.rack}
        path = f"/brokers/ids/{broker.id}"
        deadline = time.monotonic() + wait_s
        while True:
            try:
                self.zk.create(path, _json(data), ephemeral=True)
                return self.zk.exists(path).czxid
            except NodeExistsError:
                pass
            try:
                existing, stat = self.zk.get(path)
            except NoNodeError:
                continue
            if stat.ephemeralOwner == self.zk.client_id[0]:
                return stat.czxid
            if json.loads(existing).get("endpoints") == endpoints:
                log.info("replacing the registration of broker %d's previous life (session 0x%x), "
                         "which still names this broker's endpoints %s", broker.id, stat.ephemeralOwner, endpoints)
                try:
                    self.zk.delete(path, version=stat.version)
                except (NoNodeError, BadVersionError):
                    pass
                continue
            if time.monotonic() >= deadline:
                raise DuplicateBrokerIdError(
                    f"Error while creating ephemeral at {path}, node already exists: "
                    f"another broker is registered with broker.id={broker.id}")
            time.sleep(0.2)

    def unregister_broker(self, broker_id: int) -> None:
        try:
            self.zk.delete(f"/brokers/ids/{broker_id}")
        except NoNodeError:
            pass

    def brokers(self, watch: Watcher | None = None) -> list[BrokerInfo]:
        out = []
        for child in self.zk.get_children("/brokers/ids", watch=watch):
            try:
                data, stat = self.zk.get(f"/brokers/ids/{child}")
            except NoNodeError:
                continue
            d = json.loads(data)
            endpoints = {}
            for e in d.get("endpoints") or []:
                m = re.fullmatch(r"([A-Za-z0-9_]+)://\[?(.*?)\]?:(\d+)", e)
                if m:
                    endpoints[m.group(1)] = (m.group(2), int(m.group(3)))
            out.append(BrokerInfo(int(child), d.get("host") or "", d.get("port", -1), d.get("rack"), epoch=stat.czxid,
                                  endpoints=endpoints, protocols=dict(d.get("listener_security_protocol_map") or {})))
        return sorted(out, key=lambda b: b.id)

    # ---------------------------------------------------------------- topics

    def topic_names(self, watch: Watcher | None = None) -> list[str]:
        return self.zk.get_children("/brokers/topics", watch=watch)

    def topics(self) -> dict[str, TopicInfo]:
        out = {}
        for name in self.topic_names():
            topic = self.topic(name)
            if topic is not None:
                out[name] = topic
        return out

    def topic(self, name: str, watch: Watcher | None = None) -> TopicInfo | None:
        """The topic with its partition states; ``watch`` fires on a change of any of them."""
        try:
            data, _ = self.zk.get(f"/brokers/topics/{name}", watch=watch)
        except NoNodeError:
            return None
        d = json.loads(data)
        adding, removing = d.get("adding_replicas") or {}, d.get("removing_replicas") or {}
        partitions = {}
        for p, replicas in d["partitions"].items():
            state = self.partition_state(name, int(p), watch) or PartitionState(replicas=[], leader=-1, isr=[],
                                                                               partition_epoch=-1)
            state.replicas = replicas
            state.adding_replicas = adding.get(p, [])
            state.removing_replicas = removing.get(p, [])
            partitions[int(p)] = state
        try:
            cdata, _ = self.zk.get(f"/config/topics/{name}", watch=watch)
            configs = json.loads(cdata).get("config", {})
        except NoNodeError:
            configs = {}
        return TopicInfo(name, _id_bytes(d["topic_id"]) if d.get("topic_id") else uuid.uuid4().bytes,
                         partitions, configs)

    def partition_state(self, topic: str, partition: int, watch: Watcher | None = None) -> PartitionState | None:
        path = f"/brokers/topics/{topic}/partitions/{partition}/state"
        try:
            data, stat = self.zk.get(path, watch=watch)
        except NoNodeError:
            if watch is not None:
                self.zk.exists(path, watch=watch)
            return None
        d = json.loads(data)
        return PartitionState(replicas=[], leader=d["leader"], leader_epoch=d["leader_epoch"], isr=d["isr"],
                              partition_epoch=stat.version)

    @staticmethod
    def _assignment(topic: TopicInfo) -> bytes:
        parts = sorted(topic.partitions.items())
        return _json({"version": 3, "topic_id": _id_str(topic.topic_id),
                      "partitions": {str(p): s.replicas for p, s in parts},
                      "adding_replicas": {str(p): s.adding_replicas for p, s in parts if s.adding_replicas},
                      "removing_replicas": {str(p): s.removing_replicas for p, s in parts if s.removing_replicas}})

    @staticmethod
    def _state(state: PartitionState) -> bytes:
        return _json({"controller_epoch": 1, "leader": state.leader, "version": 1,
                      "leader_epoch": state.leader_epoch, "isr": state.isr})

    def create_topic(self, topic: TopicInfo) -> None:
        """Assignment, configs and every partition's state in one transaction."""
        base = f"/brokers/topics/{topic.name}"
        tx = self.zk.transaction()
        tx.create(base, self._assignment(topic))
        tx.create(f"{base}/partitions")
        for p, state in sorted(topic.partitions.items()):
            tx.create(f"{base}/partitions/{p}")
            tx.create(f"{base}/partitions/{p}/state", self._state(state))
        config_path = f"/config/topics/{topic.name}"
        if self.zk.exists(config_path):
            tx.set_data(config_path, _json({"version": 1, "config": topic.configs}))
        else:
            tx.create(config_path, _json({"version": 1, "config": topic.configs}))
        results = tx.commit()
        if isinstance(results[0], NodeExistsError):
            raise TopicExistsError(topic.name)
        self._check(results, base)
        for state in topic.partitions.values():
            state.partition_epoch = 0

    put_topic = create_topic

    def put_assignment(self, topic: TopicInfo) -> None:
        """Replicas (and reassignment) of every partition; states of new partitions."""
        self.zk.set(f"/brokers/topics/{topic.name}", self._assignment(topic))
        for p, state in topic.partitions.items():
            path = f"/brokers/topics/{topic.name}/partitions/{p}/state"
            if not self.zk.exists(path):
                self.zk.create(path, self._state(state), makepath=True)
                state.partition_epoch = 0

    def put_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        self.zk.set(f"/config/topics/{name}", _json({"version": 1, "config": configs}))

    def update_partition_state(self, topic: str, partition: int, state: PartitionState) -> bool:
        """Compare-and-set on the state's ZooKeeper version (ISR changes, elections)."""
        path = f"/brokers/topics/{topic}/partitions/{partition}/state"
        try:
            stat = self.zk.set(path, self._state(state), version=state.partition_epoch)
        except (BadVersionError, NoNodeError):
            return False
        state.partition_epoch = stat.version
        return True

    def delete_topic(self, name: str) -> None:
        for path in (f"/brokers/topics/{name}", f"/config/topics/{name}"):
            try:
                self.zk.delete(path, recursive=True)
            except NoNodeError:
                pass

    @staticmethod
    def _check(results: list, path: str) -> None:
        for r in results:
            if isinstance(r, Exception):
                raise RuntimeError(f"ZooKeeper transaction on {path} failed: {r!r}")

    # ---------------------------------------------------------------- configs and producer ids

    def broker_configs(self, broker_id: int | None) -> dict[str, str]:
        try:
            data, _ = self.zk.get(f"/config/brokers/{'<default>' if broker_id is None else broker_id}")
        except NoNodeError:
            return {}
        return dict(json.loads(data).get("config", {}))

    def put_broker_configs(self, broker_id: int | None, configs: dict[str, str]) -> None:
        path = f"/config/brokers/{'<default>' if broker_id is None else broker_id}"
        data = _json({"version": 1, "config": configs})
        if self.zk.exists(path):
            self.zk.set(path, data)
        else:
            self.zk.create(path, data, makepath=True)

    # ---------------------------------------------------------------- users and clients

    def entity_configs(self, entity: str) -> dict[str, str]:
        """``/config/users/<user>``, ``/config/clients/<id>``, ``/config/users/<u>/clients/<id>``:
        SCRAM credentials (salted and hashed) and quotas, as Kafka keeps them."""
        try:
            data, _ = self.zk.get(f"/config/{entity}")
        except NoNodeError:
            return {}
        return dict(json.loads(data).get("config", {})) if data else {}

    def put_entity_configs(self, entity: str, configs: dict[str, str]) -> None:
        path = f"/config/{entity}"
        data = _json({"version": 1, "config": configs})
        if self.zk.exists(path):
            self.zk.set(path, data)
        else:
            self.zk.create(path, data, makepath=True)
        self.zk.create("/config/changes/config_change_", _json({"version": 2, "entity_path": entity}),
                       sequence=True, makepath=True)

    def entities(self) -> dict[str, dict[str, str]]:
        """Every user, client and user/client entity with configs."""
        out: dict[str, dict[str, str]] = {}
        for kind in ("users", "clients"):
            try:
                names = self.zk.get_children(f"/config/{kind}")
            except NoNodeError:
                continue
            for name in names:
                configs = self.entity_configs(f"{kind}/{name}")
                if configs:
                    out[f"{kind}/{name}"] = configs
                if kind == "users":
                    try:
                        clients = self.zk.get_children(f"/config/users/{name}/clients")
                    except NoNodeError:
                        continue
                    for client in clients:
                        configs = self.entity_configs(f"users/{name}/clients/{client}")
                        if configs:
                            out[f"users/{name}/clients/{client}"] = configs
        return out

    # ---------------------------------------------------------------- ACLs

    @staticmethod
    def _acl_path(resource: tuple[str, str, str]) -> str:
        kind, pattern, name = resource
        return f"/kafka-acl/{kind}/{name}" if pattern == "LITERAL" else f"/kafka-acl-extended/prefixed/{kind}/{name}"

    def acls(self) -> list[dict]:
        """Every resource's ACLs, from Kafka's znodes (literal and prefixed)."""
        out = []
        for root, pattern in (("/kafka-acl", "LITERAL"), ("/kafka-acl-extended/prefixed", "PREFIXED")):
            try:
                kinds = self.zk.get_children(root)
            except NoNodeError:
                continue
            for kind in kinds:
                for name in self.zk.get_children(f"{root}/{kind}"):
                    try:
                        data, _ = self.zk.get(f"{root}/{kind}/{name}")
                    except NoNodeError:
                        continue
                    acls = json.loads(data).get("acls", []) if data else []
                    if acls:
                        out.append({"resource_type": kind, "pattern_type": pattern, "name": name, "acls": acls})
        return out

    def put_acls(self, resource: tuple[str, str, str], acls: list[dict]) -> None:
        """Write one resource's ACLs and the change notification every broker watches."""
        path = self._acl_path(resource)
        if acls:
            data = _json({"version": 1, "acls": acls})
            if self.zk.exists(path):
                self.zk.set(path, data)
            else:
                self.zk.create(path, data, makepath=True)
        else:
            try:
                self.zk.delete(path)
            except NoNodeError:
                pass
        kind, pattern, name = resource
        if pattern == "LITERAL":
            self.zk.create("/kafka-acl-changes/acl_changes_", f"{kind}:{name}".encode(), sequence=True, makepath=True)
        else:
            self.zk.create("/kafka-acl-extended-changes/acl_changes_", _json(
                {"version": 1, "resourceType": kind, "name": name, "patternType": pattern}), sequence=True,
                makepath=True)

    def watch_acl_changes(self, callback: Callable[[], None]) -> None:
        """``callback`` (on kazoo's thread) after any ACL change notification, and once now."""
        for path in ("/kafka-acl-changes", "/kafka-acl-extended-changes"):
            self.zk.ensure_path(path)
            self.zk.ChildrenWatch(path, lambda children: callback() or True)

    def watch_config_changes(self, callback: Callable[[], None]) -> None:
        """``callback`` (on kazoo's thread) after any entity config change notification
        (users, clients: quotas and SCRAM credentials), and once now."""
        self.zk.ensure_path("/config/changes")
        self.zk.ChildrenWatch("/config/changes", lambda children: callback() or True)

    def config_changes(self, watch: Watcher | None = None) -> list[str]:
        """The change notifications (``/config/changes``), to watch for new users and quotas."""
        try:
            return self.zk.get_children("/config/changes", watch=watch)
        except NoNodeError:
            self.zk.ensure_path("/config/changes")
            return self.zk.get_children("/config/changes", watch=watch)

    def next_producer_id_block(self, size: int) -> int:
        """Claim [start, start + size) with a version-checked update, as Kafka's ProducerIdManager."""
        path = "/latest_producer_id_block"
        while True:
            try:
                data, stat = self.zk.get(path)
            except NoNodeError:
                try:
                    self.zk.create(path, _json({"version": 1, "broker": -1, "block_start": "0",
                                                "block_end": str(size - 1)}))
                    return 0
                except NodeExistsError:
                    continue
            start = int(json.loads(data)["block_end"]) + 1 if data else 0
            try:
                self.zk.set(path, _json({"version": 1, "broker": -1, "block_start": str(start),
                                         "block_end": str(start + size - 1)}), version=stat.version)
                return start
            except BadVersionError:
                continue

    # ---------------------------------------------------------------- finalized features (KIP-584)

    @staticmethod
    def _features(data: bytes, stat) -> tuple[dict[str, int], int]:
        """Kafka's FeatureZNode (version 2: a feature absent is not finalized, level 0); the epoch
        is the znode's version, as in Kafka's ZooKeeper mode."""
        d = json.loads(data) if data else {}
        levels = {name: int(v["max_version_level"]) for name, v in (d.get("features") or {}).items()}
        return levels, stat.version

    def features(self) -> tuple[dict[str, int], int] | None:
        try:
            return self._features(*self.zk.get("/feature"))
        except NoNodeError:
            return None

    @staticmethod
    def _feature_node(levels: dict[str, int]) -> bytes:
        return _json({"version": 2, "status": 1, "features": {name: {"max_version_level": level}
                                                              for name, level in sorted(levels.items()) if level > 0}})

    def ensure_features(self, initial: dict[str, int]) -> tuple[dict[str, int], int]:
        """The cluster's finalized levels: ``initial`` written by the first broker to start."""
        try:
            self.zk.create("/feature", self._feature_node(initial))
        except NodeExistsError:
            pass
        return self.features()  # type: ignore[return-value]

    def put_features(self, levels: dict[str, int], epoch: int) -> int | None:
        """Compare-and-set on the znode's version: the new epoch, or None if another broker
        changed the features since ``epoch`` was read."""
        try:
            return self.zk.set("/feature", self._feature_node(levels), version=epoch).version
        except (BadVersionError, NoNodeError):
            return None

    def watch_features(self, callback: Callable[[dict[str, int], int], None]) -> None:
        """``callback(levels, epoch)`` (on kazoo's thread) now and after every change of /feature."""
        def changed(data, stat, event=None):
            if stat is not None:
                callback(*self._features(data, stat))
        self.zk.DataWatch("/feature", changed)

    # ---------------------------------------------------------------- controller

    def try_become_controller(self, broker_id: int) -> bool:
        try:
            self.zk.create("/controller", _json({"version": 2, "brokerid": broker_id,
                                                 "timestamp": str(int(time.time() * 1000))}), ephemeral=True)
            return True
        except NodeExistsError:
            return False

    def controller_id(self, watch: Watcher | None = None) -> int:
        try:
            data, _ = self.zk.get("/controller", watch=watch)
        except NoNodeError:
            if watch is not None and self.zk.exists("/controller", watch=watch):
                return self.controller_id()
            return -1
        return json.loads(data)["brokerid"]

    def close(self, timeout_s: float = 10.0) -> None:
        """End the session (its ephemeral nodes go at once), waiting at most ``timeout_s``:
        with ZooKeeper unreachable kazoo may wait for ever, and shutdown must go on."""
        def stop() -> None:
            self.zk.stop()
            self.zk.close()
        closer = threading.Thread(target=stop, name="zookeeper-close", daemon=True)
        closer.start()
        closer.join(timeout_s)
