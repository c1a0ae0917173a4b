"""DescribeCluster (60), DescribeLogDirs (35), DeleteRecords (21), UpdateFeatures (57), DescribeQuorum (55)."""

import asyncio
import shutil

from samsa.cluster.features import UPGRADE, apply_updates

from samsa.protocol import errors
from samsa.protocol.acl import ResourceType, authorized_operations
from samsa.protocol.api_keys import ApiKey
from samsa.server.handlers import handles
from samsa.server.handlers.authz import RT, Op, allowed, allowed_cluster, operations


@handles(ApiKey.DESCRIBE_CLUSTER)
def describe_cluster(ctx, req: dict) -> dict:
    broker = ctx.broker
    if req.get("endpoint_type", 1) not in (1,):
        return {"error_code": errors.E_UNSUPPORTED_ENDPOINT_TYPE, "error_message": "only broker endpoints",
                "cluster_id": broker.store.cluster_id, "controller_id": -1, "brokers": []}
    return {
        "throttle_time_ms": 0, "error_code": 0, "error_message": None, "endpoint_type": 1,
        "cluster_id": broker.store.cluster_id, "controller_id": broker.controller_id,
        "brokers": [{"broker_id": b.id, "host": e[0], "port": e[1], "rack": b.rack}
                    for b in broker.alive_brokers() if (e := b.endpoint(ctx.connection.listener)) is not None],
        "cluster_authorized_operations": _cluster_operations(ctx, req.get("include_cluster_authorized_operations",
                                                                           False)),
    }


def _cluster_operations(ctx, requested: bool) -> int:
    ops = operations(ctx, RT.CLUSTER, "kafka-cluster", requested)
    return authorized_operations(ResourceType.CLUSTER, requested) if ops is None else ops


@handles(ApiKey.DESCRIBE_LOG_DIRS)
def describe_log_dirs(ctx, req: dict) -> dict:
    broker = ctx.broker
    if not allowed_cluster(ctx, Op.DESCRIBE):  # Kafka: DESCRIBE on the cluster, else no directories
        return {"throttle_time_ms": 0, "error_code": errors.E_CLUSTER_AUTHORIZATION_FAILED, "results": []}
    wanted = None
    if req["topics"] is not None:
        wanted = {(t["topic"], p) for t in req["topics"] for p in t["partitions"]}
    results = []
    for log_dir in broker.logs.log_dirs:
        if log_dir in broker.logs.offline_dirs:  # KIP-112: a failed directory, as Kafka lists it
            results.append({"error_code": errors.E_KAFKA_STORAGE_ERROR, "log_dir": str(log_dir), "topics": [],
                            "total_bytes": -1, "usable_bytes": -1})
            continue
        topics: dict[str, list] = {}
        for (topic, index), partition in sorted(broker.replicas.partitions.items()):
            if broker.logs.log_dir_of(partition.log) != log_dir:
                continue
            if wanted is not None and (topic, index) not in wanted:
                continue
            topics.setdefault(topic, []).append({
                "partition_index": index, "partition_size": partition.log.size_bytes(),
                "offset_lag": 0, "is_future_key": False})
        usage = shutil.disk_usage(log_dir)
        results.append({"error_code": 0, "log_dir": str(log_dir),
                        "topics": [{"name": n, "partitions": ps} for n, ps in topics.items()],
                        "total_bytes": usage.total, "usable_bytes": usage.free})
    return {"throttle_time_ms": 0, "error_code": 0, "results": results}


@handles(ApiKey.DELETE_RECORDS)
def delete_records(ctx, req: dict) -> dict:
    broker = ctx.broker
    topics = []
    for t in req["topics"]:
        parts = []
        deletable = allowed(ctx, Op.DELETE, RT.TOPIC, t["name"])
        for p in t["partitions"]:
            index = p["partition_index"]
            try:
                if not deletable:
                    raise errors.TopicAuthorizationFailedError(f"Not authorized to delete records of {t['name']}")
                partition = broker.replicas.partition(t["name"], index)
                offset = p["offset"]
                hw = partition.high_watermark
                if offset == -1:
                    offset = hw
                if offset < 0 or offset > hw:
                    raise errors.OffsetOutOfRangeError(f"offset {offset} is beyond the high watermark {hw}")
                low = partition.log.delete_records_before(offset)
                parts.append({"partition_index": index, "low_watermark": low, "error_code": 0})
            except errors.KafkaError as e:
                parts.append({"partition_index": index, "low_watermark": -1, "error_code": e.code})
        topics.append({"name": t["name"], "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}


@handles(ApiKey.UPDATE_FEATURES)
async def update_features(ctx, req: dict) -> dict:
    """UpdateFeatures (57): the controller's rules (``cluster.features``), all or nothing; the
    levels written to the metadata store (compare-and-set on their epoch: in a ZooKeeper
    cluster any broker may answer, and every broker sees the change through /feature)."""
    broker = ctx.broker
    names = [u["feature"] for u in req["feature_updates"]]  # one result an update, as Kafka (duplicates too)

    def answer(code: int, message: str | None) -> dict:
        out = {"throttle_time_ms": 0, "error_code": code, "error_message": message}
        if ctx.version < 2:  # per-feature results until v2; Kafka answers each NONE, or none on an error
            out["results"] = [] if code else [{"feature": n, "error_code": 0, "error_message": "NONE"} for n in names]
        return out

    if not allowed_cluster(ctx, Op.ALTER):
        # Kafka's words ("Request <its request> needs ALTER permission."), with Samsa's view of the request
        conn = ctx.connection
        return answer(errors.E_CLUSTER_AUTHORIZATION_FAILED,
                      f"Request(apiKey=UPDATE_FEATURES, apiVersion={ctx.version}, clientId={ctx.header.client_id}, "
                      f"principal={conn.principal}, listenerName={conn.listener}) needs ALTER permission.")
    # v0's AllowDowngrade is not read: Kafka 4.4 takes a v0 update as an upgrade whatever it says
    updates = [(u["feature"], u["max_version_level"], u.get("upgrade_type", UPGRADE) if ctx.version >= 1 else UPGRADE)
               for u in req["feature_updates"]]
    loop = asyncio.get_running_loop()
    for _ in range(10):  # another broker may change the features between our read and write
        try:
            levels, epoch = await loop.run_in_executor(None, broker.store.features) or ({}, -1)
            new = apply_updates(levels, updates, broker.controller_id)
            if req.get("validate_only", False) or new == levels:
                return answer(0, None)
            new_epoch = await loop.run_in_executor(None, broker.store.put_features, new, epoch)
        except errors.KafkaError as e:
            return answer(e.code, e.args[0] if e.args else None)
        if new_epoch is not None:
            broker.features.update(new, new_epoch)
            return answer(0, None)
    return answer(errors.E_FEATURE_UPDATE_FAILED, "The finalized features kept changing while they were updated.")


@handles(ApiKey.DESCRIBE_QUORUM, 0, 2)
async def describe_quorum(ctx, req: dict) -> dict:
    """As a Kafka 4 broker: forwarded to the active controller (``kafka-metadata-quorum
    --bootstrap-server``). A broker outside a KRaft quorum (ZooKeeper, a single node) says so."""
    broker = ctx.broker
    if not allowed_cluster(ctx, Op.DESCRIBE):
        return {"error_code": errors.E_CLUSTER_AUTHORIZATION_FAILED, "error_message": None, "topics": []}
    if broker.kraft is None:
        return {"error_code": errors.E_UNSUPPORTED_VERSION, "topics": [],
                "error_message": "this broker is not part of a KRaft controller quorum"}
    try:
        return await broker.kraft.request(ApiKey.DESCRIBE_QUORUM, req, 30000)
    except errors.KafkaError as e:
        return {"error_code": e.code, "error_message": str(e), "topics": []}


@handles(ApiKey.ADD_RAFT_VOTER, 0, 0)
async def add_raft_voter(ctx, req: dict) -> dict:
    """KIP-853, as a Kafka 4 broker: forwarded to the active controller (``kafka-metadata-quorum
    --bootstrap-server ... add-controller``); ALTER on the cluster."""
    return await _voter_change(ctx, ApiKey.ADD_RAFT_VOTER, req)


@handles(ApiKey.REMOVE_RAFT_VOTER, 0, 0)
async def remove_raft_voter(ctx, req: dict) -> dict:
    """As AddRaftVoter (``remove-controller``)."""
    return await _voter_change(ctx, ApiKey.REMOVE_RAFT_VOTER, req)


async def _voter_change(ctx, key: int, req: dict) -> dict:
    broker = ctx.broker
    if not allowed_cluster(ctx, Op.ALTER):
        return {"throttle_time_ms": 0, "error_code": errors.E_CLUSTER_AUTHORIZATION_FAILED, "error_message": None}
    if broker.kraft is None:
        return {"throttle_time_ms": 0, "error_code": errors.E_UNSUPPORTED_VERSION,
                "error_message": "this broker is not part of a KRaft controller quorum"}
    try:
        return await broker.kraft.request(key, req, max(req.get("timeout_ms", 0), 30000) + 5000)
    except errors.KafkaError as e:
        return {"throttle_time_ms": 0, "error_code": e.code, "error_message": str(e)}
