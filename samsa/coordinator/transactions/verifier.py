"""KIP-890 at a partition's leader: is a transactional write in the producer's open transaction?

A leader appending a transactional Produce, or the group coordinator appending a
TxnOffsetCommit, first asks the transactional id's coordinator (KIP-890 part 1): itself
when this broker coordinates the id, else the coordinator's broker with AddPartitionsToTxn
v4+ (``verify_only``). With transactions version 2 (KIP-890 part 2: Produce v12,
TxnOffsetCommit v5) the question becomes "add it": the leader adds the partition to the
transaction, and the client sends no AddPartitionsToTxn/AddOffsetsToTxn.

One answer for both paths, mapped once for the request that asked (Kafka's
AddPartitionsToTxnManager, then ReplicaManager for a Produce, the group coordinator for a
TxnOffsetCommit): a coordinator that is moving, busy or unreachable is a retriable error for
the client (NOT_ENOUGH_REPLICAS for a Produce, as older clients retry it without a metadata
refresh), a fenced producer INVALID_PRODUCER_EPOCH, a partition not in the transaction
TRANSACTION_ABORTABLE for clients that know it and INVALID_TXN_STATE for the others.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Protocol

from samsa.protocol import errors
from samsa.protocol.api_keys import ApiKey

if TYPE_CHECKING:
    from samsa.coordinator.transactions.coordinator import TransactionCoordinator

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

#: Kafka's add.partitions.to.txn.retry.backoff.ms and .max.ms: while the previous transaction
#: of the producer completes, adding a partition of the next one is retried this long.
RETRY_BACKOFF_S = 0.02
RETRY_MAX_S = 0.1

# Versions from which the client knows TRANSACTION_ABORTABLE (genericError), and from which the
# leader adds the partition (transactions version 2): Kafka's thresholds.
_ABORTABLE_FROM = {ApiKey.PRODUCE: 11, ApiKey.TXN_OFFSET_COMMIT: 4}
_ADD_FROM = {ApiKey.PRODUCE: 12, ApiKey.TXN_OFFSET_COMMIT: 5}

# What a verification error becomes in the asking request's answer.
_RETRIABLE = (errors.E_CONCURRENT_TRANSACTIONS, errors.E_NETWORK_EXCEPTION, errors.E_COORDINATOR_LOAD_IN_PROGRESS,
              errors.E_COORDINATOR_NOT_AVAILABLE, errors.E_NOT_COORDINATOR)
_AS_ANSWER: dict[ApiKey, dict[int, int]] = {
    ApiKey.PRODUCE: dict.fromkeys(_RETRIABLE, errors.E_NOT_ENOUGH_REPLICAS),
    ApiKey.TXN_OFFSET_COMMIT: {
        errors.E_NETWORK_EXCEPTION: errors.E_COORDINATOR_LOAD_IN_PROGRESS,
        errors.E_NOT_ENOUGH_REPLICAS: errors.E_COORDINATOR_NOT_AVAILABLE,
        errors.E_REQUEST_TIMED_OUT: errors.E_COORDINATOR_NOT_AVAILABLE,
        errors.E_UNKNOWN_TOPIC_OR_PARTITION: errors.E_COORDINATOR_NOT_AVAILABLE,
        errors.E_NOT_LEADER_OR_FOLLOWER: errors.E_NOT_COORDINATOR,
        errors.E_KAFKA_STORAGE_ERROR: errors.E_NOT_COORDINATOR,
    },
}


def adds_partitions(api: ApiKey, version: int) -> bool:
    """Does this request version add its partitions to the transaction (transactions version 2)?"""
    return version >= _ADD_FROM[api]


class BrokerRequests(Protocol):
    """How the verifier reaches another broker (the broker's inter-broker connections)."""

    def request_broker(self, broker_id: int, api_key: ApiKey, body: dict, min_version: int = 0) -> Awaitable[dict]:
        """Send one request to a broker; raise KafkaError or OSError when it cannot be answered."""
        ...


class TransactionVerifier:
    """The one KIP-890 check the Produce and TxnOffsetCommit handlers call."""

    def __init__(self, coordinator: TransactionCoordinator, brokers: BrokerRequests):
        self.coordinator = coordinator
        self.brokers = brokers

    async def verify(self, api: ApiKey, version: int, transactional_id: str, producer_id: int, producer_epoch: int,
                     partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        """An error code per partition, as the request ``api`` at ``version`` answers it (0: the
        write may go on; with transactions version 2 the partition is now in the transaction)."""
        add = adds_partitions(api, version)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + RETRY_MAX_S
        while True:
            codes = await self._ask(transactional_id, producer_id, producer_epoch, partitions, add)
            if not (add and errors.E_CONCURRENT_TRANSACTIONS in codes.values() and loop.time() < deadline):
                break
            await asyncio.sleep(RETRY_BACKOFF_S)  # the producer's previous transaction is completing
        return {tp: self.as_answer(api, version, code) for tp, code in codes.items()}

    @staticmethod
    def as_answer(api: ApiKey, version: int, code: int) -> int:
        """A coordinator's verification code as the asking request answers it."""
        if code == errors.E_PRODUCER_FENCED:
            return errors.E_INVALID_PRODUCER_EPOCH
        if code == errors.E_TRANSACTION_ABORTABLE and version < _ABORTABLE_FROM[api]:
            return errors.E_INVALID_TXN_STATE
        return _AS_ANSWER[api].get(code, code)

    async def _ask(self, transactional_id: str, producer_id: int, producer_epoch: int,
                   partitions: list[TopicPartition], add: bool) -> dict[TopicPartition, int]:
        """The coordinator's own answer (Kafka's codes, unmapped)."""
        coordinator = self.coordinator
        if coordinator.is_local(transactional_id):
            if add:
                return await coordinator.add_partitions(transactional_id, producer_id, producer_epoch, partitions)
            return coordinator.verify(transactional_id, producer_id, producer_epoch, partitions)
        broker_id = coordinator.coordinator_id(transactional_id)
        if broker_id is None:
            return dict.fromkeys(partitions, errors.E_COORDINATOR_NOT_AVAILABLE)
        topics: dict[str, list[int]] = {}
        for topic, index in partitions:
            topics.setdefault(topic, []).append(index)
        try:
            resp = await self.brokers.request_broker(broker_id, ApiKey.ADD_PARTITIONS_TO_TXN, {"transactions": [{
                "transactional_id": transactional_id, "producer_id": producer_id, "producer_epoch": producer_epoch,
                "verify_only": not add, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}]},
                min_version=5 if add else 4)
        except (errors.KafkaError, OSError) as e:
            log.info("verifying transaction %s at broker %d failed: %r", transactional_id, broker_id, e)
            return dict.fromkeys(partitions, errors.E_NETWORK_EXCEPTION)
        top = resp.get("error_code") or 0
        if top:  # Kafka: a broker refused as a cluster member cannot tell; the others as they are
            code = errors.E_INVALID_TXN_STATE if top == errors.E_CLUSTER_AUTHORIZATION_FAILED else top
            return dict.fromkeys(partitions, code)
        out = dict.fromkeys(partitions, errors.E_UNKNOWN_SERVER_ERROR)
        for result in resp.get("results_by_transaction") or []:
            for t in result["topic_results"]:
                for p in t["results_by_partition"]:
                    out[(t["name"], p["partition_index"])] = p["partition_error_code"]
        return out
