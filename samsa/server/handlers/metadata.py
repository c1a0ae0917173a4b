"""Metadata (3): brokers, controller, topics and who leads each partition."""

from samsa.protocol import errors
from samsa.protocol.acl import OPERATIONS_NOT_REQUESTED, ResourceType, authorized_operations  # noqa: F401
from samsa.protocol.names import validate_topic_name
from samsa.protocol.api_keys import ApiKey
from samsa.server.handlers import handles
from samsa.server.handlers.authz import RT, Op, allowed, allowed_cluster, operations, quietly_allowed

INTERNAL_TOPICS = ("__consumer_offsets", "__transaction_state")


def topic_entry(broker, name: str, topic_id: bytes | None = None, error: int = 0,
                operations: int = OPERATIONS_NOT_REQUESTED) -> dict:
    topic = broker.metadata.topics.get(name)
    if topic is None or error:
        return {"error_code": error or errors.E_UNKNOWN_TOPIC_OR_PARTITION, "name": name,
                "topic_id": topic_id or bytes(16), "partitions": [],
                "topic_authorized_operations": OPERATIONS_NOT_REQUESTED}
    alive = {b.id for b in broker.alive_brokers()}
    partitions = []
    me = broker.broker_id
    for index, state in sorted(topic.partitions.items()):
        # KIP-112: this broker's replica is offline when its log dir failed; leading from there, none leads
        offline_here = broker.logs.is_offline(name, index)
        leader_alive = state.leader in alive and not (offline_here and state.leader == me)
        partitions.append({
            "error_code": 0 if leader_alive else errors.E_LEADER_NOT_AVAILABLE,
            "partition_index": index,
            "leader_id": state.leader if leader_alive else -1,
            "leader_epoch": state.leader_epoch,
            "replica_nodes": state.replicas,
            "isr_nodes": state.isr,
            "offline_replicas": [r for r in state.replicas if r not in alive or (offline_here and r == me)],
        })
    return {"error_code": 0, "name": name, "topic_id": topic.topic_id,
            "is_internal": name in INTERNAL_TOPICS, "partitions": partitions,
            "topic_authorized_operations": operations}


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
