"""OffsetForLeaderEpoch (23), ElectLeaders (43), AlterPartitionReassignments (45) and
ListPartitionReassignments (46): where a leader epoch ends, and moving leaders and replicas."""

from __future__ import annotations

from samsa.protocol import errors
from samsa.protocol.api_keys import ApiKey
from samsa.server.handlers import handles
from samsa.server.handlers.authz import RT, Op, allowed, allowed_cluster
from samsa.server.handlers.fetch import check_leader_epoch
from samsa.storage.leader_epoch import UNDEFINED


@handles(ApiKey.OFFSET_FOR_LEADER_EPOCH, 0, 4)
def offset_for_leader_epoch(ctx, req: dict) -> dict:
    broker = ctx.broker
    follower = req.get("replica_id", -1) >= 0  # v3+: a follower needs CLUSTER_ACTION, a client DESCRIBE on topics
    cluster_refused = follower and not allowed_cluster(ctx, Op.CLUSTER_ACTION)
    topics = []
    for t in req["topics"]:
        parts = []
        readable = follower or allowed(ctx, Op.DESCRIBE, RT.TOPIC, t["topic"])
        for p in t["partitions"]:
            entry = {"partition": p["partition"], "error_code": 0, "leader_epoch": UNDEFINED, "end_offset": UNDEFINED}
            try:
                if cluster_refused:
                    raise errors.ClusterAuthorizationFailedError("Not authorized as a replica")
                if not readable:
                    raise errors.TopicAuthorizationFailedError(f"Not authorized to describe {t['topic']}")
                partition = broker.replicas.partition(t["topic"], p["partition"])
                check_leader_epoch(partition, p.get("current_leader_epoch", -1))
                plog = partition.log
                epoch, end = plog.leader_epochs.end_offset_for(p["leader_epoch"], plog.log_end_offset)
                entry["leader_epoch"], entry["end_offset"] = epoch, end
            except errors.KafkaError as e:
                entry["error_code"] = e.code
            parts.append(entry)
        topics.append({"topic": t["topic"], "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}


PREFERRED, UNCLEAN = 0, 1


@handles(ApiKey.ELECT_LEADERS)
async def elect_leaders(ctx, req: dict) -> dict:
    broker = ctx.broker
    if req["topic_partitions"] is None:
        wanted = [(t, i) for t, info in broker.metadata.topics.items() for i in info.partitions]
    else:
        wanted = [(t["topic"], i) for t in req["topic_partitions"] for i in t["partitions"]]
    if not allowed_cluster(ctx, Op.ALTER):
        code = errors.E_CLUSTER_AUTHORIZATION_FAILED
        by: dict[str, list[dict]] = {}
        for topic, index in wanted:
            by.setdefault(topic, []).append({"partition_id": index, "error_code": code,
                                             "error_message": errors.error_name(code)})
        return {"throttle_time_ms": 0, "error_code": code,
                "replica_election_results": [{"topic": t, "partition_result": ps} for t, ps in by.items()]}
    election = req.get("election_type", PREFERRED) if ctx.version >= 1 else PREFERRED
    if election not in (PREFERRED, UNCLEAN):
        return {"throttle_time_ms": 0, "error_code": errors.E_INVALID_REQUEST, "replica_election_results": []}
    results = await broker.cluster.elect_leaders(wanted, preferred=election == PREFERRED)
    by_topic: dict[str, list[dict]] = {}
    for (topic, index), code in results.items():
        by_topic.setdefault(topic, []).append({
            "partition_id": index, "error_code": code,
            "error_message": None if code == 0 else errors.error_name(code)})
    return {"throttle_time_ms": 0, "error_code": 0,
            "replica_election_results": [{"topic": t, "partition_result": ps} for t, ps in by_topic.items()]}


def _bad_assignment(target: list[int], alive: set[int]) -> str | None:
    """What Kafka's controller says of a target replica list it refuses, or None."""
    if not target:
        return "The manual partition assignment includes an empty replica list."
    twice = next((b for b in sorted(target) if target.count(b) > 1), None)
    if twice is not None:
        return f"The manual partition assignment includes the broker {twice} more than once."
    unknown = next((b for b in target if b not in alive), None)
    if unknown is not None:
        return f"The manual partition assignment includes broker {unknown}, but no such broker is registered."
    return None


@handles(ApiKey.ALTER_PARTITION_REASSIGNMENTS)
async def alter_partition_reassignments(ctx, req: dict) -> dict:
    broker = ctx.broker
    if not allowed_cluster(ctx, Op.ALTER):
        return {"throttle_time_ms": 0, "error_code": errors.E_CLUSTER_AUTHORIZATION_FAILED,
                "error_message": "Not authorized to alter the cluster", "responses": []}
    alive = {b.id for b in broker.alive_brokers()}
    out = []
    for t in req["topics"]:
        parts = []
        for p in t["partitions"]:
            code, message = 0, None
            info = broker.metadata.topics.get(t["name"])
            target = p["replicas"]
            bad = _bad_assignment(target, alive) if target is not None else None
            if info is None:  # worded as Kafka 4's controller words them
                code, message = errors.E_UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find a topic named {t['name']}."
            elif p["partition_index"] not in info.partitions:
                code, message = (errors.E_UNKNOWN_TOPIC_OR_PARTITION,
                                 f"Unable to find partition {t['name']}:{p['partition_index']}.")
            elif target is None and not (info.partitions[p["partition_index"]].adding_replicas
                                         or info.partitions[p["partition_index"]].removing_replicas):
                code, message = errors.E_NO_REASSIGNMENT_IN_PROGRESS, "no reassignment in progress"
            elif bad is not None:
                code, message = errors.E_INVALID_REPLICA_ASSIGNMENT, bad
            elif not broker.cluster.replicated:
                code, message = errors.E_INVALID_REPLICA_ASSIGNMENT, "reassignment needs a cluster (zookeeper.connect)"
            else:
                await broker.cluster.reassign(t["name"], p["partition_index"], target)
            parts.append({"partition_index": p["partition_index"], "error_code": code, "error_message": message})
        out.append({"name": t["name"], "partitions": parts})
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "responses": out}


@handles(ApiKey.LIST_PARTITION_REASSIGNMENTS)
def list_partition_reassignments(ctx, req: dict) -> dict:
    broker = ctx.broker
    if not allowed_cluster(ctx, Op.DESCRIBE):
        return {"throttle_time_ms": 0, "error_code": errors.E_CLUSTER_AUTHORIZATION_FAILED,
                "error_message": "Not authorized to describe the cluster", "topics": []}
    wanted = req["topics"]
    names = [t["name"] for t in wanted] if wanted is not None else sorted(broker.metadata.topics)
    out = []
    for name in names:
        info = broker.metadata.topics.get(name)
        if info is None:
            continue
        indexes = next((t["partition_indexes"] for t in wanted if t["name"] == name), None) if wanted else None
        parts = [{"partition_index": i, "replicas": s.replicas, "adding_replicas": s.adding_replicas,
                  "removing_replicas": s.removing_replicas}
                 for i, s in sorted(info.partitions.items())
                 if (indexes is None or i in indexes) and (s.adding_replicas or s.removing_replicas)]
        if parts:
            out.append({"name": name, "partitions": parts})
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "topics": out}
