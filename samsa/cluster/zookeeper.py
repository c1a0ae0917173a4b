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

``zookeeper.connect`` may name several servers and a chroot (``h1:2181,h2:2181/kafka``);
the chroot is created when missing, as Kafka does.
"""

from __future__ import annotations

import base64
import json
import logging
import time
import uuid

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from samsa.cluster.metadata import BrokerInfo, PartitionState, TopicInfo

log = logging.getLogger(__name__)


class DuplicateBrokerIdError(RuntimeError):
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
            root = KazooClient(hosts=hosts, timeout=session_timeout_ms / 1000)
            root.start(timeout=timeout)
            root.ensure_path("/" + chroot)
            root.stop()
            root.close()
        self.zk = KazooClient(hosts=connect, timeout=session_timeout_ms / 1000)
        self.zk.start(timeout=timeout)
        for path in ("/brokers/ids", "/brokers/topics", "/config/topics", "/config/brokers", "/admin/delete_topics"):
            self.zk.ensure_path(path)
        self.cluster_id = self._cluster_id()

    def _cluster_id(self) -> str:
        new = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        try:
            self.zk.create("/cluster/id", _json({"version": "1", "id": new}), makepath=True)
            return new
        except NodeExistsError:
            data, _ = self.zk.get("/cluster/id")
            return json.loads(data)["id"]

    # ---------------------------------------------------------------- brokers

    def register_broker(self, broker: BrokerInfo, endpoints: list[str]) -> None:
        """Ephemeral /brokers/ids/<id>; a live broker with the same id is a start-up error."""
        data = {"listener_security_protocol_map": {"PLAINTEXT": "PLAINTEXT"}, "endpoints": endpoints,
                "jmx_port": -1, "features": {}, "host": broker.host, "timestamp": str(int(time.time() * 1000)),
                "port": broker.port, "version": 5, "rack": broker.rack}
        try:
            self.zk.create(f"/brokers/ids/{broker.id}", _json(data), ephemeral=True)
        except NodeExistsError:
            raise DuplicateBrokerIdError(
                f"Error while creating ephemeral at /brokers/ids/{broker.id}, node already exists: "
                f"another broker is registered with broker.id={broker.id}") from None

    def brokers(self) -> list[BrokerInfo]:
        out = []
        for child in self.zk.get_children("/brokers/ids"):
            try:
                data, _ = self.zk.get(f"/brokers/ids/{child}")
            except NoNodeError:
                continue
            d = json.loads(data)
            out.append(BrokerInfo(int(child), d.get("host", ""), d.get("port", -1), d.get("rack")))
        return sorted(out, key=lambda b: b.id)

    # ---------------------------------------------------------------- topics

    def topics(self) -> dict[str, TopicInfo]:
        out = {}
        for name in self.zk.get_children("/brokers/topics"):
            topic = self.topic(name)
            if topic is not None:
                out[name] = topic
        return out

    def topic(self, name: str) -> TopicInfo | None:
        try:
            data, _ = self.zk.get(f"/brokers/topics/{name}")
        except NoNodeError:
            return None
        d = json.loads(data)
        partitions = {}
        for p, replicas in d["partitions"].items():
            state = self.partition_state(name, int(p))
            partitions[int(p)] = state or PartitionState(replicas=replicas, leader=-1, isr=[])
            partitions[int(p)].replicas = replicas
        try:
            cdata, _ = self.zk.get(f"/config/topics/{name}")
            configs = json.loads(cdata).get("config", {})
        except NoNodeError:
            configs = {}
        return TopicInfo(name, _id_bytes(d["topic_id"]) if d.get("topic_id") else uuid.uuid4().bytes,
                         partitions, configs)

    def partition_state(self, topic: str, partition: int) -> PartitionState | None:
        try:
            data, stat = self.zk.get(f"/brokers/topics/{topic}/partitions/{partition}/state")
        except NoNodeError:
            return None
        d = json.loads(data)
        return PartitionState(replicas=[], leader=d["leader"], leader_epoch=d["leader_epoch"], isr=d["isr"],
                              partition_epoch=stat.version)

    def put_topic(self, topic: TopicInfo) -> None:
        assignment = {"version": 3, "topic_id": _id_str(topic.topic_id),
                      "partitions": {str(p): s.replicas for p, s in sorted(topic.partitions.items())},
                      "adding_replicas": {}, "removing_replicas": {}}
        path = f"/brokers/topics/{topic.name}"
        tx = self.zk.transaction()
        if self.zk.exists(path):
            tx.set_data(path, _json(assignment))
        else:
            tx.create(path, _json(assignment))
        config_path = f"/config/topics/{topic.name}"
        config = _json({"version": 1, "config": topic.configs})
        if self.zk.exists(config_path):
            tx.set_data(config_path, config)
        else:
            tx.create(config_path, config)
        self._check(tx.commit(), path)
        for p, state in topic.partitions.items():
            self._write_state(topic.name, p, state, expected_version=None)

    def _write_state(self, topic: str, partition: int, state: PartitionState, expected_version: int | None) -> None:
        path = f"/brokers/topics/{topic}/partitions/{partition}/state"
        data = _json({"controller_epoch": 1, "leader": state.leader, "version": 1,
                      "leader_epoch": state.leader_epoch, "isr": state.isr})
        if expected_version is None:
            if self.zk.exists(path):
                stat = self.zk.set(path, data)
            else:
                self.zk.create(path, data, makepath=True)
                stat = self.zk.exists(path)
        else:
            stat = self.zk.set(path, data, version=expected_version)
        state.partition_epoch = stat.version

    def update_partition_state(self, topic: str, partition: int, state: PartitionState) -> bool:
        """Compare-and-set on the state's ZooKeeper version (ISR changes, elections)."""
        try:
            self._write_state(topic, partition, state, expected_version=state.partition_epoch)
            return True
        except BadVersionError:
            return False

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

    # ---------------------------------------------------------------- controller

    def try_become_controller(self, broker_id: int) -> bool:
        try:
            self.zk.create("/controller", _json({"version": 2, "brokerid": broker_id,
                                                 "timestamp": str(int(time.time() * 1000))}), ephemeral=True)
            return True
        except NodeExistsError:
            return False

    def controller_id(self) -> int:
        try:
            data, _ = self.zk.get("/controller")
        except NoNodeError:
            return -1
        return json.loads(data)["brokerid"]

    def close(self) -> None:
        self.zk.stop()
        self.zk.close()
