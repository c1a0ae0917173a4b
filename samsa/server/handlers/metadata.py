"""Metadata (3): brokers, controller, topics and who leads each partition; DescribeTopicPartitions
(75, KIP-966): the same topics and partitions a page at a time, with a cursor."""

from samsa.protocol import errors
from samsa.protocol.acl import OPERATIONS_NOT_REQUESTED, ResourceType, authorized_operations  # noqa: F401
from samsa.protocol.names import INTERNAL_TOPICS, validate_topic_name
from samsa.protocol.api_keys import ApiKey
from samsa.server.handlers import handles
from samsa.server.handlers.authz import RT, Op, allowed, allowed_cluster, operations, quietly_allowed

def topic_entry(broker, name: str, topic_id: bytes | None = None, error: int = 0,
                operations: int = OPERATIONS_NOT_REQUESTED) -> dict:
    topic = broker.metadata.topics.get(name)
    if topic is None or error:
        return {"error_code": error or errors.E_UNKNOWN_TOPIC_OR_PARTITION, "name": name,
                "topic_id": topic_id or bytes(16), "partitions": [],
                "topic_authorized_operations": OPERATIONS_NOT_REQUESTED}
    alive = {b.id for b in broker.alive_brokers()}
    partitions = [partition_entry(broker, name, index, state, alive) for index, state in sorted(topic.partitions.items())]
    return {"error_code": 0, "name": name, "topic_id": topic.topic_id,
            "is_internal": name in INTERNAL_TOPICS, "partitions": partitions,
            "topic_authorized_operations": operations}


def partition_entry(broker, name: str, index: int, state, alive: set[int]) -> dict:
    """One partition as Metadata answers it: its leader if alive (else LEADER_NOT_AVAILABLE), the
    replicas that are offline."""
    # KIP-112: this broker's replica is offline when its log dir failed; leading from there, none leads
    me = broker.broker_id
    offline_here = broker.logs.is_offline(name, index)
    leader_alive = state.leader in alive and not (offline_here and state.leader == me)
    return {
        "error_code": 0 if leader_alive else errors.E_LEADER_NOT_AVAILABLE,
        "partition_index": index,
        "leader_id": state.leader if leader_alive else -1,
        "leader_epoch": state.leader_epoch,
        "replica_nodes": state.replicas,
        "isr_nodes": state.isr,
        "offline_replicas": [r for r in state.replicas if r not in alive or (offline_here and r == me)],
    }


def _ops(ctx, name: str, default: int) -> int:
    ops = operations(ctx, RT.TOPIC, name, default != OPERATIONS_NOT_REQUESTED)
    return default if ops is None else ops


@handles(ApiKey.METADATA)
def metadata(ctx, req: dict) -> dict:
    broker = ctx.broker
    requested = req["topics"]
    ops = authorized_operations(ResourceType.TOPIC, req.get("include_topic_authorized_operations", False))
    secured = broker.authorizer is not None
    if requested is None or (ctx.version == 0 and not requested):
        topics = [topic_entry(broker, name, operations=_ops(ctx, name, ops)) for name in sorted(broker.metadata.topics)
                  if not secured or quietly_allowed(ctx, Op.DESCRIBE, RT.TOPIC, name)]
    elif ctx.version < 12 and any(t.get("name") is None or any(t.get("topic_id") or b"") for t in requested):
        # Topic ids in a Metadata request (and so null names) only from v12: Kafka answers every topic
        # INVALID_REQUEST, with no brokers ("Topic name can not be null for version 11")
        return {"throttle_time_ms": 0, "brokers": [], "cluster_id": None, "controller_id": -1,
                "topics": [{"error_code": errors.E_INVALID_REQUEST, "name": t.get("name") or "",
                            "topic_id": t.get("topic_id") or bytes(16), "partitions": []} for t in requested],
                "cluster_authorized_operations": authorized_operations(ResourceType.CLUSTER, False)}
    else:
        allow_create = req.get("allow_auto_topic_creation", True) if ctx.version >= 4 else True
        topics = []
        for t in requested:
            name = t.get("name")
            if name is None and t.get("topic_id"):
                name = broker.metadata.topic_ids.get(t["topic_id"])
                if name is None:
                    topics.append(topic_entry(broker, None, t["topic_id"], errors.E_UNKNOWN_TOPIC_ID))
                    continue
            if secured and not allowed(ctx, Op.DESCRIBE, RT.TOPIC, name):
                topics.append(topic_entry(broker, name, error=errors.E_TOPIC_AUTHORIZATION_FAILED))
                continue
            if name not in broker.metadata.topics:
                if secured and allow_create and not (allowed_cluster(ctx, Op.CREATE)
                                                     or allowed(ctx, Op.CREATE, RT.TOPIC, name)):
                    topics.append(topic_entry(broker, name, error=errors.E_TOPIC_AUTHORIZATION_FAILED))
                    continue
                try:
                    validate_topic_name(name)
                except errors.InvalidTopicError:
                    topics.append(topic_entry(broker, name, error=errors.E_INVALID_TOPIC_EXCEPTION))
                    continue
                if allow_create:
                    broker.admin.auto_create_topic(name)
            topics.append(topic_entry(broker, name, operations=_ops(ctx, name, ops)))
    return {
        "throttle_time_ms": 0,
        "brokers": [{"node_id": b.id, "host": e[0], "port": e[1], "rack": b.rack}
                    for b in broker.alive_brokers() if (e := b.endpoint(ctx.connection.listener)) is not None],
        "cluster_id": broker.store.cluster_id,
        "controller_id": broker.controller_id,
        "topics": topics,
        "cluster_authorized_operations": authorized_operations(
            ResourceType.CLUSTER, req.get("include_cluster_authorized_operations", False)),
    }


def _dtp_topic(name: str, error: int, operations: int = OPERATIONS_NOT_REQUESTED, internal: bool = False) -> dict:
    return {"error_code": error, "name": name, "topic_id": bytes(16), "is_internal": internal, "partitions": [],
            "topic_authorized_operations": operations}


@handles(ApiKey.DESCRIBE_TOPIC_PARTITIONS)
def describe_topic_partitions(ctx, req: dict) -> dict:
    """Kafka 4.4's rules: the topics asked for (or all, when none are), from the cursor's topic on,
    sorted; at most ``ResponsePartitionLimit`` partitions (1 to ``max.request.partition.size.limit``)
    and a cursor where the answer stopped. Partitions as Metadata gives them, with no error
    (no leader: -1) and empty eligible leader replicas: Samsa has none, and Kafka answers empty
    lists when it has none or when ``eligible.leader.replicas.version`` is 0."""
    broker = ctx.broker
    requested = [t["name"] for t in req["topics"]]
    cursor = req.get("cursor")
    fetch_all = not requested
    cursor_name = cursor["topic_name"] if cursor is not None else ""

    def refused(code: int) -> dict:  # Kafka's answer to a request it throws on: each topic asked for, this error
        return {"throttle_time_ms": 0, "topics": [_dtp_topic(n, code) for n in requested],
                "next_cursor": None}

    names = {n for n in (broker.metadata.topics if fetch_all else requested) if n >= cursor_name}
    if cursor is not None and ((not fetch_all and cursor_name not in names) or cursor["partition_index"] < 0):
        return refused(errors.E_INVALID_REQUEST)  # the cursor's topic must be asked for; its partition valid
    if cursor is None and "" in names:  # Kafka 4.4 fails on an empty name without a cursor (its own NPE)
        return refused(errors.E_UNKNOWN_SERVER_ERROR)
    authorized, denied = [], []
    for name in sorted(names):
        if allowed(ctx, Op.DESCRIBE, RT.TOPIC, name):
            authorized.append(name)
        elif not fetch_all:  # the existence of a topic not authorized is not disclosed
            denied.append(_dtp_topic(name, errors.E_TOPIC_AUTHORIZATION_FAILED))
    all_ops = authorized_operations(ResourceType.TOPIC, True)
    remaining = max(1, min(broker.config["max.request.partition.size.limit"], req["response_partition_limit"]))
    alive = {b.id for b in broker.alive_brokers()}
    topics, next_cursor = [], None
    for name in authorized:
        if remaining <= 0:
            next_cursor = {"topic_name": name, "partition_index": 0}
            break
        ops = _ops(ctx, name, all_ops)
        topic = broker.metadata.topics.get(name)
        if topic is None:
            if not fetch_all:
                try:
                    validate_topic_name(name)
                    error = errors.E_UNKNOWN_TOPIC_OR_PARTITION
                except errors.InvalidTopicError:
                    error = errors.E_INVALID_TOPIC_EXCEPTION
                topics.append(_dtp_topic(name, error, ops, name in INTERNAL_TOPICS))
            continue
        start = cursor["partition_index"] if cursor is not None and name == cursor_name else 0
        upper = min(len(topic.partitions), start + remaining)
        partitions = [{**partition_entry(broker, name, i, topic.partitions[i], alive), "error_code": 0,
                       "eligible_leader_replicas": [], "last_known_elr": []}
                      for i in range(start, upper) if i in topic.partitions]
        topics.append({"error_code": 0, "name": name, "topic_id": topic.topic_id, "is_internal": name in INTERNAL_TOPICS,
                       "partitions": partitions, "topic_authorized_operations": ops})
        if upper < len(topic.partitions):
            next_cursor = {"topic_name": name, "partition_index": upper}
            break
        remaining -= len(partitions)
    return {"throttle_time_ms": 0, "topics": topics + denied, "next_cursor": next_cursor}
