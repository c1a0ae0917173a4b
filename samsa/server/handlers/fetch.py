"""Fetch (1): byte ranges of the logs, long-polled until ``min_bytes`` or ``max_wait_ms``.

Consumers read below the high watermark (read_committed ones below the last stable offset,
with the aborted transactions of what they read); a follower (``replica_id`` >= 0) reads up
to the log end. The records go out as the bytes read from the segment file, never decoded. With
too little data, the request waits on the partitions' next high-watermark change rather
than polling. From version 7 a fetch may belong to a fetch session (KIP-227,
``server/fetch_sessions``): the session says which partitions to read, and an incremental
answer carries only the partitions with news. A follower's long poll also ends when a
high watermark it has not seen moves, so followers learn it promptly.
"""

from __future__ import annotations

import asyncio

from samsa.broker_config import RACK_AWARE_SELECTOR
from samsa.protocol import errors
from samsa.protocol.api_keys import ApiKey
from samsa.protocol.batch import iter_headers
from samsa.server.fetch_sessions import FetchContext
from samsa.server.handlers import handles
from samsa.server.handlers.authz import RT, Op, allowed, allowed_cluster
from samsa.storage.files import FileSlice

INT32_MAX = 2147483647
# Record sets smaller than this are read into the answer (one pread); larger ones go by sendfile.
INLINE_BELOW = 4096
READ_COMMITTED = 1


def _partition_error(index: int, code: int) -> dict:
    return {"partition_index": index, "error_code": code, "high_watermark": -1,
            "last_stable_offset": -1, "log_start_offset": -1, "records": b""}


def replica_id_of(req: dict, version: int) -> int:
    return (req["replica_state"] or {}).get("replica_id", -1) if version >= 15 else req["replica_id"]


def collect(broker, req: dict, version: int, zero_copy: bool = False) -> tuple[list, int, list]:
    """Read every requested partition; (topic responses, bytes read, partitions read).
    ``zero_copy``: the records may come as FileSlices, for a connection that sends them
    with sendfile (a plaintext listener's, ``Connection.zero_copy``)."""
    replica_id = replica_id_of(req, version)
    read_committed = replica_id < 0 and req.get("isolation_level", 0) == READ_COMMITTED
    # KIP-392: a consumer of v11+ may read from a follower, and a leader with the rack-aware
    # selector points a consumer of another rack to a follower in its own.
    readable = broker.replicas.readable_partition if replica_id < 0 and version >= 11 else broker.replicas.partition
    rack = req.get("rack_id") if replica_id < 0 and version >= 11 else None
    if rack and broker.config["replica.selector.class"] != RACK_AWARE_SELECTOR:
        rack = None
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
                partition = readable(name, index)
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
            if rack:
                preferred = preferred_read_replica(broker, partition, rack, offset)
                if preferred >= 0:  # no records: the consumer fetches them from that replica
                    entry["preferred_read_replica"] = preferred
                    parts.append(entry)
                    continue
            touched.append(partition)
            if replica_id >= 0:
                broker.replicas.follower_fetched(partition, replica_id, offset)
                entry["high_watermark"] = partition.high_watermark
                entry["last_stable_offset"] = plog.last_stable_offset
            if offset < limit and remaining > 0:
                try:
                    if zero_copy:  # a FileSlice for the connection to sendfile (small reads come as bytes)
                        data = plog.read_slice(offset, min(p["partition_max_bytes"], remaining), max_offset=limit,
                                               min_one_batch=(total == 0), inline_below=INLINE_BELOW)
                    else:
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


def _zero_copy(ctx) -> bool:
    return getattr(ctx.connection, "zero_copy", False)


def preferred_read_replica(broker, partition, rack: str, offset: int) -> int:
    """RackAwareReplicaSelector: the leader if it is in the client's rack, else the in-sync
    follower of that rack that has ``offset`` (the one furthest ahead); -1 means the leader."""
    if not partition.is_leader:
        return -1
    me = broker.cluster.broker_info(broker.broker_id)
    if me is None or me.rack == rack:
        return -1
    best, best_end = -1, -1
    for r in partition.state.isr:
        if r == broker.broker_id:
            continue
        progress = partition.followers.get(r)
        info = broker.cluster.broker_info(r)
        if progress is None or info is None or info.rack != rack or progress.log_end_offset < offset:
            continue
        if progress.log_end_offset > best_end:
            best, best_end = r, progress.log_end_offset
    return best


def aborted_in(plog, offset: int, data) -> list[dict]:
    """The aborted transactions a read_committed consumer needs to filter ``data`` (KIP-98)."""
    if not data:
        return []
    if isinstance(data, FileSlice):
        end = data.end_offset
    else:
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


@handles(ApiKey.FETCH, 4, 18)  # v18 (KIP-1166): a follower's high watermark, which the leader may ignore
def fetch(ctx, req: dict):
    broker = ctx.broker
    version = ctx.version
    session = None
    if version >= 7 and (req["session_epoch"] != -1 or req["session_id"]):  # else sessionless, as before
        session = broker.fetch_sessions.context(req, version, replica_id_of(req, version) >= 0)
        if session.error:
            return {"throttle_time_ms": 0, "error_code": session.error, "session_id": 0, "responses": []}
        if session.kind == FetchContext.INCREMENTAL:
            if broker.authorizer is not None:
                session.select(None)
            else:
                return _read_session(ctx, req, session)
        req["topics"] = session.topics
    if broker.authorizer is not None:
        refused = _unauthorized(ctx, req)
        if refused:
            responses = collect(broker, req, version, _zero_copy(ctx))[0]
            return _body(broker, req, version, refused + responses, session)
    responses, total, touched = collect(broker, req, version, _zero_copy(ctx))
    if total >= req["min_bytes"] or req["max_wait_ms"] <= 0 or not touched or _any_error(responses) \
            or (session is not None and session.privileged and session.has_news(responses)):
        return _body(broker, req, version, responses, session)
    return _long_poll(ctx, req, touched, session)


def _read_session(ctx, req: dict, session):
    """An incremental fetch: the session's partitions, less the quiet ones (a consumer's
    partitions with nothing to read and nothing moved since their last answer are not
    read again, only waited on)."""
    broker = ctx.broker
    version = ctx.version
    consumer = replica_id_of(req, version) < 0
    quiet = _quiet_check(broker, req, version) if consumer else None
    still = session.select(quiet)
    req["topics"] = session.topics
    responses, total, touched = collect(broker, req, version, _zero_copy(ctx))
    if total >= req["min_bytes"] or req["max_wait_ms"] <= 0 or not (touched or still) or _any_error(responses) \
            or (session.privileged and session.has_news(responses)):
        return _body(broker, req, version, responses, session)
    return _long_poll(ctx, req, touched + still, session, quiet)


def _quiet_check(broker, req: dict, version: int):
    """``quiet(topic key, cached partition)``: the partition, if a consumer's incremental fetch
    would read nothing there and answer nothing for it (its offset is at the readable end and
    neither that end nor the log start moved since the last answer); else None."""
    readable = broker.replicas.readable_partition if version >= 11 else broker.replicas.partition
    names = broker.metadata.topic_ids if version >= 13 else None
    read_committed = req.get("isolation_level", 0) == READ_COMMITTED
    # a leader may have a preferred read replica to answer (KIP-392): not quiet there
    rack_aware = version >= 11 and bool(req.get("rack_id")) and \
        broker.config["replica.selector.class"] == RACK_AWARE_SELECTOR
    KafkaError = errors.KafkaError

    def quiet(tkey, cached):
        seen = cached.high_watermark
        if seen < 0:
            return None
        fetch = cached.fetch
        try:
            partition = readable(tkey if names is None else names.get(tkey), fetch["partition"])
        except KafkaError:
            return None
        epoch = fetch.get("current_leader_epoch", -1)
        if epoch >= 0 and epoch != partition.state.leader_epoch or rack_aware and partition.is_leader:
            return None
        plog = partition.log
        hw = plog.high_watermark
        if hw != seen or plog.log_start_offset != cached.log_start_offset:
            return None
        if fetch["fetch_offset"] != (plog.last_stable_offset if read_committed else hw):
            return None
        return partition
    return quiet


def _unauthorized(ctx, req: dict) -> list:
    """A follower's fetch needs CLUSTER_ACTION; a consumer's READ on each topic. The refused
    topics leave the request and come back as TOPIC_AUTHORIZATION_FAILED."""
    version = ctx.version
    replica_id = replica_id_of(req, version)
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
    """A partition error, or a preferred read replica, answers the fetch at once, as Kafka does."""
    return any(p["error_code"] or p.get("preferred_read_replica", -1) >= 0 for t in responses for p in t["partitions"])


def _body(broker, req: dict, version: int, responses: list, session=None) -> dict:
    if broker.stats is not None:
        broker.stats.fetched(responses, follower=replica_id_of(req, version) >= 0)
    if session is None:
        return {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": responses}
    responses = session.respond(responses)
    return {"throttle_time_ms": 0, "error_code": 0, "session_id": session.session_id, "responses": responses}


def _long_poll(ctx, req: dict, touched: list, session=None, quiet=None):
    """The parked part of a fetch; it watches ``touched`` from now, before it first runs."""
    return _parked(ctx, req, touched, ctx.broker.replicas.watch_changes(touched), session, quiet)


async def _parked(ctx, req: dict, touched: list, watch, session, quiet) -> dict:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + req["max_wait_ms"] / 1000
    replicas = ctx.broker.replicas
    while True:
        try:
            if watch is not None:
                await replicas.wait_watched(watch, touched, max(deadline - loop.time(), 0))
                watch = None
            else:
                await replicas.wait_for_change(touched, max(deadline - loop.time(), 0))
        except asyncio.TimeoutError:
            pass
        still = []
        if quiet is not None:
            still = session.select(quiet)
            req["topics"] = session.topics
        responses, total, touched = collect(ctx.broker, req, ctx.version, _zero_copy(ctx))
        if still:
            touched = touched + still
        if (total >= req["min_bytes"] or loop.time() >= deadline or not touched or ctx.connection.closed
                or _any_error(responses) or (session is not None and session.privileged and session.has_news(responses))):
            return _body(ctx.broker, req, ctx.version, responses, session)
