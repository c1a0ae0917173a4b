"""A transactional producer's side of KIP-98: its transactional id, producer id and epoch,
the partitions and groups of the open transaction, and the requests to the transaction
coordinator (and, for offsets, the group coordinator).

States as Java's TransactionManager: UNINITIALIZED -> (init_transactions) READY ->
(begin_transaction) IN_TRANSACTION -> (commit/abort) READY. With transactions version 2
(KIP-890 part 2: the coordinator's broker finalizes ``transaction.version`` 2) no
AddPartitionsToTxn or AddOffsetsToTxn is sent — Produce v12 and TxnOffsetCommit v5 add their
partitions — and every EndTxn (v5) answers the producer's next epoch. A failed send or request in a
transaction is an abortable error (the application aborts and goes on); a fenced producer
(PRODUCER_FENCED, INVALID_PRODUCER_EPOCH, TRANSACTIONAL_ID_AUTHORIZATION_FAILED) is fatal:
every later call raises it, and the producer can only be closed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any

from samsa.client.connection import BrokerConnection, KafkaConnectionError
from samsa.client.metadata import ClusterMetadata
from samsa.client.consumer_internals.subscription import IllegalStateError
from samsa.client.types import ConsumerGroupMetadata, OffsetAndMetadata, TopicPartition
from samsa.protocol import errors
from samsa.protocol.api_keys import ApiKey

log = logging.getLogger(__name__)

UNINITIALIZED, READY, IN_TRANSACTION, ABORTABLE_ERROR, FATAL_ERROR = (
    "UNINITIALIZED", "READY", "IN_TRANSACTION", "ABORTABLE_ERROR", "FATAL_ERROR")
TRANSACTION_KEY, GROUP_KEY = 1, 0
__all__ = ["IllegalStateError", "TransactionManager"]

_RETRY = {errors.E_COORDINATOR_NOT_AVAILABLE, errors.E_NOT_COORDINATOR, errors.E_COORDINATOR_LOAD_IN_PROGRESS,
          errors.E_CONCURRENT_TRANSACTIONS, errors.E_UNKNOWN_TOPIC_OR_PARTITION, errors.E_REQUEST_TIMED_OUT}
_FATAL = {errors.E_PRODUCER_FENCED, errors.E_INVALID_PRODUCER_EPOCH, errors.E_TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
          errors.E_INVALID_PRODUCER_ID_MAPPING, errors.E_UNSUPPORTED_VERSION, errors.E_INVALID_TXN_STATE}


class TransactionManager:
    def __init__(self, cluster: ClusterMetadata, transactional_id: str, timeout_ms: int, *, max_block_ms: int,
                 retry_backoff_ms: int):
        self.cluster = cluster
        self.transactional_id = transactional_id
        self.timeout_ms = timeout_ms
        self.max_block_ms, self.retry_backoff_ms = max_block_ms, retry_backoff_ms
        self.state = UNINITIALIZED
        self.producer_id, self.epoch = -1, -1
        self.added: set[tuple[str, int]] = set()
        self.offsets_added = False
        self.error: errors.KafkaError | None = None
        self._coordinator: int | None = None
        self.tv2 = False  # transactions version 2, when the coordinator's broker finalized it

    # ---------------------------------------------------------------- states

    def check(self, *allowed: str) -> None:
        if self.state == FATAL_ERROR:
            assert self.error is not None
            raise self.error
        if self.state not in allowed:
            raise IllegalStateError(f"Invalid transition attempted from state {self.state}")

    def check_send(self) -> None:
        if self.state == IN_TRANSACTION:
            return
        if self.state == ABORTABLE_ERROR:
            raise self.error or IllegalStateError("the transaction must be aborted")
        self.check(IN_TRANSACTION)

    def fail(self, error: errors.KafkaError) -> None:
        """A send or request of the transaction failed: fatal if fenced, else abortable."""
        if self.state == FATAL_ERROR:
            return
        if error.code in _FATAL:
            self.state, self.error = FATAL_ERROR, error
        elif self.state == IN_TRANSACTION:
            self.state, self.error = ABORTABLE_ERROR, error

    # ---------------------------------------------------------------- requests

    async def _deadline_loop(self, what: str, attempt) -> Any:
        deadline = time.monotonic() + self.max_block_ms / 1000
        while True:
            try:
                return await attempt()
            except errors.KafkaError as e:
                retriable = e.code in _RETRY or isinstance(e, KafkaConnectionError)
                if not retriable or time.monotonic() >= deadline:
                    raise
                if e.code in (errors.E_NOT_COORDINATOR, errors.E_COORDINATOR_NOT_AVAILABLE) or isinstance(
                        e, KafkaConnectionError):
                    self._coordinator = None
                log.debug("%s: %s; retrying", what, e)
                await asyncio.sleep(self.retry_backoff_ms / 1000)

    async def _find(self, key: str, key_type: int) -> BrokerConnection:
        conn = await self.cluster.any()
        resp = await conn.request(ApiKey.FIND_COORDINATOR, {"key": key, "key_type": key_type,
                                                            "coordinator_keys": [key]})
        c = resp["coordinators"][0] if "coordinators" in resp and resp["coordinators"] else resp
        if c["error_code"]:
            raise errors.error_for(c["error_code"], f"FindCoordinator for {key}: {c.get('error_message') or ''}")
        return await self.cluster.node(c["node_id"])

    async def _txn_coordinator(self) -> BrokerConnection:
        return await self._find(self.transactional_id, TRANSACTION_KEY)

    async def init(self) -> None:
        """InitProducerId with the transactional id (fences an older producer of the id)."""
        self.check(UNINITIALIZED, READY)
        await self.cluster.bootstrap()

        async def attempt() -> dict:
            conn = await self._txn_coordinator()
            resp = await conn.request(ApiKey.INIT_PRODUCER_ID, {
                "transactional_id": self.transactional_id, "transaction_timeout_ms": self.timeout_ms,
                "producer_id": -1, "producer_epoch": -1})
            if resp["error_code"]:
                raise errors.error_for(resp["error_code"], f"InitProducerId for {self.transactional_id}")
            self.tv2 = (conn.finalized_features.get("transaction.version", 0) >= 2
                        and conn.pick_version(ApiKey.END_TXN) >= 5)
            return resp
        try:
            resp = await self._deadline_loop("InitProducerId", attempt)
        except errors.KafkaError as e:
            if e.code in _FATAL:
                self.state, self.error = FATAL_ERROR, e
            raise
        self.producer_id, self.epoch = resp["producer_id"], resp["producer_epoch"]
        self.state = READY

    def begin(self) -> None:
        self.check(READY)
        self.state = IN_TRANSACTION
        self.added.clear()
        self.offsets_added = False
        self.error = None

    async def add_partitions(self, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """AddPartitionsToTxn for partitions about to get their first batch; error code per partition."""
        wanted = sorted(set(partitions) - self.added)
        if not wanted:
            return {}
        if self.tv2:  # the Produce (v12) adds them
            self.added.update(wanted)
            return {}
        topics: dict[str, list[int]] = {}
        for t, p in wanted:
            topics.setdefault(t, []).append(p)

        async def attempt() -> dict[tuple[str, int], int]:
            conn = await self._txn_coordinator()
            resp = await conn.request(ApiKey.ADD_PARTITIONS_TO_TXN, {
                "v3_and_below_transactional_id": self.transactional_id, "v3_and_below_producer_id": self.producer_id,
                "v3_and_below_producer_epoch": self.epoch,
                "v3_and_below_topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]},
                max_version=3)
            codes = {(t["name"], p["partition_index"]): p["partition_error_code"]
                     for t in resp["results_by_topic_v3_and_below"] for p in t["results_by_partition"]}
            retry = next((c for c in codes.values() if c in _RETRY), 0)
            if retry:
                raise errors.error_for(retry, "AddPartitionsToTxn")
            return codes
        try:
            codes = await self._deadline_loop("AddPartitionsToTxn", attempt)
        except errors.KafkaError as e:
            codes = {tp: e.code for tp in wanted}
        for tp, code in codes.items():
            if code == 0:
                self.added.add(tp)
            elif code != errors.E_OPERATION_NOT_ATTEMPTED:
                self.fail(errors.error_for(code, f"AddPartitionsToTxn for {tp[0]}-{tp[1]}"))
        return codes

    async def send_offsets(self, offsets: Mapping[TopicPartition, Any], group: ConsumerGroupMetadata | str) -> None:
        """AddOffsetsToTxn, then TxnOffsetCommit at the group coordinator."""
        self.check_send()
        if isinstance(group, str):
            group = ConsumerGroupMetadata(group)

        async def add() -> None:
            conn = await self._txn_coordinator()
            resp = await conn.request(ApiKey.ADD_OFFSETS_TO_TXN, {
                "transactional_id": self.transactional_id, "producer_id": self.producer_id,
                "producer_epoch": self.epoch, "group_id": group.group_id})
            if resp["error_code"]:
                raise errors.error_for(resp["error_code"], f"AddOffsetsToTxn for group {group.group_id}")
        topics: dict[str, list[dict]] = {}
        for tp, o in offsets.items():
            om = o if isinstance(o, OffsetAndMetadata) else OffsetAndMetadata(int(o))
            topics.setdefault(tp.topic, []).append({
                "partition_index": tp.partition, "committed_offset": om.offset,
                "committed_leader_epoch": -1 if om.leader_epoch is None else om.leader_epoch,
                "committed_metadata": om.metadata})

        async def commit() -> None:
            conn = await self._find(group.group_id, GROUP_KEY)
            resp = await conn.request(ApiKey.TXN_OFFSET_COMMIT, min_version=5 if self.tv2 else None,
                                      max_version=None if self.tv2 else 4, body={
                "transactional_id": self.transactional_id, "group_id": group.group_id,
                "producer_id": self.producer_id, "producer_epoch": self.epoch,
                "generation_id": group.generation_id, "member_id": group.member_id,
                "group_instance_id": group.group_instance_id,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]})
            code = next((p["error_code"] for t in resp["topics"] for p in t["partitions"] if p["error_code"]), 0)
            if code:
                raise errors.error_for(code, f"TxnOffsetCommit for group {group.group_id}")
        try:
            if not self.offsets_added and not self.tv2:
                await self._deadline_loop("AddOffsetsToTxn", add)
            self.offsets_added = True
            await self._deadline_loop("TxnOffsetCommit", commit)
        except errors.KafkaError as e:
            self.fail(e)
            raise

    async def end(self, commit: bool) -> None:
        """EndTxn (when the transaction touched anything), then READY."""
        if commit:
            self.check_send()
        else:
            self.check(IN_TRANSACTION, ABORTABLE_ERROR)
        if self.added or self.offsets_added:
            async def attempt() -> dict:
                conn = await self._txn_coordinator()
                resp = await conn.request(ApiKey.END_TXN, {
                    "transactional_id": self.transactional_id, "producer_id": self.producer_id,
                    "producer_epoch": self.epoch, "committed": commit},
                    min_version=5 if self.tv2 else None, max_version=None if self.tv2 else 4)
                if resp["error_code"]:
                    raise errors.error_for(resp["error_code"], f"EndTxn ({'commit' if commit else 'abort'})")
                return resp
            try:
                resp = await self._deadline_loop("EndTxn", attempt)
                if self.tv2:  # the epoch of the next transaction
                    self.producer_id, self.epoch = resp["producer_id"], resp["producer_epoch"]
            except errors.KafkaError as e:
                self.fail(e)
                raise
        self.state = READY
        self.error = None
        self.added.clear()
        self.offsets_added = False
