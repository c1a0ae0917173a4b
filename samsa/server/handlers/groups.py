"""Consumer group APIs: FindCoordinator (10), JoinGroup (11), Heartbeat (12), LeaveGroup (13),
SyncGroup (14), DescribeGroups (15), ListGroups (16), OffsetCommit (8), OffsetFetch (9),
DeleteGroups (42), OffsetDelete (47). The logic is in :mod:`samsa.coordinator`."""

from samsa.protocol import errors
from samsa.server.handlers import handles

GROUP_KEY, TRANSACTION_KEY = 0, 1


def _client_host(ctx) -> str:
    return "/" + ctx.connection.peer.rsplit(":", 1)[0]


def _coordinator(ctx, key: str, key_type: int) -> dict:
    try:
        if key_type == TRANSACTION_KEY:
            raise errors.CoordinatorNotAvailableError("transactions are not supported by Samsa yet")
        if key_type != GROUP_KEY:
            raise errors.InvalidRequestError(f"unknown coordinator key type {key_type}")
        if not key:
            raise errors.InvalidGroupIdError("group id must not be empty")
        b = ctx.broker.groups.coordinator_for(key)
        return {"key": key, "node_id": b.id, "host": b.host, "port": b.port, "error_code": 0, "error_message": None}
    except errors.KafkaError as e:
        return {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": e.code, "error_message": e.message}


@handles(10)
def find_coordinator(ctx, req: dict) -> dict:
    key_type = req.get("key_type", GROUP_KEY)
    if ctx.version >= 4:
        return {"throttle_time_ms": 0,
                "coordinators": [_coordinator(ctx, k, key_type) for k in req["coordinator_keys"]]}
    c = _coordinator(ctx, req["key"], key_type)
    return {"throttle_time_ms": 0, "error_code": c["error_code"], "error_message": c["error_message"],
            "node_id": c["node_id"], "host": c["host"], "port": c["port"]}


@handles(11)
def join_group(ctx, req: dict):
    return ctx.broker.groups.join(req, ctx.version, ctx.header.client_id or "", _client_host(ctx))


@handles(14)
def sync_group(ctx, req: dict):
    return ctx.broker.groups.sync(req)


@handles(12)
def heartbeat(ctx, req: dict) -> dict:
    return {"throttle_time_ms": 0, "error_code": ctx.broker.groups.heartbeat(req)}


@handles(13)
def leave_group(ctx, req: dict) -> dict:
    if ctx.version <= 2:
        error, codes = ctx.broker.groups.leave(req["group_id"], [(req["member_id"], None)])
        return {"throttle_time_ms": 0, "error_code": error or codes[0]}
    members = [(m["member_id"], m.get("group_instance_id")) for m in req["members"]]
    error, codes = ctx.broker.groups.leave(req["group_id"], members)
    return {"throttle_time_ms": 0, "error_code": error,
            "members": [{"member_id": m, "group_instance_id": i, "error_code": c}
                        for (m, i), c in zip(members, codes)]}


@handles(8)
def offset_commit(ctx, req: dict):
    return ctx.broker.groups.commit(req, ctx.version)


@handles(9)
def offset_fetch(ctx, req: dict) -> dict:
    groups = ctx.broker.groups
    if ctx.version <= 7:
        error, topics = groups.fetch_offsets(req["group_id"], req["topics"])
        if error and ctx.version < 2:
            topics = [{"name": t["name"], "partitions": [
                {"partition_index": p, "committed_offset": -1, "metadata": "", "error_code": error}
                for p in t["partition_indexes"]]} for t in req["topics"] or []]
        return {"throttle_time_ms": 0, "topics": topics, "error_code": error}
    out = []
    for g in req["groups"]:
        error, topics = groups.fetch_offsets(g["group_id"], g["topics"])
        out.append({"group_id": g["group_id"], "topics": topics, "error_code": error})
    return {"throttle_time_ms": 0, "groups": out}


@handles(16)
def list_groups(ctx, req: dict) -> dict:
    return {"throttle_time_ms": 0, "error_code": 0,
            "groups": ctx.broker.groups.list_groups(req.get("states_filter"))}


@handles(15)
def describe_groups(ctx, req: dict) -> dict:
    return {"throttle_time_ms": 0, "groups": [ctx.broker.groups.describe(g) for g in req["groups"]]}


@handles(42)
async def delete_groups(ctx, req: dict) -> dict:
    return {"throttle_time_ms": 0, "results": await ctx.broker.groups.delete_groups(req["groups_names"])}


@handles(47)
async def offset_delete(ctx, req: dict) -> dict:
    """Partitions that do not exist answer UNKNOWN_TOPIC_OR_PARTITION; the coordinator sees the rest.
    A group error leaves the partitions out, as Kafka does."""
    known, unknown = [], []
    for t in req["topics"]:
        info = ctx.broker.topics.get(t["name"])
        exists = [p for p in t["partitions"] if info is not None and p["partition_index"] in info.partitions]
        if exists:
            known.append({"name": t["name"], "partitions": exists})
        unknown += [(t["name"], p["partition_index"]) for p in t["partitions"] if p not in exists]
    error, topics = await ctx.broker.groups.delete_offsets(req["group_id"], known)
    if error:
        return {"error_code": error, "throttle_time_ms": 0, "topics": []}
    by_name = {t["name"]: t for t in topics}
    for name, index in unknown:
        entry = by_name.setdefault(name, {"name": name, "partitions": []})
        entry["partitions"].append({"partition_index": index, "error_code": errors.E_UNKNOWN_TOPIC_OR_PARTITION})
    return {"error_code": 0, "throttle_time_ms": 0,
            "topics": [by_name[t["name"]] for t in req["topics"] if t["name"] in by_name]}
