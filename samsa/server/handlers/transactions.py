"""Transaction APIs: AddPartitionsToTxn (24), AddOffsetsToTxn (25), EndTxn (26, v5: transactions version 2),
WriteTxnMarkers (27), TxnOffsetCommit (28), DescribeProducers (61), DescribeTransactions (65),
ListTransactions (66).

The coordinator-side ones call the transaction coordinator (``ctx.broker.txn``);
TxnOffsetCommit checks with it that the group's offsets partition is in the producer's
transaction, then goes to the group coordinator; WriteTxnMarkers is the leader side of a
coordinator's marker writes. Versions that predate PRODUCER_FENCED (KIP-588) answer
INVALID_PRODUCER_EPOCH instead, as Kafka does.
"""

from __future__ import annotations

from samsa.coordinator.groups import OffsetCommitEntry, TxnOffsetCommitRequest
from samsa.protocol import errors
from samsa.protocol.api_keys import ApiKey
from samsa.server.handlers import handles
from samsa.server.handlers.authz import RT, Op, allowed, allowed_cluster, quietly_allowed
from samsa.server.txn_markers import write_local_markers


def fenced_as(code: int, version: int, first_fenced_version: int) -> int:
    """PRODUCER_FENCED for clients that know it, INVALID_PRODUCER_EPOCH for older ones."""
    if code == errors.E_PRODUCER_FENCED and version < first_fenced_version:
        return errors.E_INVALID_PRODUCER_EPOCH
    return code


# ---------------------------------------------------------------- AddPartitionsToTxn

def _topic_results(results: dict[tuple[str, int], int], version: int) -> list[dict]:
    by_topic: dict[str, list[dict]] = {}
    for (topic, index), code in results.items():
        by_topic.setdefault(topic, []).append({"partition_index": index,
                                               "partition_error_code": fenced_as(code, version, 2)})
    return [{"name": t, "results_by_partition": ps} for t, ps in by_topic.items()]


def _partitions(topics: list[dict]) -> list[tuple[str, int]]:
    return [(t["name"], p) for t in topics for p in t["partitions"]]


def _add_refused(ctx, txn_id: str, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int] | None:
    """WRITE on the transactional id, then WRITE on each topic: the answer when refused (the
    partitions that were not refused get OPERATION_NOT_ATTEMPTED, as Kafka answers)."""
    if ctx.broker.authorizer is None:
        return None
    if not allowed(ctx, Op.WRITE, RT.TRANSACTIONAL_ID, txn_id):
        return {tp: errors.E_TRANSACTIONAL_ID_AUTHORIZATION_FAILED for tp in partitions}
    denied = {t for t in {t for t, _ in partitions} if not allowed(ctx, Op.WRITE, RT.TOPIC, t)}
    if not denied:
        return None
    return {tp: errors.E_TOPIC_AUTHORIZATION_FAILED if tp[0] in denied else errors.E_OPERATION_NOT_ATTEMPTED
            for tp in partitions}


@handles(ApiKey.ADD_PARTITIONS_TO_TXN, 0, 5)
async def add_partitions_to_txn(ctx, req: dict) -> dict:
    txn = ctx.broker.txn
    v = ctx.version
    if v <= 3:
        partitions = _partitions(req["v3_and_below_topics"])
        refused = _add_refused(ctx, req["v3_and_below_transactional_id"], partitions)
        if refused is not None:
            return {"throttle_time_ms": 0, "results_by_topic_v3_and_below": _topic_results(refused, v)}
        results = await txn.add_partitions(req["v3_and_below_transactional_id"], req["v3_and_below_producer_id"],
                                           req["v3_and_below_producer_epoch"], partitions)
        return {"throttle_time_ms": 0, "results_by_topic_v3_and_below": _topic_results(results, v)}
    if not allowed_cluster(ctx, Op.CLUSTER_ACTION):  # v4+ comes from brokers
        return {"throttle_time_ms": 0, "error_code": errors.E_CLUSTER_AUTHORIZATION_FAILED,
                "results_by_transaction": []}
    out = []
    for t in req["transactions"]:  # v4+: batched, from brokers (KIP-890 verification)
        refused = _add_refused(ctx, t["transactional_id"], _partitions(t["topics"]))
        if refused is not None:
            out.append({"transactional_id": t["transactional_id"], "topic_results": _topic_results(refused, v)})
            continue
        results = await txn.add_partitions(t["transactional_id"], t["producer_id"], t["producer_epoch"],
                                           _partitions(t["topics"]), verify_only=t.get("verify_only", False))
        out.append({"transactional_id": t["transactional_id"], "topic_results": _topic_results(results, v)})
    return {"throttle_time_ms": 0, "error_code": 0, "results_by_transaction": out}


# ---------------------------------------------------------------- AddOffsetsToTxn / EndTxn

@handles(ApiKey.ADD_OFFSETS_TO_TXN, 0, 4)
async def add_offsets_to_txn(ctx, req: dict) -> dict:
    if not allowed(ctx, Op.WRITE, RT.TRANSACTIONAL_ID, req["transactional_id"]):
        return {"throttle_time_ms": 0, "error_code": errors.E_TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
    if not allowed(ctx, Op.READ, RT.GROUP, req["group_id"]):
        return {"throttle_time_ms": 0, "error_code": errors.E_GROUP_AUTHORIZATION_FAILED}
    code = await ctx.broker.txn.add_offsets(req["transactional_id"], req["producer_id"], req["producer_epoch"],
                                            req["group_id"])
    return {"throttle_time_ms": 0, "error_code": fenced_as(code, ctx.version, 2)}


@handles(ApiKey.END_TXN, 0, 5)
async def end_txn(ctx, req: dict) -> dict:
    """From v5 (transactions version 2) the coordinator bumps the epoch and answers it."""
    if not allowed(ctx, Op.WRITE, RT.TRANSACTIONAL_ID, req["transactional_id"]):
        return {"throttle_time_ms": 0, "error_code": errors.E_TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                "producer_id": -1, "producer_epoch": -1}
    try:
        producer_id, producer_epoch = await ctx.broker.txn.end_txn(
            req["transactional_id"], req["producer_id"], req["producer_epoch"], req["committed"],
            client_version=2 if ctx.version >= 5 else 0)
        code = 0
    except errors.KafkaError as e:
        code, producer_id, producer_epoch = e.code, -1, -1
    return {"throttle_time_ms": 0, "error_code": fenced_as(code, ctx.version, 2), "producer_id": producer_id,
            "producer_epoch": producer_epoch}


# ---------------------------------------------------------------- TxnOffsetCommit

@handles(ApiKey.TXN_OFFSET_COMMIT, 0, 5)
async def txn_offset_commit(ctx, req: dict) -> dict:
    broker = ctx.broker
    v = ctx.version
    refused = _txn_commit_refused(ctx, req)
    entries = [OffsetCommitEntry(t["name"], p["partition_index"], p["committed_offset"],
                                 p.get("committed_leader_epoch", -1), p.get("committed_metadata") or "")
               for t in req["topics"] if t["name"] not in refused for p in t["partitions"]]
    if not entries:
        return _txn_commit_wire(req, {}, refused, v)
    # KIP-890: the offsets partition must be in the transaction (AddOffsetsToTxn came first;
    # from v5, transactions version 2, this adds it).
    offsets_tp = broker.txn.offsets_partition(req["group_id"])
    code = (await broker.verifier.verify(ApiKey.TXN_OFFSET_COMMIT, v, req["transactional_id"], req["producer_id"],
                                         req["producer_epoch"], [offsets_tp]))[offsets_tp]
    if code:
        codes = [code] * len(entries)
    else:
        codes = await broker.groups.txn_commit(TxnOffsetCommitRequest(
            req["group_id"], req["producer_id"], req["producer_epoch"], entries, req.get("generation_id", -1),
            req.get("member_id", ""), req.get("group_instance_id")))
    return _txn_commit_wire(req, {(e.topic, e.partition): c for e, c in zip(entries, codes)}, refused, v)


def _txn_commit_refused(ctx, req: dict) -> dict[str, int]:
    """Topic -> error for what TxnOffsetCommit may not touch: WRITE on the transactional id,
    READ on the group, READ on each topic (Kafka's checks)."""
    if ctx.broker.authorizer is None:
        return {}
    names = [t["name"] for t in req["topics"]]
    if not allowed(ctx, Op.WRITE, RT.TRANSACTIONAL_ID, req["transactional_id"]):
        return dict.fromkeys(names, errors.E_TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not allowed(ctx, Op.READ, RT.GROUP, req["group_id"]):
        return dict.fromkeys(names, errors.E_GROUP_AUTHORIZATION_FAILED)
    return {n: errors.E_TOPIC_AUTHORIZATION_FAILED for n in names if not allowed(ctx, Op.READ, RT.TOPIC, n)}


def _txn_commit_wire(req: dict, codes: dict[tuple[str, int], int], refused: dict[str, int], v: int) -> dict:
    return {"throttle_time_ms": 0, "topics": [
        {"name": t["name"], "partitions": [
            {"partition_index": p["partition_index"],
             "error_code": refused.get(t["name"]) or fenced_as(codes[(t["name"], p["partition_index"])], v, 3)}
            for p in t["partitions"]]}
        for t in req["topics"]]}


# ---------------------------------------------------------------- WriteTxnMarkers

@handles(ApiKey.WRITE_TXN_MARKERS, 0, 1)
async def write_txn_markers(ctx, req: dict) -> dict:
    out = []
    authorized = allowed_cluster(ctx, Op.CLUSTER_ACTION)
    for m in req["markers"]:
        partitions = [(t["name"], p) for t in m["topics"] for p in t["partition_indexes"]]
        if not authorized:
            results = dict.fromkeys(partitions, errors.E_CLUSTER_AUTHORIZATION_FAILED)
        else:
            results = await write_local_markers(ctx.broker, m["producer_id"], m["producer_epoch"],
                                                m["coordinator_epoch"], m["transaction_result"], partitions)
        by_topic: dict[str, list[dict]] = {}
        for (topic, index), code in results.items():
            by_topic.setdefault(topic, []).append({"partition_index": index, "error_code": code})
        out.append({"producer_id": m["producer_id"],
                    "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]})
    return {"markers": out}


# ---------------------------------------------------------------- DescribeTransactions / ListTransactions

@handles(ApiKey.DESCRIBE_TRANSACTIONS, 0, 0)
def describe_transactions(ctx, req: dict) -> dict:
    states = []
    secured = ctx.broker.authorizer is not None
    for txn_id in req["transactional_ids"]:
        if secured and not allowed(ctx, Op.DESCRIBE, RT.TRANSACTIONAL_ID, txn_id):
            states.append({"error_code": errors.E_TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "transactional_id": txn_id,
                           "transaction_state": "", "transaction_timeout_ms": 0, "transaction_start_time_ms": -1,
                           "producer_id": -1, "producer_epoch": -1, "topics": []})
            continue
        d = ctx.broker.txn.describe(txn_id)
        topics: dict[str, list[int]] = {}
        for topic, index in d.partitions:
            if not secured or quietly_allowed(ctx, Op.DESCRIBE, RT.TOPIC, topic):  # Kafka hides the others
                topics.setdefault(topic, []).append(index)
        states.append({"error_code": d.error, "transactional_id": txn_id, "transaction_state": d.state,
                       "transaction_timeout_ms": d.timeout_ms, "transaction_start_time_ms": d.start_ms,
                       "producer_id": d.producer_id, "producer_epoch": d.producer_epoch,
                       "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()]})
    return {"throttle_time_ms": 0, "transaction_states": states}


@handles(ApiKey.LIST_TRANSACTIONS, 0, 1)
def list_transactions(ctx, req: dict) -> dict:
    unknown, listings = ctx.broker.txn.list_transactions(req.get("state_filters") or [],
                                                         req.get("producer_id_filters") or [],
                                                         req.get("duration_filter", -1))
    if ctx.broker.authorizer is not None:
        listings = [t for t in listings if quietly_allowed(ctx, Op.DESCRIBE, RT.TRANSACTIONAL_ID, t.transactional_id)]
    return {"throttle_time_ms": 0, "error_code": 0, "unknown_state_filters": unknown,
            "transaction_states": [{"transactional_id": t.transactional_id, "producer_id": t.producer_id,
                                    "transaction_state": t.state} for t in listings]}


# ---------------------------------------------------------------- DescribeProducers

@handles(ApiKey.DESCRIBE_PRODUCERS, 0, 0)
def describe_producers(ctx, req: dict) -> dict:
    """The producers a partition's leader knows, with the start of their open transaction."""
    topics = []
    for t in req["topics"]:
        parts = []
        readable = allowed(ctx, Op.READ, RT.TOPIC, t["name"])
        for index in t["partition_indexes"]:
            if not readable:
                parts.append({"partition_index": index, "error_code": errors.E_TOPIC_AUTHORIZATION_FAILED,
                              "error_message": None, "active_producers": []})
                continue
            try:
                partition = ctx.broker.replicas.partition(t["name"], index)
            except errors.KafkaError as e:
                parts.append({"partition_index": index, "error_code": e.code, "error_message": e.message,
                              "active_producers": []})
                continue
            producers = partition.log.producer_state.producers
            parts.append({"partition_index": index, "error_code": 0, "error_message": None, "active_producers": [
                {"producer_id": pid, "producer_epoch": e.epoch, "last_sequence": e.last_seq,
                 "last_timestamp": e.last_timestamp, "coordinator_epoch": e.coordinator_epoch,
                 "current_txn_start_offset": e.txn_first_offset} for pid, e in sorted(producers.items())]})
        topics.append({"name": t["name"], "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}
