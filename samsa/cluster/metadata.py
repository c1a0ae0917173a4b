"""What the cluster is: brokers, topics, partition assignments and partition state.

The model is backend-neutral. A :class:`MetadataStore` persists it: the embedded default
keeps it in a local file (:class:`LocalMetadataStore`); clusters keep it in ZooKeeper
behind the same interface.
"""

from __future__ import annotations

import json
import os
import threading
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Protocol

from samsa.configdef import ConfigError
from samsa.protocol.errors import KafkaStorageError



@dataclass
class BrokerInfo:
    id: int
    host: str
    port: int
    rack: str | None = None
    # Which life of the broker this is (KIP-380: the czxid of its /brokers/ids node); -1 unknown.
    epoch: int = field(default=-1, compare=False)
    # Every advertised listener: name -> (host, port). host/port above are the inter-broker one's.
    endpoints: dict[str, tuple[str, int]] = field(default_factory=dict, compare=False)
    protocols: dict[str, str] = field(default_factory=dict, compare=False)  # listener -> security protocol

    def endpoint(self, listener: str) -> tuple[str, int] | None:
        """Where a client of ``listener`` reaches this broker; None if it has no such listener."""
        if not self.endpoints:
            return self.host, self.port
        return self.endpoints.get(listener)


@dataclass
class PartitionState:
    replicas: list[int]
    leader: int
    leader_epoch: int = 0
    isr: list[int] = field(default_factory=list)
    partition_epoch: int = 0  # bumped on every change (ZooKeeper's "version")
    adding_replicas: list[int] = field(default_factory=list)  # an ongoing reassignment
    removing_replicas: list[int] = field(default_factory=list)


@dataclass
class TopicInfo:
    name: str
    topic_id: bytes
    partitions: dict[int, PartitionState]
    configs: dict[str, str] = field(default_factory=dict)  # per-topic overrides, as strings

    @property
    def replication_factor(self) -> int:
        return len(self.partitions[0].replicas) if self.partitions else 0

    def to_json(self) -> dict:
        return {
            "topic_id": uuid.UUID(bytes=self.topic_id).hex,
            "configs": self.configs,
            # by hand, not dataclasses.asdict: a topic of thousands of partitions is written on the event loop
            "partitions": {str(p): {"replicas": list(s.replicas), "leader": s.leader, "leader_epoch": s.leader_epoch,
                                    "isr": list(s.isr), "partition_epoch": s.partition_epoch,
                                    "adding_replicas": list(s.adding_replicas),
                                    "removing_replicas": list(s.removing_replicas)}
                           for p, s in sorted(self.partitions.items())},
        }

    @classmethod
    def from_json(cls, name: str, d: dict) -> "TopicInfo":
        parts = {int(p): PartitionState(**s) for p, s in d["partitions"].items()}
        return cls(name, uuid.UUID(hex=d["topic_id"]).bytes, parts, dict(d.get("configs", {})))


class TopicExistsError(RuntimeError):
    """A store's create_topic found the topic already there."""


def new_topic_id() -> bytes:
    return uuid.uuid4().bytes


class MetadataStore(Protocol):
    """Where cluster metadata lives. All calls are synchronous and durable on return."""

    cluster_id: str

    def topics(self) -> dict[str, TopicInfo]: ...
    def create_topic(self, topic: TopicInfo) -> None: ...
    def put_assignment(self, topic: TopicInfo) -> None: ...
    def put_topic_configs(self, name: str, configs: dict[str, str]) -> None: ...
    def update_partition_state(self, topic: str, partition: int, state: PartitionState) -> bool: ...
    def delete_topic(self, name: str) -> None: ...
    def broker_configs(self, broker_id: int | None) -> dict[str, str]: ...
    def put_broker_configs(self, broker_id: int | None, configs: dict[str, str]) -> None: ...
    def next_producer_id_block(self, size: int) -> int: ...
    # users/<u>, clients/<id>, users/<u>/clients/<id> ("<default>" for defaults): SCRAM and quotas
    def entity_configs(self, entity: str) -> dict[str, str]: ...
    def put_entity_configs(self, entity: str, configs: dict[str, str]) -> None: ...
    def entities(self) -> dict[str, dict[str, str]]: ...
    def acls(self) -> list[dict]: ...
    def put_acls(self, resource: tuple[str, str, str], acls: list[dict]) -> None: ...
    # finalized feature levels (KIP-584) and their epoch: (levels, epoch), or None before any
    def features(self) -> tuple[dict[str, int], int] | None: ...
    def ensure_features(self, initial: dict[str, int]) -> tuple[dict[str, int], int]: ...
    def put_features(self, levels: dict[str, int], epoch: int) -> int | None: ...
    def close(self) -> None: ...


class InconsistentClusterIdError(ConfigError):
    """The metadata file is another cluster's."""


class LocalMetadataStore:
    """Metadata of a single broker in one JSON file, rewritten atomically on each change.

    It lives in ``metadata.log.dir`` (by default the first of ``log.dirs``, where Kafka puts its
    KRaft metadata log). A change is all or nothing: if the file cannot be written (a full disk),
    the change is refused with KAFKA_STORAGE_ERROR and nothing in memory has changed, so the
    broker keeps serving what the file says."""

    FILE = "samsa-cluster-metadata.json"

    def __init__(self, directory: str | Path, cluster_id: str | None = None):
        """``cluster_id``: a KRaft node's, from its formatted meta.properties (else one is made up)."""
        self.path = Path(directory) / self.FILE
        self._lock = threading.RLock()
        exists = self.path.exists()
        self._load(json.loads(self.path.read_text()) if exists else {"cluster_id": cluster_id})
        if cluster_id and self.cluster_id != cluster_id:
            raise InconsistentClusterIdError(f"{self.path} belongs to cluster {self.cluster_id}, but meta.properties "
                                             f"says cluster.id={cluster_id}")
        if not exists:
            self._change(lambda: None)

    def _load(self, data: dict) -> None:
        self.cluster_id: str = data.get("cluster_id") or _new_cluster_id()
        self._topics = {n: TopicInfo.from_json(n, d) for n, d in data.get("topics", {}).items()}
        self._broker_configs: dict[str, dict[str, str]] = data.get("broker_configs", {})
        self._next_producer_id: int = data.get("next_producer_id", 0)
        self._entities: dict[str, dict[str, str]] = data.get("entity_configs", {})
        # (resource type, pattern type, name) -> Kafka's ACL entries
        self._acls: dict[tuple[str, str, str], list[dict]] = {
            (a["resource_type"], a["pattern_type"], a["name"]): a["acls"] for a in data.get("acls", [])}
        self._features: dict | None = data.get("features")  # {"levels": {name: level}, "epoch": n}

    def _data(self) -> dict:
        return {
            "version": 1,
            "cluster_id": self.cluster_id,
            "next_producer_id": self._next_producer_id,
            "broker_configs": self._broker_configs,
            "entity_configs": self._entities,
            "acls": self.acls(),
            **({"features": self._features} if self._features is not None else {}),
            "topics": {n: t.to_json() for n, t in sorted(self._topics.items())},
        }

    def _change(self, apply: Callable[[], object]) -> object:
        """Apply a change in memory and write the file; if the write fails, undo the change."""
        with self._lock:
            before = json.dumps(self._data())  # json's C encoder (no indent): fast for thousands of partitions
            objects = dict(self._topics)
            result = apply()
            try:
                self._write(self._data())
            except OSError as e:
                self._load(json.loads(before))
                self._topics.update({n: t for n, t in objects.items() if n in self._topics})
                raise KafkaStorageError(f"the metadata store {self.path} could not be written: {e}") from e
            return result

    def topics(self) -> dict[str, TopicInfo]:
        return dict(self._topics)

    def put_topic(self, topic: TopicInfo) -> None:
        self._change(lambda: self._topics.__setitem__(topic.name, topic))

    put_assignment = put_topic

    def create_topic(self, topic: TopicInfo) -> None:
        """As the ZooKeeper store: a name stored already (maybe still being applied) is refused."""
        if topic.name in self._topics:
            raise TopicExistsError(topic.name)
        self.put_topic(topic)

    def put_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        # a new TopicInfo: the one the cache shares is changed by the caller once this is written
        self._change(lambda: self._topics.__setitem__(name, replace(self._topics[name], configs=dict(configs))))

    def update_partition_state(self, topic: str, partition: int, state: PartitionState) -> bool:
        new = replace(state, partition_epoch=state.partition_epoch + 1)
        old = self._topics[topic]
        self._change(lambda: self._topics.__setitem__(topic, replace(old, partitions={**old.partitions,
                                                                                     partition: new})))
        state.partition_epoch = new.partition_epoch
        return True

    def delete_topic(self, name: str) -> None:
        self._change(lambda: self._topics.pop(name, None))

    def broker_configs(self, broker_id: int | None) -> dict[str, str]:
        return dict(self._broker_configs.get(_broker_key(broker_id), {}))

    def put_broker_configs(self, broker_id: int | None, configs: dict[str, str]) -> None:
        self._change(lambda: self._broker_configs.__setitem__(_broker_key(broker_id), dict(configs)))

    def next_producer_id_block(self, size: int) -> int:
        def apply() -> int:
            start = self._next_producer_id
            self._next_producer_id += size
            return start
        return self._change(apply)  # type: ignore[return-value]

    def entity_configs(self, entity: str) -> dict[str, str]:
        return dict(self._entities.get(entity, {}))

    def put_entity_configs(self, entity: str, configs: dict[str, str]) -> None:
        if configs:
            self._change(lambda: self._entities.__setitem__(entity, dict(configs)))
        else:
            self._change(lambda: self._entities.pop(entity, None))

    def entities(self) -> dict[str, dict[str, str]]:
        return {k: dict(v) for k, v in self._entities.items()}

    def acls(self) -> list[dict]:
        return [{"resource_type": t, "pattern_type": p, "name": n, "acls": list(a)}
                for (t, p, n), a in self._acls.items()]

    def put_acls(self, resource: tuple[str, str, str], acls: list[dict]) -> None:
        if acls:
            self._change(lambda: self._acls.__setitem__(resource, list(acls)))
        else:
            self._change(lambda: self._acls.pop(resource, None))

    def features(self) -> tuple[dict[str, int], int] | None:
        f = self._features
        return None if f is None else (dict(f["levels"]), f["epoch"])

    def ensure_features(self, initial: dict[str, int]) -> tuple[dict[str, int], int]:
        """The finalized levels, ``initial`` (at epoch 0) written first if none are."""
        with self._lock:
            if self._features is None:
                self._change(lambda: setattr(self, "_features", {"levels": dict(initial), "epoch": 0}))
            return self.features()  # type: ignore[return-value]

    def put_features(self, levels: dict[str, int], epoch: int) -> int | None:
        """Write ``levels`` if the finalized ones are still at ``epoch``: the new epoch, or None
        (changed meanwhile)."""
        with self._lock:
            if self._features is None or self._features["epoch"] != epoch:
                return None
            self._change(lambda: setattr(self, "_features", {"levels": dict(levels), "epoch": epoch + 1}))
            return epoch + 1

    def close(self) -> None:
        pass

    def _write(self, data: dict) -> None:
        tmp = self.path.with_suffix(".tmp")
        try:
            with open(tmp, "w") as f:
                f.write(json.dumps(data))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except OSError:
            try:
                tmp.unlink(missing_ok=True)
            except OSError:
                pass
            raise


def _broker_key(broker_id: int | None) -> str:
    return "default" if broker_id is None else str(broker_id)


def _new_cluster_id() -> str:
    import base64
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def describe_error(e: BaseException) -> str:
    """An error for a log line: kazoo's errors (ConnectionLoss, SessionExpiredError) carry no
    message, so their class names it."""
    text = str(e)
    return f"{type(e).__name__}: {text}" if text else type(e).__name__
