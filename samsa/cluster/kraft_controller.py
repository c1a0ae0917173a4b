"""The active KRaft controller's decisions: a request and the metadata image in, the metadata
records to append and the answer out.

Pure (no sockets, no clock of its own): the node that runs it (``samsa.server.kraft_node``)
appends the records to the metadata log, waits for them to be committed and applied to the
image, then sends the answer. Writes are decided one at a time, each from an image that holds
every earlier write, so no two decisions can contradict each other.

Kafka's rules (KIP-631): a broker registers fenced, with a new broker epoch; it is unfenced
once a heartbeat says it has caught up with the metadata log; a broker whose heartbeats stop
for ``broker.session.timeout.ms`` is fenced; a fenced broker leads nothing and leaves the ISRs
(``cluster.controller``'s election rules); a controlled shutdown (a heartbeat wanting to shut
down) moves leadership off the broker first. ISR changes come from the partition leaders
(AlterPartition, KIP-497), checked against the leader and partition epochs.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from samsa.cluster import controller as rules
from samsa.cluster import features
from samsa.cluster.kraft_image import BROKER, GROUP, TOPIC, MetadataImage
from samsa.cluster.metadata import PartitionState
from samsa.protocol import errors
from samsa.security.acl import AclBinding, AclFilter
from samsa.security.scram import MECHANISM_TYPES, plan_alterations

Record = tuple[str, int, dict]          # (schema name, version, data), as metadata_records encodes it
PRODUCER_ID_BLOCK = 1000                # Kafka's controller hands out blocks of 1000


@dataclass
class Decision:
    records: list[Record]
    answer: dict = field(default_factory=dict)
    offset: int = -1          # where the records ended in the log, once written


def _change(topic_id: bytes, index: int, old: PartitionState, new: PartitionState) -> Record:
    d: dict = {"partition_id": index, "topic_id": topic_id}
    if new.isr != old.isr:
        d["isr"] = list(new.isr)
    if new.leader != old.leader or new.leader_epoch != old.leader_epoch:
        d["leader"] = new.leader
    if new.replicas != old.replicas:
        d["replicas"] = list(new.replicas)
    if new.adding_replicas != old.adding_replicas:
        d["adding_replicas"] = list(new.adding_replicas)
    if new.removing_replicas != old.removing_replicas:
        d["removing_replicas"] = list(new.removing_replicas)
    return ("PartitionChangeRecord", 0, d)


def _registration_change(broker_id: int, epoch: int, fenced: int = 0, shutdown: int = 0) -> Record:
    return ("BrokerRegistrationChangeRecord", 1, {"broker_id": broker_id, "broker_epoch": epoch, "fenced": fenced,
                                                  "in_controlled_shutdown": shutdown})


class ControllerLogic:
    def __init__(self, image: MetadataImage, cluster_id: str, *, session_timeout_ms: int = 9000,
                 unclean_default: bool = False):
        self.image = image
        self.cluster_id = cluster_id
        self.session_timeout_ms = session_timeout_ms
        self.unclean_default = unclean_default
        self.last_heartbeat: dict[int, int] = {}   # broker id -> ms; volatile, as Kafka's heartbeat manager
        self.registered_at: dict[int, int] = {}    # broker id -> the offset its registration was applied at

    def became_active(self, now: int) -> None:
        """A new active controller gives every broker a full session from now."""
        self.last_heartbeat = {b: now for b in self.image.brokers}
        self.registered_at = {b: -1 for b in self.image.brokers}

    # ---------------------------------------------------------------- elections

    def _unclean(self, topic: str) -> bool:
        v = self.image.configs.get((TOPIC, topic), {}).get("unclean.leader.election.enable")
        return self.unclean_default if v is None else v == "true"

    def _elect_all(self, alive: set[int], involved: set[int] | None = None) -> list[Record]:
        """Every partition's state after the live (unfenced) brokers became ``alive``."""
        out = []
        for name, topic in self.image.topics.items():
            unclean = self._unclean(name)
            for index, state in topic.partitions.items():
                if involved is not None and not (involved & ({state.leader} | set(state.isr))) and state.leader != -1:
                    continue
                new = rules.on_brokers_changed(state, alive, unclean)
                if new is not None:
                    out.append(_change(topic.topic_id, index, state, new))
        return out

    # ---------------------------------------------------------------- brokers

    def register(self, body: dict, now: int) -> Decision:
        bid = body["broker_id"]
        if body.get("cluster_id") != self.cluster_id:
            return Decision([], {"error_code": errors.E_INCONSISTENT_CLUSTER_ID, "broker_epoch": -1})
        if not body.get("log_dirs"):    # Kafka: "No directories specified in request"
            return Decision([], {"error_code": errors.E_INVALID_REGISTRATION, "broker_epoch": -1})
        if any(d[:8] == bytes(8) and int.from_bytes(d[8:], "big") < 100 for d in body.get("log_dirs") or []):
            # Kafka reserves these directory ids (unassigned, lost, migrating, ...)
            return Decision([], {"error_code": errors.E_INVALID_REGISTRATION, "broker_epoch": -1})
        mv = self.image.features.get("metadata.version")
        declared = {f["name"]: (f["min_supported_version"], f["max_supported_version"])
                    for f in body.get("features") or []}
        if "metadata.version" not in declared:       # Kafka: "Request features do not contain 'metadata.version'"
            return Decision([], {"error_code": errors.E_INVALID_REGISTRATION, "broker_epoch": -1})
        lo, hi = declared["metadata.version"]
        if mv is not None and not lo <= mv <= hi:
            # as Kafka: a broker must support the finalized metadata.version (Samsa checks no other feature yet)
            return Decision([], {"error_code": errors.E_UNSUPPORTED_VERSION, "broker_epoch": -1})
        old = self.image.brokers.get(bid)
        if (old is not None and old.incarnation != body["incarnation_id"] and not old.fenced
                and body.get("previous_broker_epoch", -1) != old.epoch    # KIP-966: its own clean shutdown
                and now - self.last_heartbeat.get(bid, 0) < self.session_timeout_ms):
            return Decision([], {"error_code": errors.E_DUPLICATE_BROKER_REGISTRATION, "broker_epoch": -1})
        epoch = max([self.image.offset, *(b.epoch for b in self.image.brokers.values())]) + 1
        records: list[Record] = [("RegisterBrokerRecord", 3, {
            "broker_id": bid, "incarnation_id": body["incarnation_id"], "broker_epoch": epoch,
            "end_points": [{"name": ln["name"], "host": ln["host"], "port": ln["port"],
                            "security_protocol": ln["security_protocol"]} for ln in body["listeners"]],
            "features": [], "rack": body.get("rack"), "fenced": True, "in_controlled_shutdown": False,
            "log_dirs": list(body.get("log_dirs") or [])})]
        # A new life registers fenced: it leads nothing and leaves the ISRs until it has caught up.
        records += self._elect_all(self.image.unfenced() - {bid}, {bid})
        self.last_heartbeat[bid] = now
        self.registered_at[bid] = 1 << 62     # set by registered() once the record is applied
        return Decision(records, {"error_code": 0, "broker_epoch": epoch})

    def registered(self, broker_id: int, offset: int) -> None:
        self.registered_at[broker_id] = offset

    def heartbeat(self, body: dict, now: int) -> Decision:
        bid, epoch = body["broker_id"], body["broker_epoch"]
        b = self.image.brokers.get(bid)
        no = {"is_caught_up": False, "is_fenced": True, "should_shut_down": False}
        if b is None or b.epoch != epoch:    # Kafka answers both with STALE_BROKER_EPOCH
            return Decision([], {"error_code": errors.E_STALE_BROKER_EPOCH, **no})
        self.last_heartbeat[bid] = now
        caught_up = body["current_metadata_offset"] >= self.registered_at.get(bid, -1)
        records: list[Record] = []
        fenced, shut_down = b.fenced, False
        if body.get("want_shut_down"):
            if not b.in_controlled_shutdown:
                records.append(_registration_change(bid, epoch, shutdown=1))
            alive = self.image.unfenced() - {bid}
            leads = False
            for name, topic in self.image.topics.items():
                for index, state in topic.partitions.items():
                    new = rules.move_leadership_off(state, bid, alive)
                    if new is not None:
                        records.append(_change(topic.topic_id, index, state, new))
                    elif state.leader == bid and alive & set(state.replicas):
                        leads = True      # no other in-sync replica yet: a later heartbeat tries again
            shut_down = not leads
            if shut_down and not fenced:
                records.append(_registration_change(bid, epoch, fenced=1))
                records += self._elect_all(alive, {bid})
                fenced = True
        elif body.get("want_fence"):
            if not fenced:
                records.append(_registration_change(bid, epoch, fenced=1))
                records += self._elect_all(self.image.unfenced() - {bid}, {bid})
                fenced = True
        elif fenced and caught_up:
            records.append(_registration_change(bid, epoch, fenced=-1))
            records += self._elect_all(self.image.unfenced() | {bid})
            fenced = False
        return Decision(records, {"error_code": 0, "is_caught_up": caught_up, "is_fenced": fenced,
                                  "should_shut_down": shut_down})

    def fence_expired(self, now: int) -> Decision:
        """Brokers whose heartbeats stopped for a whole session are fenced."""
        gone = {b.id for b in self.image.brokers.values()
                if not b.fenced and now - self.last_heartbeat.get(b.id, now) >= self.session_timeout_ms}
        if not gone:
            return Decision([])
        records = [_registration_change(b, self.image.brokers[b].epoch, fenced=1) for b in sorted(gone)]
        return Decision(records + self._elect_all(self.image.unfenced() - gone, gone), {"fenced": sorted(gone)})

    def rebalance(self, percentage: int) -> Decision:
        """auto.leader.rebalance.enable: preferred leaders back where a broker leads too few of its own."""
        alive = self.image.unfenced()
        states = [s for t in self.image.topics.values() for s in t.partitions.values()]
        behind = rules.imbalanced_brokers(states, alive, percentage)
        records = []
        for topic in self.image.topics.values():
            for index, state in topic.partitions.items():
                if state.replicas and state.replicas[0] in behind:
                    new = rules.preferred_leader(state, alive)
                    if new is not None:
                        records.append(_change(topic.topic_id, index, state, new))
        return Decision(records)

    # ---------------------------------------------------------------- partitions

    def _new_partition(self, topic_id: bytes, index: int, replicas: list[int]) -> Record:
        alive = self.image.unfenced()
        isr = [r for r in replicas if r in alive]
        return ("PartitionRecord", 0, {
            "partition_id": index, "topic_id": topic_id, "replicas": list(replicas), "isr": isr or list(replicas),
            "removing_replicas": [], "adding_replicas": [], "leader": isr[0] if isr else -1,
            "leader_recovery_state": 0, "leader_epoch": 0, "partition_epoch": 0})

    def _assignments(self, requested: list[dict]) -> tuple[dict[int, list[int]] | None, str]:
        known = set(self.image.brokers)
        out = {}
        for a in requested:
            unknown = [b for b in a["broker_ids"] if b not in known]
            if unknown:
                return None, (f"The manual partition assignment includes broker {unknown[0]}, but no such broker is "
                              "registered.")
            out[a["partition_index"]] = list(a["broker_ids"])
        return out, ""

    def _round_robin(self, start: int, count: int, rf: int) -> dict[int, list[int]] | None:
        ids = sorted(self.image.unfenced())
        if rf > len(ids) or rf <= 0 or count <= 0:
            return None
        return {start + i: [ids[(start + i + j) % len(ids)] for j in range(rf)] for i in range(count)}

    def create_topics(self, body: dict) -> Decision:
        records: list[Record] = []
        answers = []
        for t in body["topics"]:
            name = t["name"]
            a = {"name": name, "topic_id": bytes(16), "error_code": 0, "error_message": None, "num_partitions": -1,
                 "replication_factor": -1, "configs": []}
            answers.append(a)
            if name in self.image.topics or any(r[0] == "TopicRecord" and r[2]["name"] == name for r in records):
                a.update(error_code=errors.E_TOPIC_ALREADY_EXISTS, error_message=f"Topic '{name}' already exists.")
                continue
            if t["assignments"]:
                replicas, why = self._assignments(t["assignments"])
            else:
                replicas = self._round_robin(0, t["num_partitions"], t["replication_factor"])
                why = "" if replicas is not None else (
                    f"Unable to replicate the partition {t['replication_factor']} time(s): only "
                    f"{len(self.image.unfenced())} broker(s) are registered and unfenced.")
            if replicas is None:
                a.update(error_code=errors.E_INVALID_REPLICATION_FACTOR if not t["assignments"]
                         else errors.E_INVALID_REPLICA_ASSIGNMENT, error_message=why)
                continue
            if body.get("validate_only"):
                continue
            tid = uuid.uuid4().bytes
            records.append(("TopicRecord", 0, {"name": name, "topic_id": tid}))
            for c in t["configs"]:
                if c["value"] is not None:
                    records.append(("ConfigRecord", 0, {"resource_type": TOPIC, "resource_name": name,
                                                        "name": c["name"], "value": c["value"]}))
            records += [self._new_partition(tid, i, r) for i, r in sorted(replicas.items())]
            a.update(topic_id=tid, num_partitions=len(replicas), replication_factor=len(next(iter(replicas.values()))))
        return Decision(records, {"throttle_time_ms": 0, "topics": answers})

    def delete_topics(self, body: dict) -> Decision:
        records: list[Record] = []
        answers = []
        for name in body.get("topic_names") or [t["name"] for t in body.get("topics") or []]:
            topic = self.image.topics.get(name)
            if topic is None:
                answers.append({"name": name, "topic_id": bytes(16), "error_code": errors.E_UNKNOWN_TOPIC_OR_PARTITION,
                                "error_message": "This server does not host this topic-partition."})
                continue
            records.append(("RemoveTopicRecord", 0, {"topic_id": topic.topic_id}))
            answers.append({"name": name, "topic_id": topic.topic_id, "error_code": 0, "error_message": None})
        return Decision(records, {"throttle_time_ms": 0, "responses": answers})

    def create_partitions(self, body: dict) -> Decision:
        records: list[Record] = []
        answers = []
        for t in body["topics"]:
            name = t["name"]
            topic = self.image.topics.get(name)
            a = {"name": name, "error_code": 0, "error_message": None}
            answers.append(a)
            if topic is None:
                a.update(error_code=errors.E_UNKNOWN_TOPIC_OR_PARTITION, error_message=f"The topic '{name}' does not exist.")
                continue
            current = len(topic.partitions)
            if t["count"] <= current:
                a.update(error_code=errors.E_INVALID_PARTITIONS,
                         error_message=f"The topic {name} currently has {current} partition(s); {t['count']} would not be an increase.")
                continue
            if t["assignments"]:
                replicas, why = self._assignments([{"partition_index": current + i, "broker_ids": x["broker_ids"]}
                                                   for i, x in enumerate(t["assignments"])])
            else:
                replicas, why = self._round_robin(current, t["count"] - current, topic.replication_factor), \
                    "Unable to replicate the new partitions: too few brokers are registered and unfenced."
            if replicas is None:
                a.update(error_code=errors.E_INVALID_REPLICA_ASSIGNMENT, error_message=why)
                continue
            if not body.get("validate_only"):
                records += [self._new_partition(topic.topic_id, i, r) for i, r in sorted(replicas.items())]
        return Decision(records, {"throttle_time_ms": 0, "results": answers})

    def alter_partition(self, body: dict) -> Decision:
        """A leader's new ISR (KIP-497), checked against its epochs and the unfenced brokers."""
        bid = body["broker_id"]
        b = self.image.brokers.get(bid)
        if b is None or (body.get("broker_epoch", -1) not in (-1, b.epoch)):
            return Decision([], {"throttle_time_ms": 0, "error_code": errors.E_STALE_BROKER_EPOCH, "topics": []})
        alive = self.image.unfenced()
        records: list[Record] = []
        topics_out = []
        for t in body["topics"]:
            topic = self.image.topic_by_id(t["topic_id"]) if t.get("topic_id") else self.image.topics.get(t.get("topic_name"))
            parts_out = []
            topics_out.append({"topic_name": t.get("topic_name") or "", "topic_id": t.get("topic_id") or bytes(16),
                               "partitions": parts_out})
            for p in t["partitions"]:
                index = p["partition_index"]
                state = topic.partitions.get(index) if topic is not None else None
                out = {"partition_index": index, "error_code": 0, "leader_id": -1, "leader_epoch": -1, "isr": [],
                       "leader_recovery_state": 0, "partition_epoch": -1}
                parts_out.append(out)
                isr = [x["broker_id"] for x in p["new_isr_with_epochs"]] if p.get("new_isr_with_epochs") is not None \
                    else list(p.get("new_isr") or [])
                if state is None:
                    out["error_code"] = errors.E_UNKNOWN_TOPIC_ID if t.get("topic_id") else errors.E_UNKNOWN_TOPIC_OR_PARTITION
                elif state.leader != bid:
                    out["error_code"] = errors.E_NOT_LEADER_OR_FOLLOWER
                elif p["leader_epoch"] != state.leader_epoch:
                    out["error_code"] = errors.E_FENCED_LEADER_EPOCH
                elif p["partition_epoch"] != state.partition_epoch:
                    out["error_code"] = errors.E_INVALID_UPDATE_VERSION
                elif bid not in isr or any(r not in state.replicas for r in isr):
                    out["error_code"] = errors.E_INVALID_REQUEST
                elif any(r not in alive for r in isr if r not in state.isr):
                    out["error_code"] = errors.E_INELIGIBLE_REPLICA
                else:
                    new = PartitionState(**{**state.__dict__, "isr": isr})
                    new = rules.finish_reassignment(new, alive) or new
                    if new != state:
                        records.append(_change(topic.topic_id, index, state, new))
                    epoch_bump = 1 if new != state else 0
                    out.update(leader_id=new.leader, isr=list(new.isr), partition_epoch=state.partition_epoch + epoch_bump,
                               leader_epoch=state.leader_epoch + (1 if new.leader != state.leader else 0))
                if out["error_code"]:
                    out["leader_id"] = state.leader if state is not None else -1
        return Decision(records, {"throttle_time_ms": 0, "error_code": 0, "topics": topics_out})

    def elect_leaders(self, body: dict) -> Decision:
        preferred = body.get("election_type", 0) == 0
        alive = self.image.unfenced()
        records: list[Record] = []
        results = []
        for t in body.get("topic_partitions") or []:
            parts = []
            results.append({"topic": t["topic"], "partition_result": parts})
            topic = self.image.topics.get(t["topic"])
            for index in t["partitions"]:
                state = topic.partitions.get(index) if topic is not None else None
                code, message = 0, None
                if state is None:
                    code, message = errors.E_UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist."
                elif preferred:
                    new = rules.preferred_leader(state, alive)
                    if new is None:
                        code = (errors.E_ELECTION_NOT_NEEDED if state.leader == state.replicas[0]
                                else errors.E_PREFERRED_LEADER_NOT_AVAILABLE)
                    else:
                        records.append(_change(topic.topic_id, index, state, new))
                elif state.leader in alive:
                    code = errors.E_ELECTION_NOT_NEEDED
                else:
                    new = rules.on_brokers_changed(state, alive, unclean=True)
                    if new is None or new.leader == -1:
                        code = errors.E_ELIGIBLE_LEADERS_NOT_AVAILABLE
                    else:
                        records.append(_change(topic.topic_id, index, state, new))
                parts.append({"partition_id": index, "error_code": code, "error_message": message})
        return Decision(records, {"throttle_time_ms": 0, "error_code": 0, "replica_election_results": results})

    def reassign(self, body: dict) -> Decision:
        """AlterPartitionReassignments: target replicas join, the old ones leave once they are in sync."""
        known = set(self.image.brokers)
        alive = self.image.unfenced()
        records: list[Record] = []
        responses = []
        for t in body["topics"]:
            parts = []
            responses.append({"name": t["name"], "partitions": parts})
            topic = self.image.topics.get(t["name"])
            for p in t["partitions"]:
                index, target = p["partition_index"], p["replicas"]
                state = topic.partitions.get(index) if topic is not None else None
                code, message = 0, None
                if state is None:
                    code, message = errors.E_UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist."
                elif target is None:
                    if not (state.adding_replicas or state.removing_replicas):
                        code, message = errors.E_NO_REASSIGNMENT_IN_PROGRESS, "No reassignment is in progress."
                    else:
                        original = [r for r in state.replicas if r not in state.adding_replicas]
                        new = PartitionState(**{**state.__dict__, "replicas": original,
                                                "isr": [r for r in state.isr if r in original] or state.isr,
                                                "adding_replicas": [], "removing_replicas": []})
                        records.append(_change(topic.topic_id, index, state, new))
                elif not target or len(set(target)) != len(target) or any(r not in known for r in target):
                    code, message = errors.E_INVALID_REPLICA_ASSIGNMENT, "Invalid replica assignment."
                else:
                    base = PartitionState(**{**state.__dict__, "replicas": rules.target_replicas(state),
                                             "adding_replicas": [], "removing_replicas": []})
                    new = rules.start_reassignment(base, target)
                    new = rules.finish_reassignment(new, alive) or new
                    if new != state:
                        records.append(_change(topic.topic_id, index, state, new))
                parts.append({"partition_index": index, "error_code": code, "error_message": message})
        return Decision(records, {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                                  "responses": responses})

    # ---------------------------------------------------------------- configs, producer ids

    def alter_configs(self, body: dict) -> Decision:
        """IncrementalAlterConfigs for topics and brokers: SET (0) and DELETE (1)."""
        records: list[Record] = []
        responses = []
        for r in body["resources"]:
            rtype, rname = r["resource_type"], r["resource_name"]
            code, message = 0, None
            if rtype == TOPIC and rname not in self.image.topics:
                code, message = errors.E_UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{rname}' does not exist."
            elif rtype not in (TOPIC, BROKER, GROUP):
                code, message = errors.E_INVALID_REQUEST, f"Unsupported resource type {rtype}"
            elif not body.get("validate_only"):
                for c in r["configs"]:
                    value = c["value"] if c["config_operation"] == 0 else None
                    records.append(("ConfigRecord", 0, {"resource_type": rtype, "resource_name": rname,
                                                        "name": c["name"], "value": value}))
            responses.append({"error_code": code, "error_message": message, "resource_type": rtype,
                              "resource_name": rname})
        return Decision(records, {"throttle_time_ms": 0, "responses": responses})

    def allocate_producer_ids(self, body: dict) -> Decision:
        b = self.image.brokers.get(body["broker_id"])
        if b is None or b.epoch != body["broker_epoch"]:
            return Decision([], {"throttle_time_ms": 0, "error_code": errors.E_STALE_BROKER_EPOCH,
                                 "producer_id_start": -1, "producer_id_len": 0})
        start = self.image.next_producer_id
        return Decision([("ProducerIdsRecord", 0, {"broker_id": b.id, "broker_epoch": b.epoch,
                                                    "next_producer_id": start + PRODUCER_ID_BLOCK})],
                        {"throttle_time_ms": 0, "error_code": 0, "producer_id_start": start,
                         "producer_id_len": PRODUCER_ID_BLOCK})


    # ---------------------------------------------------------------- ACLs, quotas, SCRAM

    def _binding(self, d: dict) -> AclBinding:
        return AclBinding(d["resource_type"], d["resource_name"], d["pattern_type"], d["principal"], d["host"],
                          d["operation"], d["permission_type"])

    def create_acls(self, body: dict) -> Decision:
        """CreateAcls of bindings already checked by the broker: one record each, none for one held."""
        held = {self._binding(d) for d in self.image.acls.values()}
        records: list[Record] = []
        for c in body["creations"]:
            b = AclBinding(c["resource_type"], c["resource_name"], c["resource_pattern_type"], c["principal"],
                           c["host"], c["operation"], c["permission_type"])
            if b not in held:
                held.add(b)
                records.append(("AccessControlEntryRecord", 0, {
                    "id": uuid.uuid4().bytes, "resource_type": b.resource_type, "resource_name": b.name,
                    "pattern_type": b.pattern_type, "principal": b.principal, "host": b.host,
                    "operation": b.operation, "permission_type": b.permission}))
        return Decision(records, {"throttle_time_ms": 0, "results": [
            {"error_code": 0, "error_message": None} for _ in body["creations"]]})

    def delete_acls(self, body: dict) -> Decision:
        records: list[Record] = []
        removed: set[bytes] = set()
        results = []
        for f in body["filters"]:
            flt = AclFilter(f["resource_type_filter"], f["resource_name_filter"], f["pattern_type_filter"],
                            f["principal_filter"], f["host_filter"], f["operation"], f["permission_type"])
            matching = []
            for aid, d in sorted(self.image.acls.items()):
                b = self._binding(d)
                if aid not in removed and flt.matches(b):
                    removed.add(aid)
                    records.append(("RemoveAccessControlEntryRecord", 0, {"id": aid}))
                    matching.append({"error_code": 0, "error_message": None, "resource_type": b.resource_type,
                                     "resource_name": b.name, "pattern_type": b.pattern_type,
                                     "principal": b.principal, "host": b.host, "operation": b.operation,
                                     "permission_type": b.permission})
            results.append({"error_code": 0, "error_message": None, "matching_acls": matching})
        return Decision(records, {"throttle_time_ms": 0, "filter_results": results})

    def alter_client_quotas(self, body: dict) -> Decision:
        """AlterClientQuotas of quotas already checked by the broker: one ClientQuotaRecord per change."""
        records: list[Record] = [("ClientQuotaRecord", 0, {
            "entity": [{"entity_type": x["entity_type"], "entity_name": x["entity_name"]} for x in e["entity"]],
            "key": op["key"], "value": float(op["value"] or 0), "remove": bool(op["remove"])})
            for e in body["entries"] for op in e["ops"]]
        return Decision(records, {"throttle_time_ms": 0, "entries": [
            {"error_code": 0, "error_message": None, "entity": e["entity"]} for e in body["entries"]]})

    def alter_scram(self, body: dict) -> Decision:
        """AlterUserScramCredentials, checked by the same rules as on a broker."""
        types = MECHANISM_TYPES
        results, changes = plan_alterations(body, lambda user, mech: (user, types[mech]) in self.image.scram)
        records: list[Record] = []
        for user, change in changes.items():
            if user in results:
                continue
            for mech, cred in change.items():
                if cred is None:
                    records.append(("RemoveUserScramCredentialRecord", 0, {"name": user, "mechanism": types[mech]}))
                else:
                    records.append(("UserScramCredentialRecord", 0, {
                        "name": user, "mechanism": types[mech], "salt": cred.salt, "stored_key": cred.stored_key,
                        "server_key": cred.server_key, "iterations": cred.iterations}))
            results[user] = {"user": user, "error_code": 0, "error_message": None}
        return Decision(records, {"throttle_time_ms": 0, "results": list(results.values())})

    def update_features(self, body: dict, node_id: int) -> Decision:
        """UpdateFeatures (v2: no per-feature results), by ``cluster.features``' rules against the
        image's levels: one FeatureLevelRecord per level changed (0 removes the feature), or
        INVALID_UPDATE_VERSION and nothing."""
        updates = [(u["feature"], u["max_version_level"], u.get("upgrade_type", features.UPGRADE))
                   for u in body["feature_updates"]]
        try:
            new = features.apply_updates(self.image.features, updates, node_id)
        except errors.KafkaError as e:
            return Decision([], {"throttle_time_ms": 0, "error_code": e.code, "error_message": e.args[0]})
        records: list[Record] = [("FeatureLevelRecord", 0, {"name": n, "feature_level": level})
                                 for n, level in sorted(new.items())
                                 if level != self.image.features.get(n, 0) and not body.get("validate_only")]
        return Decision(records, {"throttle_time_ms": 0, "error_code": 0, "error_message": None})
