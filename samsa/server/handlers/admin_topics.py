"""CreateTopics (19), DeleteTopics (20), CreatePartitions (37).

``timeout_ms`` is one deadline for the whole request, as Kafka's controller has it: not
positive, every topic the caller may change is answered REQUEST_TIMED_OUT and nothing is done
(Kafka 4.4 does so); a change stored but not applied here by the deadline is answered
REQUEST_TIMED_OUT and finishes in the background.
"""

import asyncio

from samsa.protocol import errors
from samsa.protocol.api_keys import ApiKey
from samsa.server.handlers import handles
from samsa.server.handlers.authz import RT, Op, allowed, allowed_cluster
from samsa.server.handlers.admin_configs import topic_entries
from samsa.server.handlers.mutation_quota import MutationQuota


def _fail(e: errors.KafkaError) -> dict:
    return {"error_code": e.code, "error_message": e.message}


_TIMED_OUT = {"error_code": errors.E_REQUEST_TIMED_OUT, "error_message": None}


def _deadline(timeout_ms: int) -> float:
    return asyncio.get_running_loop().time() + timeout_ms / 1000


def _left_ms(deadline: float) -> int:
    """What is left of the request's timeout (at least 1 ms: the deadline has a wait, however short)."""
    return max(1, int((deadline - asyncio.get_running_loop().time()) * 1000))


@handles(ApiKey.CREATE_TOPICS)
async def create_topics(ctx, req: dict) -> dict:
    broker = ctx.broker
    results = []
    quota = MutationQuota(ctx)
    validate_only = req.get("validate_only", False)
    cluster_create = allowed_cluster(ctx, Op.CREATE)
    authorized = {t["name"] for t in req["topics"] if cluster_create or allowed(ctx, Op.CREATE, RT.TOPIC, t["name"])}
    try:  # before any topic is looked at, as Kafka's controller (on the topics the caller may create)
        broker.admin.check_new_partitions([(t["num_partitions"], len(t["assignments"]))
                                           for t in req["topics"] if t["name"] in authorized])
    except errors.KafkaError as e:
        return {"throttle_time_ms": 0, "topics": [
            {"name": t["name"], "num_partitions": -1, "replication_factor": -1, **_fail(e)} for t in req["topics"]]}
    names = [t["name"] for t in req["topics"]]
    duplicated = {n for n in names if names.count(n) > 1}
    deadline = _deadline(req["timeout_ms"])
    for t in req["topics"]:
        name = t["name"]
        if name in duplicated:
            continue
        try:
            if name not in authorized:
                raise errors.TopicAuthorizationFailedError("Authorization failed.")
            if req["timeout_ms"] <= 0:
                results.append({"name": name, "num_partitions": -1, "replication_factor": -1, **_TIMED_OUT})
                continue
            if not validate_only:
                quota.check()
            assignments = {a["partition_index"]: a["broker_ids"] for a in t["assignments"]}
            if len(assignments) != len(t["assignments"]) and t["num_partitions"] == t["replication_factor"] == -1:
                seen = [a["partition_index"] for a in t["assignments"]]
                raise errors.InvalidReplicaAssignmentError("Found multiple manual partition assignments for partition "
                                                           f"{next(i for i in seen if seen.count(i) > 1)}")
            configs = {c["name"]: c["value"] for c in t["configs"] if c["value"] is not None}
            topic = await broker.admin.create_topic_requested(
                name, t["num_partitions"], t["replication_factor"], assignments, configs,
                validate_only=validate_only, timeout_ms=_left_ms(deadline))
            if not validate_only:
                quota.record(len(topic.partitions))
            results.append({
                "name": name, "topic_id": topic.topic_id, "error_code": 0, "error_message": None,
                "num_partitions": len(topic.partitions), "replication_factor": topic.replication_factor,
                "configs": [{"name": c["name"], "value": c["value"], "read_only": False,
                             "config_source": c["config_source"], "is_sensitive": False}
                            for c in topic_entries(broker, name, None, False, topic.configs)],
            })
        except errors.RequestTimedOutError:  # as Kafka's controller answers a deadline passed: no message
            results.append({"name": name, "num_partitions": -1, "replication_factor": -1, **_TIMED_OUT})
        except errors.KafkaError as e:
            results.append({"name": name, "num_partitions": -1, "replication_factor": -1, **_fail(e)})
    # a name twice in one request: Kafka answers it once, after the others
    results += [{"name": n, "num_partitions": -1, "replication_factor": -1,
                 **_fail(errors.InvalidRequestError("Duplicate topic name."))} for n in dict.fromkeys(names) if n in duplicated]
    return quota.respond({"throttle_time_ms": 0, "topics": results})


@handles(ApiKey.DELETE_TOPICS)
async def delete_topics(ctx, req: dict) -> dict:
    broker = ctx.broker
    if ctx.version >= 6:
        wanted = [(t["name"] or broker.metadata.topic_ids.get(t["topic_id"]), t["topic_id"]) for t in req["topics"]]
    else:
        wanted = [(n, None) for n in req["topic_names"]]
    responses = []
    quota = MutationQuota(ctx)
    deadline = _deadline(req["timeout_ms"])
    for name, topic_id in wanted:
        entry = {"name": name, "topic_id": topic_id or bytes(16), "error_code": 0}
        try:
            if name is None:
                raise errors.UnknownTopicIdError("no topic has this id")
            if not allowed(ctx, Op.DELETE, RT.TOPIC, name):
                raise errors.TopicAuthorizationFailedError("Authorization failed.")
            if req["timeout_ms"] <= 0:
                raise errors.RequestTimedOutError()
            topic = broker.metadata.topics.get(name)
            entry["topic_id"] = topic.topic_id if topic else entry["topic_id"]
            if topic is not None:
                quota.check()
            await broker.admin.delete_topic(name, _left_ms(deadline))
            quota.record(len(topic.partitions) if topic is not None else 0)
        except errors.RequestTimedOutError as e:  # no message, as Kafka's controller
            entry.update(error_code=e.code, error_message=None)
        except errors.KafkaError as e:
            entry.update(_fail(e))
        responses.append(entry)
    return quota.respond({"throttle_time_ms": 0, "responses": responses})


@handles(ApiKey.CREATE_PARTITIONS)
async def create_partitions(ctx, req: dict) -> dict:
    results = []
    quota = MutationQuota(ctx)
    try:
        ctx.broker.admin.check_added_partitions([(t["name"], t["count"]) for t in req["topics"]
                                                 if allowed(ctx, Op.ALTER, RT.TOPIC, t["name"])])
    except errors.KafkaError as e:
        return {"throttle_time_ms": 0, "results": [{"name": t["name"], **_fail(e)} for t in req["topics"]]}
    deadline = _deadline(req["timeout_ms"])
    for t in req["topics"]:
        try:
            if not allowed(ctx, Op.ALTER, RT.TOPIC, t["name"]):
                raise errors.TopicAuthorizationFailedError("Authorization failed.")
            if req["timeout_ms"] <= 0:
                results.append({"name": t["name"], **_TIMED_OUT})
                continue
            topic = ctx.broker.metadata.topics.get(t["name"])
            before = len(topic.partitions) if topic is not None else t["count"]
            if not req["validate_only"] and topic is not None:
                quota.check()
            assignments = [a["broker_ids"] for a in t["assignments"]] if t["assignments"] else None
            await ctx.broker.admin.create_partitions(t["name"], t["count"], assignments, req["validate_only"],
                                                     _left_ms(deadline))
            if not req["validate_only"]:
                quota.record(t["count"] - before)
            results.append({"name": t["name"], "error_code": 0, "error_message": None})
        except (errors.UnknownTopicOrPartitionError, errors.RequestTimedOutError) as e:  # Kafka gives no message
            results.append({"name": t["name"], "error_code": e.code, "error_message": None})
        except errors.KafkaError as e:
            results.append({"name": t["name"], **_fail(e)})
    return quota.respond({"throttle_time_ms": 0, "results": results})
