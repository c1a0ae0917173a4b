"""ShareFetch (78) and ShareAcknowledge (79): share groups' reads and acknowledgements (KIP-932).

A share group member fetches in a share session (``server/share/sessions``): epoch 0 opens
it with the request's partitions, each later request carries the next epoch and may add
partitions or forget some, -1 closes it and releases what the member holds. The records
come from the share partitions this broker leads (``server/share/manager``): each partition
acquires what is available for the member, whole log batches at a time, and the answer
carries the batches as read from the log with the acquired ranges and their delivery
counts. Acknowledgements ride on a ShareFetch or come alone in a ShareAcknowledge; they are
applied and written before the fetch reads. A fetch that acquires nothing waits up to
MaxWaitMs for an append or for records released in one of its partitions.
"""

from __future__ import annotations

import asyncio
import logging

from samsa.protocol import errors
from samsa.protocol.api_keys import ApiKey
from samsa.server.handlers import handles
from samsa.server.handlers.authz import RT, Op, allowed
from samsa.server.share.partition import GAP, REJECT, RENEW
from samsa.server.share.sessions import FINAL_EPOCH, INITIAL_EPOCH, ShareSessionError

log = logging.getLogger(__name__)

_NO_LEADER = {"leader_id": 0, "leader_epoch": 0}  # what Kafka leaves in CurrentLeader when it has nothing to say


def _invalid(req: dict, fetch: bool) -> str | None:
    if not req.get("group_id"):
        return "the group id is missing"
    if not req.get("member_id"):
        return "the member id is missing"
    return None


def _error_body(code: int, message: str | None, fetch: bool) -> dict:
    body = {"throttle_time_ms": 0, "error_code": code, "error_message": message, "responses": [],
            "node_endpoints": []}
    if fetch:
        body["acquisition_lock_timeout_ms"] = 0
    return body


def _check_batches(batches: list[dict], max_type: int) -> list[tuple[int, int, list[int]]] | None:
    """The acknowledgement batches as (first, last, types); None if one is malformed (INVALID_REQUEST)."""
    out = []
    for b in batches:
        first, last, types = b["first_offset"], b["last_offset"], list(b["acknowledge_types"] or [])
        if first < 0 or last < first or not types or (len(types) != 1 and len(types) != last - first + 1):
            return None
        if any(t < GAP or t > max_type for t in types):
            return None
        out.append((first, last, types))
    return out


class _Answer:
    """The partitions of one answer, by topic id, with the leaders to name for NOT_LEADER_OR_FOLLOWER."""

    def __init__(self, broker, listener: str):
        self.broker = broker
        self.listener = listener
        self.topics: dict[bytes, dict[int, dict]] = {}
        self.leaders: set[int] = set()

    def entry(self, topic_id: bytes, index: int, template: dict) -> dict:
        parts = self.topics.setdefault(topic_id, {})
        if index not in parts:
            parts[index] = {"partition_index": index, "current_leader": dict(_NO_LEADER), **template}
        return parts[index]

    def leader_of(self, entry: dict, name: str | None, index: int) -> None:
        topic = self.broker.metadata.topics.get(name) if name else None
        state = topic.partitions.get(index) if topic is not None else None
        if state is not None and state.leader >= 0:
            entry["current_leader"] = {"leader_id": state.leader, "leader_epoch": state.leader_epoch}
            self.leaders.add(state.leader)

    def body(self) -> tuple[list, list]:
        responses = [{"topic_id": tid, "partitions": list(parts.values())} for tid, parts in self.topics.items()]
        endpoints = []
        for node in sorted(self.leaders):
            info = self.broker.cluster.broker_info(node)
            endpoint = info.endpoint(self.listener) if info is not None else None
            if endpoint is not None:
                endpoints.append({"node_id": node, "host": endpoint[0], "port": endpoint[1], "rack": info.rack})
        return responses, endpoints


def _set_error(answer: _Answer, entry: dict, field: str, code: int, message: str | None, name: str | None,
               index: int) -> None:
    entry[field] = code
    entry[field.replace("error_code", "error_message")] = message
    if code == errors.E_NOT_LEADER_OR_FOLLOWER:
        answer.leader_of(entry, name, index)


async def _acknowledge_all(ctx, req: dict, answer: _Answer, template: dict, field: str, max_type: int,
                           denied: set[bytes]) -> None:
    """Apply the request's acknowledgements, partition by partition, into ``answer``."""
    broker = ctx.broker
    shares = broker.shares
    group, member = req["group_id"], req["member_id"]
    work = []
    for t in req["topics"]:
        tid = t["topic_id"]
        name = broker.metadata.topic_ids.get(tid)
        for p in t["partitions"]:
            batches = p.get("acknowledgement_batches") or []
            if not batches:
                continue
            index = p["partition_index"]
            entry = answer.entry(tid, index, template)
            if name is None:
                entry[field] = errors.E_UNKNOWN_TOPIC_ID
            elif tid in denied:
                entry[field] = errors.E_TOPIC_AUTHORIZATION_FAILED
            elif (checked := _check_batches(batches, max_type)) is None:
                entry[field] = errors.E_INVALID_REQUEST
            else:
                work.append((entry, name, index, shares.acknowledge(group, member, tid, name, index, checked)))
    if work:
        results = await asyncio.gather(*(w[3] for w in work))
        for (entry, name, index, _), (code, message) in zip(work, results):
            _set_error(answer, entry, field, code, message, name, index)


def _denied_topics(ctx, req: dict) -> set[bytes]:
    names = ctx.broker.metadata.topic_ids
    return {t["topic_id"] for t in req["topics"]
            if t["topic_id"] in names and not allowed(ctx, Op.READ, RT.TOPIC, names[t["topic_id"]])}


# ---------------------------------------------------------------------------------- ShareFetch

def _refused(ctx, req: dict, fetch: bool) -> dict | None:
    """ShareFetch's (``fetch``) or ShareAcknowledge's answer to a malformed request or a group the
    principal may not read; None if the request may go on."""
    if (why := _invalid(req, fetch)) is not None:
        log.debug("%s refused (INVALID_REQUEST): %s", "ShareFetch" if fetch else "ShareAcknowledge", why)
        return _error_body(errors.E_INVALID_REQUEST, None, fetch)
    if not allowed(ctx, Op.READ, RT.GROUP, req["group_id"]):
        return _error_body(errors.E_GROUP_AUTHORIZATION_FAILED, None, fetch)
    return None


_FETCH_TEMPLATE = {"error_code": 0, "error_message": None, "acknowledge_error_code": 0,
                   "acknowledge_error_message": None, "records": b"", "acquired_records": []}


@handles(ApiKey.SHARE_FETCH, 1, 2)
async def share_fetch(ctx, req: dict) -> dict:
    broker = ctx.broker
    shares = broker.shares
    if (refused := _refused(ctx, req, True)) is not None:
        return refused
    group, member, epoch = req["group_id"], req["member_id"], req["share_session_epoch"]
    acks = any(p.get("acknowledgement_batches") for t in req["topics"] for p in t["partitions"])
    requested = [(t["topic_id"], p["partition_index"]) for t in req["topics"] for p in t["partitions"]]
    try:
        if epoch == INITIAL_EPOCH:
            if acks:
                log.debug("ShareFetch refused (INVALID_REQUEST): acknowledgements on the opening request")
                return _error_body(errors.E_INVALID_REQUEST, None, True)
            session = shares.sessions.open(group, member, requested, ctx.connection)
        elif epoch == FINAL_EPOCH:
            session = None
            if shares.sessions.close(group, member) is None:
                raise ShareSessionError(errors.E_SHARE_SESSION_NOT_FOUND,
                                        f"no share session for member {member} of group {group}")
        else:
            session = shares.sessions.get(group, member, epoch)
            for tp in requested:
                session.partitions[tp] = None
            for f in req.get("forgotten_topics_data") or []:
                for index in f["partitions"]:
                    session.partitions.pop((f["topic_id"], index), None)
    except ShareSessionError as e:
        return _error_body(e.code, None, True)
    lock_ms = shares.lock_duration_ms(group)
    answer = _Answer(broker, ctx.connection.listener)
    denied = _denied_topics(ctx, req)
    renew = _renewing(ctx, req)
    await _acknowledge_all(ctx, req, answer, _FETCH_TEMPLATE, "acknowledge_error_code",
                           RENEW if renew else REJECT, denied)
    if session is None:  # the final request: acknowledgements only, then the member's records go back
        await shares.release_member(group, member)
        return _fetch_body(answer, lock_ms)
    if renew:  # KIP-1222: a request renewing locks fetches nothing
        return _fetch_body(answer, lock_ms)
    if epoch == INITIAL_EPOCH:
        for tid, index in session.partitions:
            answer.entry(tid, index, _FETCH_TEMPLATE)
    return await _fetch(ctx, req, session, answer, lock_ms, denied)


def _renewing(ctx, req: dict) -> bool:
    """A v2 request with IsRenewAck: RENEW (4) acknowledgements are allowed (share.renew.acknowledge.enable
    is not a Samsa group key: always on, Kafka's default)."""
    return ctx.version >= 2 and bool(req.get("is_renew_ack"))


def _fetch_body(answer: _Answer, lock_ms: int) -> dict:
    responses, endpoints = answer.body()
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "acquisition_lock_timeout_ms": lock_ms,
            "responses": responses, "node_endpoints": endpoints}


async def _fetch(ctx, req: dict, session, answer: _Answer, lock_ms: int, denied: set[bytes]) -> dict:
    broker = ctx.broker
    shares = broker.shares
    group, member = req["group_id"], req["member_id"]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(req["max_wait_ms"], 0) / 1000
    while True:
        got, readable = await _acquire(ctx, req, session, answer, denied)
        if got or not readable or loop.time() >= deadline or ctx.connection.closed \
                or shares.sessions.of_member(group, member) is not session:
            return _fetch_body(answer, lock_ms)
        fut = shares.watch(readable)
        try:
            await broker.replicas.wait_watched(fut, readable, max(deadline - loop.time(), 0))
        except asyncio.TimeoutError:
            pass
        finally:
            shares.unwatch(fut)


async def _acquire(ctx, req: dict, session, answer: _Answer, denied: set[bytes]) -> tuple[bool, list]:
    """One pass over the session's partitions: (anything acquired or an error to answer, the
    partitions that may have records later)."""
    broker = ctx.broker
    shares = broker.shares
    group, member = req["group_id"], req["member_id"]
    max_records = req["max_records"] if req["max_records"] > 0 else 500
    batch_size = req["batch_size"] if req["batch_size"] > 0 else max_records
    record_limit = ctx.version >= 2 and req.get("share_acquire_mode", 0) == 1  # KIP-1206
    remaining_bytes = req["max_bytes"]  # 0: no records at all, as Kafka answers fetch.max.bytes=0
    got = False
    readable = []
    for tid, index in list(session.partitions):
        name = broker.metadata.topic_ids.get(tid)
        if name is None:
            _set_error(answer, answer.entry(tid, index, _FETCH_TEMPLATE), "error_code", errors.E_UNKNOWN_TOPIC_ID,
                       None, None, index)
            got = True
            continue
        if tid in denied or not allowed(ctx, Op.READ, RT.TOPIC, name):
            answer.entry(tid, index, _FETCH_TEMPLATE)["error_code"] = errors.E_TOPIC_AUTHORIZATION_FAILED
            got = True
            continue
        if max_records <= 0 or remaining_bytes <= 0:
            continue
        result = await shares.fetch(group, member, tid, name, index, max_records, batch_size, remaining_bytes,
                                    record_limit)
        if result.error:
            _set_error(answer, answer.entry(tid, index, _FETCH_TEMPLATE), "error_code", result.error,
                       result.message, name, index)
            got = True
            continue
        if result.acquired:
            entry = answer.entry(tid, index, _FETCH_TEMPLATE)
            entry["records"] = result.records
            entry["acquired_records"] = [{"first_offset": r.first_offset, "last_offset": r.last_offset,
                                          "delivery_count": r.delivery_count} for r in result.acquired]
            max_records -= sum(r.last_offset - r.first_offset + 1 for r in result.acquired)
            remaining_bytes -= len(result.records)
            got = True
            continue
        try:
            readable.append(broker.replicas.partition(name, index))
        except errors.KafkaError:
            pass
    return got, readable


# ---------------------------------------------------------------------------------- ShareAcknowledge

_ACK_TEMPLATE = {"error_code": 0, "error_message": None}


@handles(ApiKey.SHARE_ACKNOWLEDGE, 1, 2)
async def share_acknowledge(ctx, req: dict) -> dict:
    broker = ctx.broker
    shares = broker.shares
    if (refused := _refused(ctx, req, False)) is not None:
        return refused
    group, member, epoch = req["group_id"], req["member_id"], req["share_session_epoch"]
    try:
        if epoch == INITIAL_EPOCH:
            raise ShareSessionError(errors.E_INVALID_SHARE_SESSION_EPOCH,
                                    "a ShareAcknowledge cannot open a share session")
        if epoch == FINAL_EPOCH:
            if shares.sessions.close(group, member) is None:
                raise ShareSessionError(errors.E_SHARE_SESSION_NOT_FOUND,
                                        f"no share session for member {member} of group {group}")
        else:
            shares.sessions.get(group, member, epoch)
    except ShareSessionError as e:
        return _error_body(e.code, None, False)
    answer = _Answer(broker, ctx.connection.listener)
    await _acknowledge_all(ctx, req, answer, _ACK_TEMPLATE, "error_code",
                           RENEW if _renewing(ctx, req) else REJECT, _denied_topics(ctx, req))
    if epoch == FINAL_EPOCH:
        await shares.release_member(group, member)
    responses, endpoints = answer.body()
    body = {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "responses": responses,
            "node_endpoints": endpoints}
    if ctx.version >= 2:
        body["acquisition_lock_timeout_ms"] = shares.lock_duration_ms(group)
    return body
