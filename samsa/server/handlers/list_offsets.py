"""ListOffsets (2): earliest, latest, by timestamp, max timestamp."""

from samsa.protocol import errors
from samsa.protocol.api_keys import ApiKey
from samsa.server.handlers import handles
from samsa.server.handlers.authz import RT, Op, allowed

LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -3, -4, -5


def lookup(partition, timestamp: int, read_committed: bool = False, client: bool = False) -> tuple[int, int]:
    """(timestamp, offset) as Kafka answers for a ListOffsets timestamp; read_committed sees
    only offsets below the last stable offset. A client asking a leader whose high watermark
    has not yet reached the start of its epoch (just elected: KIP-392) gets OFFSET_NOT_AVAILABLE
    for the latest offset, and for a timestamp found at or past what it may read."""
    plog = partition.log
    hw = plog.last_stable_offset if read_committed else partition.high_watermark
    lagging = client and _hw_behind_epoch_start(partition)
    if timestamp == LATEST:
        if lagging:
            raise errors.OffsetNotAvailableError(
                f"Failed to fetch offsets for partition {partition} with leader epoch "
                f"{partition.state.leader_epoch} as the high watermark is behind the epoch's start")
        return -1, hw
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return -1, plog.log_start_offset
    if timestamp == LATEST_TIERED:
        return -1, plog.log_start_offset - 1
    if timestamp == MAX_TIMESTAMP:
        if plog.log_end_offset == plog.log_start_offset:
            return -1, -1
        offset, ts = plog.max_timestamp_offset()
        return ts, offset
    if timestamp < 0:
        raise errors.InvalidRequestError(f"unknown special timestamp {timestamp}")
    found = plog.offset_for_timestamp(timestamp)
    if lagging and found is not None and found[0] >= hw:
        raise errors.OffsetNotAvailableError(
            f"Failed to fetch offsets for partition {partition}: the high watermark is behind the epoch's start")
    if found is None or found[0] >= hw:
        return -1, -1  # no record that late: Kafka answers UNKNOWN_OFFSET, clients read it as the end
    offset, ts = found
    return ts, offset


def _hw_behind_epoch_start(partition) -> bool:
    entries = partition.log.leader_epochs.entries
    return bool(entries) and partition.is_leader and entries[-1][0] == partition.state.leader_epoch \
        and entries[-1][1] > partition.high_watermark


@handles(ApiKey.LIST_OFFSETS, 0, 10)
def list_offsets(ctx, req: dict) -> dict:
    broker = ctx.broker
    topics = []
    for t in req["topics"]:
        parts = []
        for p in t["partitions"]:
            index = p["partition_index"]
            try:
                if not allowed(ctx, Op.DESCRIBE, RT.TOPIC, t["name"]):
                    raise errors.TopicAuthorizationFailedError("Authorization failed.")
                partition = broker.replicas.partition(t["name"], index)
                ts, offset = lookup(partition, p["timestamp"], req.get("isolation_level", 0) == 1,
                                    client=req.get("replica_id", -1) == -1)
                entry = {"partition_index": index, "error_code": 0, "timestamp": ts, "offset": offset,
                         "leader_epoch": partition.state.leader_epoch,
                         "old_style_offsets": [offset] if offset >= 0 else []}
            except errors.KafkaError as e:
                entry = {"partition_index": index, "error_code": e.code, "timestamp": -1, "offset": -1,
                         "leader_epoch": -1}
            parts.append(entry)
        topics.append({"name": t["name"], "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}
