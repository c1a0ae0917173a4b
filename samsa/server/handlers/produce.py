"""Produce (0): validate each partition's record set and append it as bytes.

The hot path: no record is decoded. Batches are checked (framing, magic, CRC32C, size),
then the log patches offsets into them and writes them. acks=0 gets no answer; acks=all
waits until the high watermark covers the append, or times out.
"""

from __future__ import annotations

import asyncio
import logging

from samsa.clock import now_ms
from samsa.protocol import batch, errors, records
from samsa.protocol.api_keys import ApiKey
from samsa.server.handlers import handles
from samsa.server.handlers.authz import RT, Op, allowed

log = logging.getLogger(__name__)


def append_partition(broker, topic: str, index: int, records, acks: int, now: int) -> tuple[dict, object]:
    """Append one partition's records; (response entry, what an acks=all answer waits for, or None)."""
    partition = None
    try:
        if records is None or len(records) == 0:
            raise errors.InvalidRecordError("empty record set")
        partition = broker.replicas.partition(topic, index)
        config = partition.log.config
        topic_config = broker.metadata.topic_config(topic)
        batches = batch.validate(records)
        for pos, header in batches:
            if header.size > config.max_message_bytes:
                raise errors.MessageTooLargeError(
                    f"batch of {header.size} bytes is larger than max.message.bytes ({config.max_message_bytes})")
            check_client_batch(records, pos, header)
        check_timestamps(topic_config, batches, now)
        if config.compact_enabled:
            _check_keys(records, batches, topic, index)
        codec = topic_config["compression.type"]
        if codec != "producer" and any(h.compression != CODECS[codec] for _, h in batches):
            records = recompress(records, batches, CODECS[codec])
            batches = batch.validate(records)
        if len(records) > config.segment_bytes:
            raise errors.RecordListTooLargeError(
                f"record set of {len(records)} bytes is larger than segment.bytes ({config.segment_bytes})")
        min_isr = topic_config["min.insync.replicas"] if acks == -1 else None
        info = broker.replicas.append(partition, records, batches, now, min_isr)
        if broker.stats is not None:
            broker.stats.produced(topic, sum(h.record_count for _, h in batches), len(records))
        # A retry of one of a producer's last batches: answered as its first success was, as Kafka does.
        entry = {"index": index, "error_code": 0,
                 "base_offset": info.base_offset, "log_append_time_ms": info.log_append_time,
                 "log_start_offset": info.log_start_offset}
        return entry, (partition, info.last_offset + 1, min_isr)
    except errors.KafkaError as e:
        if broker.stats is not None:
            broker.stats.produce_failed(topic, len(records) if records is not None else 0)
        log.debug("produce to %s-%d refused: %s", topic, index, e)
        # As Kafka: the partition's log start offset, except for the errors it answers with none;
        # a message only for a record that failed validation (record_errors), null otherwise.
        start = -1 if partition is None or e.code in _NO_LOG_START else partition.log.log_start_offset
        return {"index": index, "error_code": e.code, "base_offset": -1, "log_append_time_ms": -1,
                "log_start_offset": start, "error_message": e.message if e.code in _WITH_MESSAGE else None,
                "record_errors": getattr(e, "record_errors", [])}, None


_NO_LOG_START = {errors.E_UNKNOWN_TOPIC_OR_PARTITION, errors.E_NOT_LEADER_OR_FOLLOWER, errors.E_MESSAGE_TOO_LARGE,
                 errors.E_RECORD_LIST_TOO_LARGE, errors.E_CORRUPT_MESSAGE, errors.E_KAFKA_STORAGE_ERROR}
_WITH_MESSAGE = {errors.E_INVALID_RECORD, errors.E_INVALID_TIMESTAMP}


def check_client_batch(data, pos: int, h: batch.BatchHeader) -> None:
    """What Kafka refuses in a batch from a client even with a good CRC (INVALID_RECORD / CORRUPT_MESSAGE)."""
    if h.is_control:
        raise errors.InvalidRecordError("Clients are not allowed to write control records")
    if h.record_count <= 0 or h.last_offset_delta != h.record_count - 1:
        raise errors.InvalidRecordError(
            f"Inconsistent batch offset range: {h.record_count} record(s), last offset delta {h.last_offset_delta}")
    if h.producer_id >= 0 and h.base_sequence < 0:
        raise errors.InvalidRecordError(
            f"Invalid sequence number {h.base_sequence} in record batch with producerId {h.producer_id}")
    if h.is_transactional and h.producer_id < 0:
        raise errors.InvalidRecordError("Transactional batch without a producer id")
    records.check_framing(data, pos, h)


def check_timestamps(config: dict, batches, now: int) -> None:
    """message.timestamp.before.max.ms / after.max.ms (and the older difference.max.ms)."""
    if config["message.timestamp.type"] == "LogAppendTime":
        return
    before = min(config["message.timestamp.before.max.ms"], config["message.timestamp.difference.max.ms"])
    after = min(config["message.timestamp.after.max.ms"], config["message.timestamp.difference.max.ms"])
    if before >= batch.LONG_MAX_TS and after >= batch.LONG_MAX_TS:
        return
    for _, h in batches:
        for ts in (h.base_timestamp, h.max_timestamp):
            if ts < now - before or ts > now + after:
                raise errors.InvalidTimestampError(
                    f"Timestamp {ts} of a record is out of range: the broker's time is {now}, "
                    f"message.timestamp.before.max.ms={before}, message.timestamp.after.max.ms={after}")


CODECS = {"uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def recompress(data, batches, codec: int) -> bytearray:
    """compression.type set on the topic or broker: rebuild each batch with that codec."""
    out = bytearray()
    for pos, h in batches:
        _, recs = records.decode_batch(data, pos)
        out += records.build_batch(recs, compression=codec, producer_id=h.producer_id,
                                   producer_epoch=h.producer_epoch, base_sequence=h.base_sequence,
                                   is_transactional=h.is_transactional, is_control=h.is_control)
    return out


class RecordErrors(errors.InvalidRecordError):
    """Some records of a batch are refused (KIP-467): the client fails just those records."""

    def __init__(self, message: str, record_errors: list[dict]):
        super().__init__(message)
        self.record_errors = record_errors


def _check_keys(data, batches, topic: str, index: int) -> None:
    """A compacted topic keeps the latest record per key: a record without one is refused."""
    why = f"Compacted topic cannot accept message without key in topic partition {topic}-{index}."
    for pos, _ in batches:
        _, recs = records.decode_batch(data, pos)
        keyless = [{"batch_index": i, "batch_index_error_message": why} for i, r in enumerate(recs) if r.key is None]
        if keyless:
            raise RecordErrors(f"One or more records have been rejected due to {len(keyless)} record errors "
                               f"in total, the first: {why}", keyless)


def _verify_then_produce(ctx, req: dict, transactional_id: str | None):
    """KIP-890: a transactional Produce asks the id's coordinator (the verifier) about the
    partitions where the producer has no open transaction yet, then appends."""
    if transactional_id is not None and (ctx.version >= 12 or  # v12+: the verification adds the partitions
                                         ctx.broker.config["transaction.partition.verification.enable"]):
        need, producer = _unverified(ctx.broker, req)
        if need:
            return _verified_produce(ctx, req, transactional_id, producer, need)
    return _produce(ctx, req, None)


def _unverified(broker, req: dict) -> tuple[list[tuple[str, int]], tuple[int, int] | None]:
    """The partitions of a transactional Produce whose producer has no transaction open there
    (a partition with one was verified when it opened), and the batches' (producer id, epoch)."""
    need: list[tuple[str, int]] = []
    producer = None
    for t in req["topic_data"]:
        for p in t["partition_data"]:
            data = p["records"]
            if data is None or len(data) < batch.HEADER_SIZE:
                continue
            h = batch.read_header(data, 0)
            if not h.is_transactional:
                continue
            producer = (h.producer_id, h.producer_epoch)
            try:
                plog = broker.replicas.partition(t["name"], p["index"]).log
            except errors.KafkaError:
                continue  # the append answers the error
            entry = plog.producer_state.producers.get(h.producer_id)
            if entry is None or entry.epoch != h.producer_epoch or entry.txn_first_offset < 0:
                need.append((t["name"], p["index"]))
    return need, producer


async def _verified_produce(ctx, req: dict, transactional_id: str, producer: tuple[int, int],
                            need: list[tuple[str, int]]):
    results = await ctx.broker.verifier.verify(ApiKey.PRODUCE, ctx.version, transactional_id, *producer, need)
    refused = {tp: code for tp, code in results.items() if code}
    result = _produce(ctx, req, refused)
    return await result if asyncio.iscoroutine(result) else result


@handles(ApiKey.PRODUCE, 0, 12)
def produce(ctx, req: dict):
    txn_id = req.get("transactional_id")
    if txn_id is None and _has_transactional_batch(req):
        # Kafka: transactional records need the request's transactional id (to authorize it)
        return _refuse_all(req, errors.E_TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if ctx.broker.authorizer is not None:
        denied = _unauthorized(ctx, req, txn_id)
        if denied is not None:
            return denied
    if txn_id is not None:
        return _verify_then_produce(ctx, req, txn_id)
    return _produce(ctx, req, None)


def _refuse_all(req: dict, code: int) -> dict:
    return {"throttle_time_ms": 0, "responses": [
        {"name": t["name"], "partition_responses": [{"index": p["index"], "error_code": code, "base_offset": -1,
                                                     "log_start_offset": -1}
                                                    for p in t["partition_data"]]} for t in req["topic_data"]]}


def _has_transactional_batch(req: dict) -> bool:
    """Whether a partition's records start with a transactional batch (what Kafka looks at)."""
    for t in req["topic_data"]:
        for p in t["partition_data"]:
            records = p["records"]
            if records is not None and len(records) >= batch.HEADER_SIZE and records[16] == batch.MAGIC and \
                    records[22] & batch.TRANSACTIONAL_BIT:  # attributes: big-endian int16 at 21, its low byte
                return True
    return False


def _unauthorized(ctx, req: dict, txn_id: str | None) -> dict | None:
    """WRITE on each topic (and on the transactional id): a refused topic's partitions get
    TOPIC_AUTHORIZATION_FAILED and the rest of the request is written, as Kafka does."""
    if txn_id is not None and not allowed(ctx, Op.WRITE, RT.TRANSACTIONAL_ID, txn_id):
        return _refuse_all(req, errors.E_TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    denied = [t for t in req["topic_data"] if not allowed(ctx, Op.WRITE, RT.TOPIC, t["name"])]
    if not denied:
        return None
    req["topic_data"] = [t for t in req["topic_data"] if t not in denied]
    refused = [{"name": t["name"], "partition_responses": [
        {"index": p["index"], "error_code": errors.E_TOPIC_AUTHORIZATION_FAILED, "base_offset": -1}
        for p in t["partition_data"]]} for t in denied]
    if req["acks"] == 0:
        ctx.connection.close("an acks=0 produce was not authorized")
        return None
    result = _verify_then_produce(ctx, req, txn_id) if req["topic_data"] else {"responses": [], "throttle_time_ms": 0}
    if isinstance(result, dict):
        result["responses"] = refused + result["responses"]
        return result

    async def later() -> dict:
        body = await result
        body["responses"] = refused + body["responses"]
        return body
    return later()


def _produce(ctx, req: dict, refused: dict[tuple[str, int], int] | None):
    broker = ctx.broker
    acks = req["acks"]
    now = now_ms()
    responses = []
    waits = []
    for t in req["topic_data"]:
        name = t["name"]
        entries = []
        for p in t["partition_data"]:
            if acks not in (0, 1, -1):
                entry, wait = {"index": p["index"], "error_code": errors.E_INVALID_REQUIRED_ACKS,
                               "base_offset": -1}, None
            elif refused and (name, p["index"]) in refused:
                code = refused[(name, p["index"])]
                entry, wait = {"index": p["index"], "error_code": code, "base_offset": -1, "log_start_offset": -1,
                               "log_append_time_ms": -1,
                               "error_message": "Partition was not added to the transaction"
                               if code == errors.E_INVALID_TXN_STATE else errors.error_name(code)}, None
            else:
                entry, wait = append_partition(broker, name, p["index"], p["records"], acks, now)
            if entry["error_code"]:
                log.warning("produce to %s-%d from %s refused: %s", name, p["index"], ctx.connection.peer,
                            entry.get("error_message") or errors.error_name(entry["error_code"]))
            entries.append(entry)
            if wait is not None and acks == -1:
                waits.append((entry, wait))
        responses.append({"name": name, "partition_responses": entries})
    if acks == 0:
        if any(e["error_code"] for t in responses for e in t["partition_responses"]):
            # Nothing goes back with acks=0: closing the connection is how Kafka tells the producer.
            ctx.connection.close("an acks=0 produce failed")
        return None
    body = {"responses": responses, "throttle_time_ms": 0}
    pending = [(e, w) for e, w in waits if w[0].high_watermark < w[1] or len(w[0].state.isr) < w[2]]
    if not pending:
        return body
    return _await_replication(broker, body, pending, req["timeout_ms"])


async def _await_replication(broker, body: dict, pending: list, timeout_ms: int) -> dict:
    """Park an acks=all answer until every partition's high watermark covers its append."""
    async def wait(entry: dict, partition, offset: int, min_isr: int) -> None:
        try:
            await broker.replicas.wait_for_high_watermark(partition, offset, timeout_ms, min_isr)
        except errors.KafkaError as e:
            entry["error_code"] = e.code
            entry["error_message"] = e.message
    await asyncio.gather(*(wait(entry, *w) for entry, w in pending))
    return body
