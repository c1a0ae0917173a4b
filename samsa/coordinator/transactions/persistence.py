"""Transactional ids in ``__transaction_state``: writing a state, reading a partition back.

A transactional id belongs to partition ``abs(hashCode(id)) % partitions`` of the topic;
the broker leading that partition coordinates it. Every transition is written there (and
replicated) before it takes effect; a new leader replays the partition. The record format
is :mod:`samsa.protocol.txn_records`.
"""

from __future__ import annotations

from collections.abc import Iterator

from samsa.clock import now_ms
from samsa.cluster.partition import Partition
from samsa.coordinator.groups.persistence import partition_for
from samsa.coordinator.host import log_chunks
from samsa.coordinator.host import CoordinatorHost
from samsa.protocol import batch, errors, records
from samsa.protocol.txn_records import (TRANSACTION_STATE_TOPIC, TxnLogValue, parse_txn_key, parse_txn_value,
                                        txn_key, txn_value)

__all__ = ["partition_for", "read_partition", "write_state"]

# Errors of the append and its replication, as the coordinator answers them (Kafka's mapping).
_AS_COORDINATOR_ERROR = {
    errors.E_UNKNOWN_TOPIC_OR_PARTITION: errors.CoordinatorNotAvailableError,
    errors.E_NOT_ENOUGH_REPLICAS: errors.CoordinatorNotAvailableError,
    errors.E_NOT_ENOUGH_REPLICAS_AFTER_APPEND: errors.CoordinatorNotAvailableError,
    errors.E_REQUEST_TIMED_OUT: errors.CoordinatorNotAvailableError,
    errors.E_NOT_LEADER_OR_FOLLOWER: errors.NotCoordinatorError,
    errors.E_KAFKA_STORAGE_ERROR: errors.NotCoordinatorError,
}


async def write_state(host: CoordinatorHost, partition_index: int, coordinator_epoch: int, transactional_id: str,
                      value: TxnLogValue | None, value_version: int = 1) -> None:
    """Append the id's state (None: its tombstone; else a value of ``value_version``) and return
    once it is replicated; raise the coordinator error a client should get otherwise."""
    try:
        partition: Partition = host.partition(TRANSACTION_STATE_TOPIC, partition_index)
        if partition.state.leader_epoch != coordinator_epoch:
            raise errors.NotCoordinatorError(f"coordinator epoch {coordinator_epoch} is over")
        ts = now_ms()
        data = bytearray(records.build_batch([(txn_key(transactional_id),
                                               None if value is None else txn_value(value, value_version), ts)]))
        info = partition.append(data, batch.validate(data), ts)
        await host.wait_for_high_watermark(partition, info.last_offset + 1,
                                           host.config["offsets.commit.timeout.ms"],
                                           host.config["transaction.state.log.min.isr"])
    except errors.KafkaError as e:
        mapped = _AS_COORDINATOR_ERROR.get(e.code)
        if mapped is not None:
            raise mapped(f"writing the state of {transactional_id} failed: {e.message}") from None
        if isinstance(e, (errors.NotCoordinatorError, errors.CoordinatorNotAvailableError)):
            raise
        raise errors.UnknownServerError(f"writing the state of {transactional_id} failed: {e.message}") from None


def read_partition(partition: Partition) -> Iterator[tuple[str, TxnLogValue | None]]:
    """Every (transactional id, state or None) record of a partition, oldest first."""
    for data, offset in log_chunks(partition):
        for record in records.iter_records(data, skip_control=True):
            if record.offset < offset or record.key is None:
                continue
            try:
                yield parse_txn_key(record.key), None if record.value is None else parse_txn_value(record.value)
            except (ValueError, UnicodeDecodeError, IndexError):
                continue
