"""Consumer group APIs: FindCoordinator (10), JoinGroup (11), Heartbeat (12), LeaveGroup (13),
SyncGroup (14), DescribeGroups (15), ListGroups (16), OffsetCommit (8), OffsetFetch (9),
DeleteGroups (42), OffsetDelete (47); the consumer group protocol (KIP-848):
ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69); share groups (KIP-932):
ShareGroupHeartbeat (76) and ShareGroupDescribe (77).

Each handler turns the request's wire dict into the typed request of
:mod:`samsa.coordinator.groups`, calls the group coordinator (``ctx.broker.groups``) and
turns its typed answer into the response's wire dict, version differences included."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any

from samsa.coordinator.groups import (ConsumerHeartbeat, ConsumerHeartbeatResult, StreamsHeartbeat, StreamsHeartbeatResult, GroupDescription, HeartbeatRequest, JoinRequest, JoinResult, LeavingMember,
                                      OffsetCommitEntry, OffsetCommitRequest, ShareHeartbeat, SyncRequest, SyncResult)
from samsa.coordinator.groups.streams_groups import ACCEPTABLE_RECOVERY_LAG, TASK_OFFSET_INTERVAL_MS
from samsa.coordinator.share.coordinator import parse_coordinator_key
from samsa.protocol import errors
from samsa.protocol.acl import ResourceType, authorized_operations
from samsa.protocol.api_keys import ApiKey
from samsa.server.handlers import handles
from samsa.server.handlers.authz import CLUSTER_NAME, RT, Op, allowed, operations, quietly_allowed

GROUP_KEY, TRANSACTION_KEY, SHARE_KEY = 0, 1, 2


def _client_host(ctx) -> str:
    return "/" + ctx.connection.peer.rsplit(":", 1)[0]


async def _later(reply: Awaitable[Any], to_wire: Callable[[Any], dict]) -> dict:
    """A parked coordinator answer, as a wire dict once the rebalance sets it."""
    return to_wire(await reply)


def _coordinator(ctx, key: str, key_type: int) -> dict:
    if ctx.broker.authorizer is not None:
        if key_type == TRANSACTION_KEY and not allowed(ctx, Op.DESCRIBE, RT.TRANSACTIONAL_ID, key):
            return {"key": key, "node_id": -1, "host": "", "port": -1,
                    "error_code": errors.E_TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "error_message": None}
        if key_type == GROUP_KEY and not allowed(ctx, Op.DESCRIBE, RT.GROUP, key):
            return {"key": key, "node_id": -1, "host": "", "port": -1,
                    "error_code": errors.E_GROUP_AUTHORIZATION_FAILED, "error_message": None}
        if key_type == SHARE_KEY and not allowed(ctx, Op.CLUSTER_ACTION, RT.CLUSTER, CLUSTER_NAME):
            return {"key": key, "node_id": -1, "host": "", "port": -1,
                    "error_code": errors.E_CLUSTER_AUTHORIZATION_FAILED, "error_message": None}
    try:
        if key_type == SHARE_KEY:  # a share partition's coordinator (KIP-932): "group:topicId:partition"
            try:
                share_key = parse_coordinator_key(key)
            except errors.InvalidRequestError as e:  # Kafka 4.4: INVALID_REQUEST with an empty message
                return {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": e.code, "error_message": ""}
            b = ctx.broker.share.coordinator_for(share_key)
            host, port = b.endpoint(ctx.connection.listener) or (b.host, b.port)
            return {"key": key, "node_id": b.id, "host": host, "port": port, "error_code": 0,
                    "error_message": None}
        if key_type == TRANSACTION_KEY:
            if not key:
                raise errors.InvalidRequestError("transactional id must not be empty")
            b = ctx.broker.txn.coordinator_for(key)
            host, port = b.endpoint(ctx.connection.listener) or (b.host, b.port)
            return {"key": key, "node_id": b.id, "host": host, "port": port, "error_code": 0,
                    "error_message": None}
        if key_type != GROUP_KEY:
            raise errors.InvalidRequestError(f"unknown coordinator key type {key_type}")
        if not key:
            raise errors.InvalidGroupIdError("group id must not be empty")
        b = ctx.broker.groups.coordinator_for(key)
        host, port = b.endpoint(ctx.connection.listener) or (b.host, b.port)
        return {"key": key, "node_id": b.id, "host": host, "port": port, "error_code": 0, "error_message": None}
    except errors.KafkaError as e:
        return {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": e.code, "error_message": e.message}


@handles(ApiKey.FIND_COORDINATOR)
def find_coordinator(ctx, req: dict) -> dict:
    key_type = req.get("key_type", GROUP_KEY)
    if ctx.version >= 4:
        return {"throttle_time_ms": 0,
                "coordinators": [_coordinator(ctx, k, key_type) for k in req["coordinator_keys"]]}
    c = _coordinator(ctx, req["key"], key_type)
    return {"throttle_time_ms": 0, "error_code": c["error_code"], "error_message": c["error_message"],
            "node_id": c["node_id"], "host": c["host"], "port": c["port"]}


# ---------------------------------------------------------------- JoinGroup / SyncGroup

def _join_wire(r: JoinResult, version: int) -> dict:
    if r.error:
        # ProtocolName may be null from v7 on; before, Kafka answers an empty string
        return {"error_code": r.error, "generation_id": -1, "protocol_name": None if version >= 7 else "",
                "leader": "",
                "member_id": r.member_id, "members": []}
    return {"error_code": 0, "generation_id": r.generation_id, "protocol_type": r.protocol_type,
            "protocol_name": r.protocol_name, "leader": r.leader, "skip_assignment": r.skip_assignment,
            "member_id": r.member_id,
            "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id, "metadata": m.metadata}
                        for m in r.members]}


@handles(ApiKey.JOIN_GROUP)
def join_group(ctx, req: dict):
    if not allowed(ctx, Op.READ, RT.GROUP, req["group_id"]):
        return {"throttle_time_ms": 0, "error_code": errors.E_GROUP_AUTHORIZATION_FAILED}
    v = ctx.version
    result = ctx.broker.groups.join(JoinRequest(
        group_id=req["group_id"], member_id=req["member_id"], group_instance_id=req.get("group_instance_id"),
        protocol_type=req["protocol_type"], protocols=[(p["name"], p["metadata"]) for p in req["protocols"]],
        session_timeout_ms=req["session_timeout_ms"],
        rebalance_timeout_ms=req["rebalance_timeout_ms"] if v >= 1 else req["session_timeout_ms"],
        client_id=ctx.header.client_id or "", client_host=_client_host(ctx),
        member_id_required=v >= 4, leader_skips_assignment=v >= 9))
    wire = functools.partial(_join_wire, version=v)
    return wire(result) if isinstance(result, JoinResult) else _later(result, wire)


def _sync_wire(r: SyncResult) -> dict:
    return {"error_code": r.error, "assignment": r.assignment, "protocol_type": r.protocol_type,
            "protocol_name": r.protocol_name}


@handles(ApiKey.SYNC_GROUP)
def sync_group(ctx, req: dict):
    if not allowed(ctx, Op.READ, RT.GROUP, req["group_id"]):
        return {"throttle_time_ms": 0, "error_code": errors.E_GROUP_AUTHORIZATION_FAILED}
    result = ctx.broker.groups.sync(SyncRequest(
        group_id=req["group_id"], member_id=req["member_id"], generation_id=req["generation_id"],
        group_instance_id=req.get("group_instance_id"), protocol_type=req.get("protocol_type"),
        protocol_name=req.get("protocol_name"),
        assignments={a["member_id"]: a["assignment"] for a in req["assignments"]}))
    return _sync_wire(result) if isinstance(result, SyncResult) else _later(result, _sync_wire)


# ---------------------------------------------------------------- Heartbeat / LeaveGroup

@handles(ApiKey.HEARTBEAT)
def heartbeat(ctx, req: dict) -> dict:
    if not allowed(ctx, Op.READ, RT.GROUP, req["group_id"]):
        return {"throttle_time_ms": 0, "error_code": errors.E_GROUP_AUTHORIZATION_FAILED}
    code = ctx.broker.groups.heartbeat(HeartbeatRequest(req["group_id"], req["member_id"], req["generation_id"],
                                                        req.get("group_instance_id")))
    return {"throttle_time_ms": 0, "error_code": code}


@handles(ApiKey.LEAVE_GROUP)
def leave_group(ctx, req: dict) -> dict:
    if not allowed(ctx, Op.READ, RT.GROUP, req["group_id"]):
        return {"throttle_time_ms": 0, "error_code": errors.E_GROUP_AUTHORIZATION_FAILED}
    if ctx.version <= 2:
        error, codes = ctx.broker.groups.leave(req["group_id"], [LeavingMember(req["member_id"])])
        return {"throttle_time_ms": 0, "error_code": error or codes[0]}
    members = [LeavingMember(m["member_id"], m.get("group_instance_id")) for m in req["members"]]
    error, codes = ctx.broker.groups.leave(req["group_id"], members)
    return {"throttle_time_ms": 0, "error_code": error,
            "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id, "error_code": c}
                        for m, c in zip(members, codes)]}


# ---------------------------------------------------------------- OffsetCommit / OffsetFetch

@handles(ApiKey.OFFSET_COMMIT)
async def offset_commit(ctx, req: dict) -> dict:
    if ctx.broker.authorizer is not None:
        refused = _commit_refused(ctx, req)
        if refused is not None:
            return refused
    entries = [OffsetCommitEntry(t["name"], p["partition_index"], p["committed_offset"],
                                 p.get("committed_leader_epoch", -1), p.get("committed_metadata") or "")
               for t in req["topics"] for p in t["partitions"]]
    codes = iter(await ctx.broker.groups.commit(OffsetCommitRequest(
        req["group_id"], entries, req.get("generation_id_or_member_epoch", -1), req.get("member_id", ""),
        req.get("group_instance_id"), ctx.version)))
    return {"throttle_time_ms": 0, "topics": [
        {"name": t["name"], "partitions": [{"partition_index": p["partition_index"], "error_code": next(codes)}
                                           for p in t["partitions"]]} for t in req["topics"]]}


def _commit_refused(ctx, req: dict) -> dict | None:
    """READ on the group, then READ on each topic (Kafka's OffsetCommit checks)."""
    if not allowed(ctx, Op.READ, RT.GROUP, req["group_id"]):
        codes = {t["name"]: errors.E_GROUP_AUTHORIZATION_FAILED for t in req["topics"]}
    else:
        codes = {t["name"]: errors.E_TOPIC_AUTHORIZATION_FAILED for t in req["topics"]
                 if not allowed(ctx, Op.READ, RT.TOPIC, t["name"])}
    if not codes:
        return None
    return {"throttle_time_ms": 0, "topics": [
        {"name": t["name"], "partitions": [{"partition_index": p["partition_index"],
                                            "error_code": codes.get(t["name"], errors.E_TOPIC_AUTHORIZATION_FAILED
                                                                    if codes else 0)}
                                           for p in t["partitions"]]} for t in req["topics"]]}


def _fetch_offsets(ctx, group_id: str, topics: list[dict] | None, require_stable: bool = False
                   ) -> tuple[int, list[dict]]:
    wanted = None if topics is None else {t["name"]: t["partition_indexes"] for t in topics}
    groups = ctx.broker.groups
    if not allowed(ctx, Op.DESCRIBE, RT.GROUP, group_id):
        return errors.E_GROUP_AUTHORIZATION_FAILED, []
    error, found = groups.fetch_offsets(group_id, wanted)
    if ctx.broker.authorizer is not None:
        found = [(topic, parts) for topic, parts in found if quietly_allowed(ctx, Op.DESCRIBE, RT.TOPIC, topic)]

    def entry(topic: str, p: int, o) -> dict:
        if require_stable and groups.unstable(group_id, (topic, p)):  # an open transaction holds an offset
            return {"partition_index": p, "committed_offset": -1, "committed_leader_epoch": -1, "metadata": "",
                    "error_code": errors.E_UNSTABLE_OFFSET_COMMIT}
        return {"partition_index": p, "committed_offset": o.offset if o else -1,
                "committed_leader_epoch": o.leader_epoch if o else -1, "metadata": o.metadata if o else "",
                "error_code": 0}
    return error, [{"name": topic, "partitions": [entry(topic, p, o) for p, o in partitions]}
                   for topic, partitions in found]


@handles(ApiKey.OFFSET_FETCH)
def offset_fetch(ctx, req: dict) -> dict:
    if ctx.version <= 7:
        error, topics = _fetch_offsets(ctx, req["group_id"], req["topics"], req.get("require_stable", False))
        if error and ctx.version < 2:
            topics = [{"name": t["name"], "partitions": [
                {"partition_index": p, "committed_offset": -1, "metadata": "", "error_code": error}
                for p in t["partition_indexes"]]} for t in req["topics"] or []]
        return {"throttle_time_ms": 0, "topics": topics, "error_code": error}
    out = []
    for g in req["groups"]:
        error, topics = _fetch_offsets(ctx, g["group_id"], g["topics"], req.get("require_stable", False))
        out.append({"group_id": g["group_id"], "topics": topics, "error_code": error})
    return {"throttle_time_ms": 0, "groups": out}


# ---------------------------------------------------------------- admin

@handles(ApiKey.LIST_GROUPS)
def list_groups(ctx, req: dict) -> dict:
    types = {t.lower() for t in req.get("types_filter") or []}
    groups = [g for g in ctx.broker.groups.list_groups(req.get("states_filter"))
              if not types or g.group_type in types]
    if ctx.broker.authorizer is not None and not quietly_allowed(ctx, Op.DESCRIBE, RT.CLUSTER, CLUSTER_NAME):
        groups = [g for g in groups if quietly_allowed(ctx, Op.DESCRIBE, RT.GROUP, g.group_id)]  # as Kafka filters
    return {"throttle_time_ms": 0, "error_code": 0, "groups": [
        {"group_id": g.group_id, "protocol_type": g.protocol_type, "group_state": str(g.state),
         "group_type": g.group_type} for g in groups]}


def _describe_wire(d: GroupDescription, operations: int, version: int = 6) -> dict:
    if version < 6 and d.error == errors.E_GROUP_ID_NOT_FOUND:
        d = GroupDescription(d.group_id, 0, d.state)  # before v6 Kafka answers a consumer group as Dead, no error
    out = {"error_code": d.error, "error_message": d.message, "group_id": d.group_id, "group_state": d.state, "protocol_type": d.protocol_type,
           "protocol_data": d.protocol,
           "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                        "client_id": m.client_id, "client_host": m.client_host, "member_metadata": m.metadata,
                        "member_assignment": m.assignment} for m in d.members]}
    if not d.error:
        out["authorized_operations"] = operations
    return out


@handles(ApiKey.DESCRIBE_GROUPS)
def describe_groups(ctx, req: dict) -> dict:
    requested = req.get("include_authorized_operations", False)
    if ctx.broker.authorizer is None:
        ops = authorized_operations(ResourceType.GROUP, requested)
        return {"throttle_time_ms": 0, "groups": [_describe_wire(ctx.broker.groups.describe(g), ops, ctx.version)
                                                  for g in req["groups"]]}
    out = []
    for g in req["groups"]:
        if not allowed(ctx, Op.DESCRIBE, RT.GROUP, g):
            out.append({"error_code": errors.E_GROUP_AUTHORIZATION_FAILED, "group_id": g, "group_state": "",
                        "protocol_type": "", "protocol_data": "", "members": []})
            continue
        ops = operations(ctx, RT.GROUP, g, requested)
        out.append(_describe_wire(ctx.broker.groups.describe(g),
                                  authorized_operations(ResourceType.GROUP, False) if ops is None else ops, ctx.version))
    return {"throttle_time_ms": 0, "groups": out}


@handles(ApiKey.DELETE_GROUPS)
async def delete_groups(ctx, req: dict) -> dict:
    names = req["groups_names"]
    denied = [] if ctx.broker.authorizer is None else [g for g in names if not allowed(ctx, Op.DELETE, RT.GROUP, g)]
    wanted = [g for g in names if g not in denied]
    results = dict(await ctx.broker.groups.delete_groups(wanted)) if wanted else {}
    results.update((g, errors.E_GROUP_AUTHORIZATION_FAILED) for g in denied)
    return {"throttle_time_ms": 0, "results": [{"group_id": g, "error_code": results[g]} for g in dict.fromkeys(names)]}


@handles(ApiKey.OFFSET_DELETE)
async def offset_delete(ctx, req: dict) -> dict:
    """Partitions that do not exist answer UNKNOWN_TOPIC_OR_PARTITION; the coordinator sees the rest.
    A group error leaves the partitions out, as Kafka does."""
    secured = ctx.broker.authorizer is not None
    if secured and not allowed(ctx, Op.DELETE, RT.GROUP, req["group_id"]):
        return {"error_code": errors.E_GROUP_AUTHORIZATION_FAILED, "throttle_time_ms": 0, "topics": []}
    known: list[tuple[str, int]] = []
    refused: list[tuple[tuple[str, int], int]] = []
    for t in req["topics"]:
        info = ctx.broker.metadata.topics.get(t["name"])
        readable = not secured or allowed(ctx, Op.READ, RT.TOPIC, t["name"])
        for p in t["partitions"]:
            tp = (t["name"], p["partition_index"])
            if not readable:
                refused.append((tp, errors.E_TOPIC_AUTHORIZATION_FAILED))
            elif info is not None and p["partition_index"] in info.partitions:
                known.append(tp)
            else:
                refused.append((tp, errors.E_UNKNOWN_TOPIC_OR_PARTITION))
    error, codes = await ctx.broker.groups.delete_offsets(req["group_id"], known)
    if error:
        return {"error_code": error, "throttle_time_ms": 0, "topics": []}
    by_name: dict[str, dict] = {}
    for (name, index), code in [*zip(known, codes), *refused]:
        entry = by_name.setdefault(name, {"name": name, "partitions": []})
        entry["partitions"].append({"partition_index": index, "error_code": code})
    return {"error_code": 0, "throttle_time_ms": 0,
            "topics": [by_name[t["name"]] for t in req["topics"] if t["name"] in by_name]}


# ---------------------------------------------------------------- the consumer group protocol (KIP-848)

def _protocol_off(ctx, feature: str) -> bool:
    """A group protocol whose feature the cluster finalized at 0 (``kafka-features disable``):
    its heartbeats are answered UNSUPPORTED_VERSION, before any authorization, as Kafka does."""
    return ctx.broker.features.level(feature) < 1


def _heartbeat_wire(r: ConsumerHeartbeatResult) -> dict:
    out = {"throttle_time_ms": 0, "error_code": r.error, "error_message": r.message, "member_id": r.member_id,
           "member_epoch": r.member_epoch, "heartbeat_interval_ms": r.heartbeat_interval_ms, "assignment": None}
    if r.assignment is not None:
        out["assignment"] = {"topic_partitions": [{"topic_id": t, "partitions": sorted(ps)}
                                                  for t, ps in sorted(r.assignment.items())]}
    return out


@handles(ApiKey.CONSUMER_GROUP_HEARTBEAT)
async def consumer_group_heartbeat(ctx, req: dict) -> dict:
    if _protocol_off(ctx, "group.version"):
        return _heartbeat_wire(ConsumerHeartbeatResult(errors.E_UNSUPPORTED_VERSION))
    if not allowed(ctx, Op.READ, RT.GROUP, req["group_id"]):
        return _heartbeat_wire(ConsumerHeartbeatResult(errors.E_GROUP_AUTHORIZATION_FAILED))
    owned = req.get("topic_partitions")
    result = await ctx.broker.groups.consumer_heartbeat(ConsumerHeartbeat(
        group_id=req["group_id"], member_id=req["member_id"], member_epoch=req["member_epoch"],
        instance_id=req.get("instance_id"), rack_id=req.get("rack_id"),
        rebalance_timeout_ms=req.get("rebalance_timeout_ms", -1),
        subscribed_topic_names=req.get("subscribed_topic_names"),
        subscribed_topic_regex=req.get("subscribed_topic_regex"), server_assignor=req.get("server_assignor"),
        owned=None if owned is None else {tp["topic_id"]: frozenset(tp["partitions"]) for tp in owned
                                          if tp["partitions"]},
        client_id=ctx.header.client_id or "", client_host=_client_host(ctx), version=ctx.version))
    return _heartbeat_wire(result)


def _assignment_wire(a: dict, names: dict) -> dict:
    return {"topic_partitions": [{"topic_id": t, "topic_name": names.get(t, ""), "partitions": sorted(ps)}
                                 for t, ps in sorted(a.items(), key=lambda kv: names.get(kv[0], ""))]}


def _describe_groups(ctx, req: dict, describe, member_wire) -> dict:
    """ConsumerGroupDescribe and ShareGroupDescribe: the same answer a group, but for the members'
    fields (``member_wire(member, target, description)``)."""
    requested = req.get("include_authorized_operations", False)
    out = []
    for group_id in req["group_ids"]:
        if not allowed(ctx, Op.DESCRIBE, RT.GROUP, group_id):
            out.append({"error_code": errors.E_GROUP_AUTHORIZATION_FAILED, "error_message": None,
                        "group_id": group_id, "group_state": "", "group_epoch": 0, "assignment_epoch": 0,
                        "assignor_name": "", "members": []})
            continue
        d = describe(group_id)
        ops = (authorized_operations(ResourceType.GROUP, requested) if ctx.broker.authorizer is None
               else operations(ctx, RT.GROUP, group_id, requested))
        out.append({
            "error_code": d.error, "error_message": d.message, "group_id": group_id, "group_state": d.state,
            "group_epoch": d.group_epoch, "assignment_epoch": d.assignment_epoch, "assignor_name": d.assignor,
            "members": [member_wire(m, target, d) for m, target in d.members],
            "authorized_operations": -2147483648 if ops is None or d.error else ops})
    return {"throttle_time_ms": 0, "groups": out}


@handles(ApiKey.CONSUMER_GROUP_DESCRIBE)
def consumer_group_describe(ctx, req: dict) -> dict:
    def member(m, target, d) -> dict:
        return {"member_id": m.member_id, "instance_id": m.instance_id, "rack_id": m.rack_id,
                "member_epoch": m.member_epoch, "client_id": m.client_id, "client_host": m.client_host,
                "subscribed_topic_names": m.subscribed_topic_names,
                "subscribed_topic_regex": m.subscribed_topic_regex,
                "assignment": _assignment_wire(m.assigned, d.topic_names),
                "target_assignment": _assignment_wire(target, d.topic_names),
                "member_type": 1}  # a member of the consumer protocol (0: classic)
    return _describe_groups(ctx, req, ctx.broker.groups.consumer_describe, member)


# ---------------------------------------------------------------- share groups (KIP-932)

@handles(ApiKey.SHARE_GROUP_HEARTBEAT)
async def share_group_heartbeat(ctx, req: dict) -> dict:
    if _protocol_off(ctx, "share.version"):
        r = ConsumerHeartbeatResult(errors.E_UNSUPPORTED_VERSION)
    elif not allowed(ctx, Op.READ, RT.GROUP, req["group_id"]):
        r = ConsumerHeartbeatResult(errors.E_GROUP_AUTHORIZATION_FAILED)
    else:
        r = await ctx.broker.groups.share_heartbeat(ShareHeartbeat(
            group_id=req["group_id"], member_id=req["member_id"], member_epoch=req["member_epoch"],
            rack_id=req.get("rack_id"), subscribed_topic_names=req.get("subscribed_topic_names"),
            client_id=ctx.header.client_id or "", client_host=_client_host(ctx)))
    return _heartbeat_wire(r)  # ShareGroupHeartbeat's response has ConsumerGroupHeartbeat's fields


@handles(ApiKey.SHARE_GROUP_DESCRIBE)
def share_group_describe(ctx, req: dict) -> dict:
    def member(m, _target, d) -> dict:
        return {"member_id": m.member_id, "rack_id": m.rack_id, "member_epoch": m.member_epoch,
                "client_id": m.client_id, "client_host": m.client_host,
                "subscribed_topic_names": m.subscribed_topic_names,
                "assignment": _assignment_wire(m.assigned, d.topic_names)}
    return _describe_groups(ctx, req, ctx.broker.groups.share_describe, member)


# ---------------------------------------------------------------- streams groups (KIP-1071)

def _streams_tasks(tasks: dict, kind: str) -> list[dict]:
    return [{"subtopology_id": sub, "partitions": sorted(ps)} for (k, sub), ps in sorted(tasks.items()) if k == kind]


@handles(ApiKey.STREAMS_GROUP_HEARTBEAT)
async def streams_group_heartbeat(ctx, req: dict) -> dict:
    if _protocol_off(ctx, "streams.version"):
        r = StreamsHeartbeatResult(errors.E_UNSUPPORTED_VERSION)
    elif not allowed(ctx, Op.READ, RT.GROUP, req["group_id"]):
        r = StreamsHeartbeatResult(errors.E_GROUP_AUTHORIZATION_FAILED)
    else:
        endpoint = req.get("user_endpoint")
        tags = req.get("client_tags")
        r = await ctx.broker.groups.streams_heartbeat(StreamsHeartbeat(
            group_id=req["group_id"], member_id=req["member_id"], member_epoch=req["member_epoch"],
            endpoint_information_epoch=req.get("endpoint_information_epoch", 0), instance_id=req.get("instance_id"),
            rack_id=req.get("rack_id"), rebalance_timeout_ms=req.get("rebalance_timeout_ms", -1),
            topology=req.get("topology"), active_tasks=req.get("active_tasks"),
            standby_tasks=req.get("standby_tasks"), warmup_tasks=req.get("warmup_tasks"),
            process_id=req.get("process_id"),
            user_endpoint=None if endpoint is None else (endpoint["host"], endpoint["port"]),
            client_tags=None if tags is None else {kv["key"]: kv["value"] for kv in tags},
            task_offsets=req.get("task_offsets"), task_end_offsets=req.get("task_end_offsets"),
            shutdown_application=req.get("shutdown_application", False),
            client_id=ctx.header.client_id or "", client_host=_client_host(ctx)))
    out = {"throttle_time_ms": 0, "error_code": r.error, "error_message": r.message, "member_id": r.member_id,
           "member_epoch": r.member_epoch, "heartbeat_interval_ms": r.heartbeat_interval_ms,
           "acceptable_recovery_lag_legacy": 0, "task_offset_interval_ms": 0, "acceptable_recovery_lag": -1,
           "status": None, "active_tasks": None, "standby_tasks": None, "warmup_tasks": None,
           "endpoint_information_epoch": r.endpoint_information_epoch,
           "partitions_by_user_endpoint": r.partitions_by_user_endpoint}
    if r.error:
        return out
    # v0's AcceptableRecoveryLagLegacy is deprecated: Kafka 4.4 answers 0 there, the lag in v1's field
    out.update({"acceptable_recovery_lag": ACCEPTABLE_RECOVERY_LAG,
                "task_offset_interval_ms": TASK_OFFSET_INTERVAL_MS,
                "status": [{"status_code": c, "status_detail": d} for c, d in r.status or []]})
    if r.tasks is not None:
        out.update({f"{kind}_tasks": _streams_tasks(r.tasks, kind) for kind in ("active", "standby", "warmup")})
    return out


@handles(ApiKey.STREAMS_GROUP_DESCRIBE)
def streams_group_describe(ctx, req: dict) -> dict:
    requested = req.get("include_authorized_operations", False)
    out = []
    for group_id in req["group_ids"]:
        if not allowed(ctx, Op.DESCRIBE, RT.GROUP, group_id):
            out.append({"error_code": errors.E_GROUP_AUTHORIZATION_FAILED, "group_id": group_id, "members": []})
            continue
        d = ctx.broker.groups.streams_describe(group_id)
        if d.error:
            out.append({"error_code": d.error, "error_message": d.message, "group_id": group_id, "group_state": "",
                        "members": [], "assignor_name": None})
            continue
        ops = (authorized_operations(ResourceType.GROUP, requested) if ctx.broker.authorizer is None
               else operations(ctx, RT.GROUP, group_id, requested))
        members = []
        for m, target in d.members:
            members.append({
                "member_id": m.member_id, "member_epoch": m.member_epoch, "instance_id": m.instance_id,
                "rack_id": m.rack_id, "client_id": m.client_id, "client_host": m.client_host,
                "topology_epoch": m.topology_epoch, "process_id": m.process_id,
                "user_endpoint": None if m.user_endpoint is None else {"host": m.user_endpoint[0],
                                                                       "port": m.user_endpoint[1]},
                "client_tags": [{"key": k, "value": v} for k, v in sorted(m.client_tags.items())],
                "task_offsets": list(m.task_offsets), "task_end_offsets": list(m.task_end_offsets),
                "assignment": {f"{k}_tasks": _streams_tasks(m.assigned, k) for k in ("active", "standby", "warmup")},
                "target_assignment": {f"{k}_tasks": _streams_tasks(target, k) for k in ("active", "standby", "warmup")},
                "is_classic": False})
        out.append({"error_code": 0, "error_message": None, "group_id": group_id, "group_state": d.state,
                    "group_epoch": d.group_epoch, "assignment_epoch": d.assignment_epoch, "topology": d.topology,
                    "members": members, "authorized_operations": -2147483648 if ops is None else ops,
                    "topology_description": None, "topology_description_status": 0, "assignor_name": d.assignor})
    return {"throttle_time_ms": 0, "groups": out}


# ---------------------------------------------------------------- share groups' offsets (KIP-932)

@handles(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS)
async def describe_share_group_offsets(ctx, req: dict) -> dict:
    out = []
    for g in req["groups"]:
        group_id = g["group_id"]
        if not allowed(ctx, Op.DESCRIBE, RT.GROUP, group_id):
            out.append({"group_id": group_id, "topics": [], "error_code": errors.E_GROUP_AUTHORIZATION_FAILED,
                        "error_message": None})
            continue
        topics = None if g["topics"] is None else {t["topic_name"]: t["partitions"] for t in g["topics"]}
        code, message, described = await ctx.broker.groups.describe_share_offsets(group_id, topics)
        out.append({"group_id": group_id, "error_code": code, "error_message": message,
                    "topics": [{"topic_name": name, "topic_id": tid, "partitions": rows}
                               for name, tid, rows in described]})
    return {"throttle_time_ms": 0, "groups": out}


@handles(ApiKey.ALTER_SHARE_GROUP_OFFSETS)
async def alter_share_group_offsets(ctx, req: dict) -> dict:
    group_id = req["group_id"]
    if not allowed(ctx, Op.READ, RT.GROUP, group_id):
        return {"throttle_time_ms": 0, "error_code": errors.E_GROUP_AUTHORIZATION_FAILED, "error_message": None,
                "responses": []}
    code, message, altered = await ctx.broker.groups.alter_share_offsets(
        group_id, {t["topic_name"]: {p["partition_index"]: p["start_offset"] for p in t["partitions"]}
                   for t in req["topics"]})
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "responses": [
        {"topic_name": name, "topic_id": tid, "partitions": [
            {"partition_index": p, "error_code": c, "error_message": m} for p, c, m in rows]}
        for name, tid, rows in altered]}


@handles(ApiKey.DELETE_SHARE_GROUP_OFFSETS)
async def delete_share_group_offsets(ctx, req: dict) -> dict:
    group_id = req["group_id"]
    if not allowed(ctx, Op.DELETE, RT.GROUP, group_id):
        return {"throttle_time_ms": 0, "error_code": errors.E_GROUP_AUTHORIZATION_FAILED, "error_message": None,
                "responses": []}
    code, message, deleted = await ctx.broker.groups.delete_share_offsets(
        group_id, [t["topic_name"] for t in req["topics"]])
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "responses": [
        {"topic_name": name, "topic_id": tid, "error_code": c, "error_message": m} for name, tid, c, m in deleted]}
