"""Fetch (1): byte ranges of the logs, long-polled until ``min_bytes`` or ``max_wait_ms``.

Consumers read below the high watermark (read_committed ones below the last stable offset,
with the aborted transactions of what they read); a follower (``replica_id`` >= 0) reads up
to the log end. The records go out as the bytes read from the segment file, never decoded. With
too little data, the request waits on the partitions' next high-watermark change rather
than polling. Fetch sessions (KIP-227) are not kept: every response has session id 0,
which tells clients to send full fetches.
"""

from __future__ import annotations

import asyncio

from samsa.protocol import errors
from samsa.protocol.api_keys import ApiKey
from samsa.protocol.batch import iter_headers
from samsa.server.handlers import handles
from samsa.server.handlers.authz import RT, Op, allowed, allowed_cluster

INT32_MAX = 2147483647
READ_COMMITTED = 1


def _partition_error(index: int, code: int) -> dict:
    return {"partition_index": index, "error_code": code, "high_watermark": -1,
            "last_stable_offset": -1, "log_start_offset": -1, "records": b""}


def collect(broker, req: dict, version: int) -> tuple[list, int, list]:
    """Read every requested partition; (topic responses, bytes read, partitions read)."""
    replica_id = (req["replica_state"] or {}).get("replica_id", -1) if version >= 15 else req["replica_id"]
    read_committed = replica_id < 0 and req.get("isolation_level", 0) == READ_COMMITTED
    remaining = req.get("max_bytes", INT32_MAX) if version >= 3 else INT32_MAX
    total = 0
    touched = []
    responses = []
    for t in req["topics"]:
        name = t.get("topic") if version <= 12 else broker.metadata.topic_ids.get(t["topic_id"])
        parts = []
        for p in t["partitions"]:
            index = p["partition"]
            if name is None:
                parts.append(_partition_error(index, errors.E_UNKNOWN_TOPIC_ID))
                continue
            try:
                partition = broker.replicas.partition(name, index)
                check_leader_epoch(partition, p.get("current_leader_epoch", -1))
            except errors.KafkaError as e:
                parts.append(_partition_error(index, e.code))
                continue
            plog = partition.log
            lso = plog.last_stable_offset
            if replica_id >= 0:
                limit = plog.log_end_offset
            else:
                limit = lso if read_committed else partition.high_watermark
            offset = p["fetch_offset"]
            entry = {"partition_index": index, "error_code": 0, "high_watermark": partition.high_watermark,
                     "last_stable_offset": lso, "log_start_offset": plog.log_start_offset,
                     "aborted_transactions": None, "preferred_read_replica": -1, "records": b""}
            if offset < plog.log_start_offset or offset > plog.log_end_offset:
                # Kafka answers an out-of-range fetch with no watermarks (-1): ListOffsets tells where to go
                parts.append(_partition_error(index, errors.E_OFFSET_OUT_OF_RANGE))
                continue
            touched.append(partition)
            if replica_id >= 0:
                broker.replicas.follower_fetched(partition, replica_id, offset)
                entry["high_watermark"] = partition.high_watermark
                entry["last_stable_offset"] = plog.last_stable_offset
            if offset < limit and remaining > 0:
                try:
                    data = plog.read(offset, min(p["partition_max_bytes"], remaining), max_offset=limit,
                                     min_one_batch=(total == 0))
                except (OSError, errors.KafkaStorageError) as e:  # KIP-112: its log dir goes offline
                    broker.logs.failed(plog, e)
                    parts.append(_partition_error(index, errors.E_KAFKA_STORAGE_ERROR))
                    continue
                entry["records"] = data
                if read_committed:
                    entry["aborted_transactions"] = aborted_in(plog, offset, data)
                total += len(data)
                remaining -= len(data)
            parts.append(entry)
        responses.append({"topic": name, "topic_id": t.get("topic_id"), "partitions": parts})
    return responses, total, touched


def aborted_in(plog, offset: int, data: bytes) -> list[dict]:
    """The aborted transactions a read_committed consumer needs to filter ``data`` (KIP-98)."""
    if not data:
        return []
    end = offset
    for _, h in iter_headers(data):
        end = h.next_offset
    return [{"producer_id": t.producer_id, "first_offset": t.first_offset}
            for t in plog.aborted_transactions(offset, end)]


def check_leader_epoch(partition, epoch: int) -> None:
    """A request naming a leader epoch (KIP-320) must name the current one."""
    if epoch < 0 or epoch == partition.state.leader_epoch:
        return
    if epoch < partition.state.leader_epoch:
        raise errors.FencedLeaderEpochError(
            f"leader epoch {epoch} of {partition} is older than the current {partition.state.leader_epoch}")
    raise errors.UnknownLeaderEpochError(
        f"leader epoch {epoch} of {partition} is newer than the current {partition.state.leader_epoch}")


@handles(ApiKey.FETCH, 4, 17)
def fetch(ctx, req: dict):
    broker = ctx.broker
    if broker.authorizer is not None:
        refused = _unauthorized(ctx, req)
        if refused:
            responses = collect(broker, req, ctx.version)[0]
            return _body(broker, req, ctx.version, refused + responses)
    responses, total, touched = collect(broker, req, ctx.version)
    if total >= req["min_bytes"] or req["max_wait_ms"] <= 0 or not touched or _any_error(responses):
        return _body(broker, req, ctx.version, responses)
    return _long_poll(ctx, req, touched)


def _unauthorized(ctx, req: dict) -> list:
    """A follower's fetch needs CLUSTER_ACTION; a consumer's READ on each topic. The refused
    topics leave the request and come back as TOPIC_AUTHORIZATION_FAILED."""
    version = ctx.version
    replica_id = (req["replica_state"] or {}).get("replica_id", -1) if version >= 15 else req["replica_id"]
    topics = ctx.broker.metadata.topic_ids
    if replica_id >= 0:
        if allowed_cluster(ctx, Op.CLUSTER_ACTION):
            return []
        denied = list(req["topics"])
    else:
        denied = [t for t in req["topics"]
                  if not allowed(ctx, Op.READ, RT.TOPIC, t.get("topic") if version <= 12
                                 else topics.get(t["topic_id"], ""))]
    req["topics"] = [t for t in req["topics"] if t not in denied]
    code = errors.E_TOPIC_AUTHORIZATION_FAILED if replica_id < 0 else errors.E_CLUSTER_AUTHORIZATION_FAILED
    return [{"topic": t.get("topic"), "topic_id": t.get("topic_id"),
             "partitions": [_partition_error(p["partition"], code) for p in t["partitions"]]} for t in denied]


def _any_error(responses: list) -> bool:
    """A partition error answers the fetch at once, as Kafka does."""
    return any(p["error_code"] for t in responses for p in t["partitions"])


def _body(broker, req: dict, version: int, responses: list) -> dict:
    if broker.stats is not None:
        replica_id = (req["replica_state"] or {}).get("replica_id", -1) if version >= 15 else req["replica_id"]
        broker.stats.fetched(responses, follower=replica_id >= 0)
    return {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": responses}


async def _long_poll(ctx, req: dict, touched: list) -> dict:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + req["max_wait_ms"] / 1000
    while True:
        try:
            await ctx.broker.replicas.wait_for_change(touched, max(deadline - loop.time(), 0))
        except asyncio.TimeoutError:
            pass
        responses, total, touched = collect(ctx.broker, req, ctx.version)
        if (total >= req["min_bytes"] or loop.time() >= deadline or not touched or ctx.connection.closed
                or _any_error(responses)):
            return _body(ctx.broker, req, ctx.version, responses)
