"""A KRaft cluster's metadata as the metadata log says it: the records of ``__cluster_metadata``
applied in order.

Every node of a KRaft cluster holds one :class:`MetadataImage`: the controllers build it from
the log they replicate, the brokers from the log they fetch. It is the only place a KRaft
broker learns topics, partition states, brokers and configs from, and the controller decides
from it (``kraft_controller``). Pure: records in, state and what changed out.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace

from samsa.cluster.metadata import BrokerInfo, PartitionState, TopicInfo

# ConfigRecord's resource types (Kafka's ConfigResource.Type)
TOPIC, BROKER, GROUP = 2, 4, 32
NO_LEADER_CHANGE = -2
# A ClientQuotaRecord's entity without that part (a user quota has no client-id); a part whose
# name is None is the default entity.
NOT_SET = ("not set",)


@dataclass
class Registration:
    """A broker as RegisterBrokerRecord and the changes after it describe it."""
    id: int
    epoch: int
    incarnation: bytes
    endpoints: list[dict]           # name, host, port, security_protocol
    rack: str | None = None
    fenced: bool = True
    in_controlled_shutdown: bool = False

    def info(self, inter_broker_listener: str | None = None) -> BrokerInfo:
        eps = {e["name"]: (e["host"], e["port"]) for e in self.endpoints}
        protocols = {e["name"]: _protocol_name(e["security_protocol"]) for e in self.endpoints}
        first = eps.get(inter_broker_listener or "") or (next(iter(eps.values())) if eps else ("", -1))
        return BrokerInfo(self.id, first[0], first[1], self.rack, epoch=self.epoch, endpoints=eps,
                          protocols=protocols)


_PROTOCOLS = {0: "PLAINTEXT", 1: "SSL", 2: "SASL_PLAINTEXT", 3: "SASL_SSL"}


def _protocol_name(code: int) -> str:
    return _PROTOCOLS.get(code, "PLAINTEXT")


def protocol_code(name: str) -> int:
    return {v: k for k, v in _PROTOCOLS.items()}.get(name, 0)


@dataclass
class Changes:
    """What one batch of applied records changed, for whoever mirrors the image."""
    topics: set[str] = field(default_factory=set)         # created or changed (by name)
    removed: set[str] = field(default_factory=set)        # deleted topics (by name)
    brokers: bool = False
    broker_configs: bool = False
    features: bool = False
    acls: bool = False
    entities: bool = False       # client quotas, SCRAM credentials, group configs

    def __bool__(self) -> bool:
        return bool(self.topics or self.removed or self.brokers or self.broker_configs or self.features
                    or self.acls or self.entities)


class MetadataImage:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Empty, as before the first record (a snapshot is loaded into it in place)."""
        self.offset = -1                                   # the last record applied
        self.topics: dict[str, TopicInfo] = {}
        self.names: dict[bytes, str] = {}                  # topic id -> name
        self.brokers: dict[int, Registration] = {}
        self.configs: dict[tuple[int, str], dict[str, str]] = {}
        self.features: dict[str, int] = {}
        self.next_producer_id = 0
        self.acls: dict[bytes, dict] = {}                  # id -> AccessControlEntryRecord's fields
        self.quotas: dict[tuple[str | None, str | None], dict[str, float]] = {}   # (user, client) -> key -> value
        self.scram: dict[tuple[str, int], dict] = {}       # (user, mechanism) -> UserScramCredentialRecord's fields

    # ---------------------------------------------------------------- views

    def unfenced(self) -> set[int]:
        return {b.id for b in self.brokers.values() if not b.fenced}

    def broker_configs(self, broker_id: int | None) -> dict[str, str]:
        return dict(self.configs.get((BROKER, "" if broker_id is None else str(broker_id)), {}))

    def topic_by_id(self, topic_id: bytes) -> TopicInfo | None:
        name = self.names.get(topic_id)
        return self.topics.get(name) if name is not None else None

    # ---------------------------------------------------------------- replay

    def apply(self, offset: int, name: str, data: dict, changes: Changes) -> None:
        """One record at ``offset``; what it changed is added to ``changes``."""
        handler = getattr(self, "_" + name, None)
        if handler is not None:
            handler(data, changes)
        self.offset = offset

    def _TopicRecord(self, d: dict, ch: Changes) -> None:
        name, tid = d["name"], d["topic_id"]
        self.topics[name] = TopicInfo(name, tid, {}, dict(self.configs.get((TOPIC, name), {})))
        self.names[tid] = name
        ch.topics.add(name)
        ch.removed.discard(name)

    def _RemoveTopicRecord(self, d: dict, ch: Changes) -> None:
        name = self.names.pop(d["topic_id"], None)
        if name is None:
            return
        self.topics.pop(name, None)
        self.configs.pop((TOPIC, name), None)
        ch.topics.discard(name)
        ch.removed.add(name)

    def _PartitionRecord(self, d: dict, ch: Changes) -> None:
        topic = self.topic_by_id(d["topic_id"])
        if topic is None:
            return
        topic.partitions[d["partition_id"]] = PartitionState(
            replicas=list(d["replicas"]), leader=d["leader"], leader_epoch=d["leader_epoch"], isr=list(d["isr"]),
            partition_epoch=d["partition_epoch"], adding_replicas=list(d["adding_replicas"] or []),
            removing_replicas=list(d["removing_replicas"] or []))
        ch.topics.add(topic.name)

    def _PartitionChangeRecord(self, d: dict, ch: Changes) -> None:
        topic = self.topic_by_id(d["topic_id"])
        state = topic.partitions.get(d["partition_id"]) if topic is not None else None
        if state is None:
            return
        new = replace(state, partition_epoch=state.partition_epoch + 1)
        if d["isr"] is not None:
            new.isr = list(d["isr"])
        if d["leader"] != NO_LEADER_CHANGE:
            new.leader, new.leader_epoch = d["leader"], state.leader_epoch + 1
        if d["replicas"] is not None:
            new.replicas = list(d["replicas"])
        if d["adding_replicas"] is not None:
            new.adding_replicas = list(d["adding_replicas"])
        if d["removing_replicas"] is not None:
            new.removing_replicas = list(d["removing_replicas"])
        topic.partitions[d["partition_id"]] = new
        ch.topics.add(topic.name)

    def _ConfigRecord(self, d: dict, ch: Changes) -> None:
        key = (d["resource_type"], d["resource_name"])
        configs = self.configs.setdefault(key, {})
        if d["value"] is None:
            configs.pop(d["name"], None)
        else:
            configs[d["name"]] = d["value"]
        if not configs:
            del self.configs[key]
        if key[0] == TOPIC and key[1] in self.topics:
            self.topics[key[1]].configs = dict(configs)
            ch.topics.add(key[1])
        elif key[0] == BROKER:
            ch.broker_configs = True
        elif key[0] == GROUP:
            ch.entities = True

    def _RegisterBrokerRecord(self, d: dict, ch: Changes) -> None:
        self.brokers[d["broker_id"]] = Registration(
            d["broker_id"], d["broker_epoch"], d["incarnation_id"],
            [{"name": e["name"], "host": e["host"], "port": e["port"], "security_protocol": e["security_protocol"]}
             for e in d["end_points"]],
            d["rack"], d["fenced"], d.get("in_controlled_shutdown", False))
        ch.brokers = True

    def _UnregisterBrokerRecord(self, d: dict, ch: Changes) -> None:
        b = self.brokers.get(d["broker_id"])
        if b is not None and b.epoch == d["broker_epoch"]:
            del self.brokers[d["broker_id"]]
            ch.brokers = True

    def _fence(self, broker_id: int, epoch: int, fenced: bool | None, shutdown: bool | None, ch: Changes) -> None:
        b = self.brokers.get(broker_id)
        if b is None or b.epoch != epoch:
            return
        if fenced is not None:
            b.fenced = fenced
        if shutdown is not None:
            b.in_controlled_shutdown = shutdown
        ch.brokers = True

    def _FenceBrokerRecord(self, d: dict, ch: Changes) -> None:
        self._fence(d["id"], d["epoch"], True, None, ch)

    def _UnfenceBrokerRecord(self, d: dict, ch: Changes) -> None:
        self._fence(d["id"], d["epoch"], False, None, ch)

    def _BrokerRegistrationChangeRecord(self, d: dict, ch: Changes) -> None:
        fenced = {1: True, -1: False}.get(d["fenced"])
        shutdown = {1: True, 0: None}.get(d.get("in_controlled_shutdown", 0), None)
        self._fence(d["broker_id"], d["broker_epoch"], fenced, shutdown, ch)

    def _AccessControlEntryRecord(self, d: dict, ch: Changes) -> None:
        self.acls[d["id"]] = {k: v for k, v in d.items() if k != "id"}
        ch.acls = True

    def _RemoveAccessControlEntryRecord(self, d: dict, ch: Changes) -> None:
        if self.acls.pop(d["id"], None) is not None:
            ch.acls = True

    def _ClientQuotaRecord(self, d: dict, ch: Changes) -> None:
        kinds = {e["entity_type"]: e["entity_name"] for e in d["entity"]}
        key = (kinds["user"] if "user" in kinds else NOT_SET,
               kinds["client-id"] if "client-id" in kinds else NOT_SET)
        quotas = self.quotas.setdefault(key, {})
        if d["remove"]:
            quotas.pop(d["key"], None)
        else:
            quotas[d["key"]] = d["value"]
        if not quotas:
            del self.quotas[key]
        ch.entities = True

    def _UserScramCredentialRecord(self, d: dict, ch: Changes) -> None:
        self.scram[(d["name"], d["mechanism"])] = dict(d)
        ch.entities = True

    def _RemoveUserScramCredentialRecord(self, d: dict, ch: Changes) -> None:
        if self.scram.pop((d["name"], d["mechanism"]), None) is not None:
            ch.entities = True

    def _FeatureLevelRecord(self, d: dict, ch: Changes) -> None:
        if d["feature_level"] == 0:
            self.features.pop(d["name"], None)
        else:
            self.features[d["name"]] = d["feature_level"]
        ch.features = True

    def _ProducerIdsRecord(self, d: dict, ch: Changes) -> None:
        self.next_producer_id = max(self.next_producer_id, d["next_producer_id"])


def topic_id_string(tid: bytes) -> str:
    return str(uuid.UUID(bytes=tid))


def snapshot_records(im: MetadataImage) -> list[tuple[str, int, dict]]:
    """The records that build ``im`` again from nothing (a KIP-630 snapshot's content)."""
    out: list[tuple[str, int, dict]] = [("FeatureLevelRecord", 0, {"name": n, "feature_level": lv})
                                        for n, lv in sorted(im.features.items())]
    for b in sorted(im.brokers.values(), key=lambda b: b.id):
        out.append(("RegisterBrokerRecord", 3, {
            "broker_id": b.id, "incarnation_id": b.incarnation, "broker_epoch": b.epoch,
            "end_points": [dict(e) for e in b.endpoints], "features": [], "rack": b.rack, "fenced": b.fenced,
            "in_controlled_shutdown": b.in_controlled_shutdown, "log_dirs": []}))
    for (rtype, rname), configs in sorted(im.configs.items()):
        out += [("ConfigRecord", 0, {"resource_type": rtype, "resource_name": rname, "name": k, "value": v})
                for k, v in sorted(configs.items())]
    for name, t in sorted(im.topics.items()):
        out.append(("TopicRecord", 0, {"name": name, "topic_id": t.topic_id}))
        for i, s in sorted(t.partitions.items()):
            out.append(("PartitionRecord", 0, {
                "partition_id": i, "topic_id": t.topic_id, "replicas": list(s.replicas), "isr": list(s.isr),
                "removing_replicas": list(s.removing_replicas), "adding_replicas": list(s.adding_replicas),
                "leader": s.leader, "leader_recovery_state": 0, "leader_epoch": s.leader_epoch,
                "partition_epoch": s.partition_epoch}))
    if im.next_producer_id:
        out.append(("ProducerIdsRecord", 0, {"broker_id": -1, "broker_epoch": -1,
                                             "next_producer_id": im.next_producer_id}))
    out += [("AccessControlEntryRecord", 0, {"id": aid, **d}) for aid, d in sorted(im.acls.items())]
    for (user, client), quotas in sorted(im.quotas.items(), key=repr):
        entity = ([{"entity_type": "user", "entity_name": user}] if user is not NOT_SET else []) + \
                 ([{"entity_type": "client-id", "entity_name": client}] if client is not NOT_SET else [])
        out += [("ClientQuotaRecord", 0, {"entity": entity, "key": k, "value": v, "remove": False})
                for k, v in sorted(quotas.items())]
    out += [("UserScramCredentialRecord", 0, dict(d)) for _, d in sorted(im.scram.items())]
    return out
