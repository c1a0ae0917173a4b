"""The transaction coordinator (KIP-98): the service the transaction request handlers call.

It owns the transactional ids whose ``__transaction_state`` partition this broker leads:
hands out producer ids and epochs (fencing the older producer of an id), records the
partitions and consumer groups each transaction touches, and ends transactions in two
phases — PrepareCommit/PrepareAbort written to its log (the decision), then a marker on
every partition of the transaction (through ``host.write_txn_markers``), then
CompleteCommit/CompleteAbort. A transaction open longer than its timeout is aborted and its
producer fenced; ids idle past ``transactional.id.expiration.ms`` are forgotten. After a
restart or a leader change the new leader replays the partition and finishes the
transactions it finds prepared.

Every state change is written before it takes effect; while it is being written the id is
"pending" and other requests for it answer CONCURRENT_TRANSACTIONS (the clients retry).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Coroutine
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from samsa.broker_config import segment_bytes_config
from samsa.clock import now_ms
from samsa.cluster.metadata import BrokerInfo
from samsa.coordinator.host import CoordinatorHost, ensure_internal_topic
from samsa.coordinator.transactions.persistence import partition_for, read_partition, write_state
from samsa.coordinator.transactions.state import (EXPIRABLE, PREPARING, IllegalTransition, TransactionMetadata,
                                                  TxnState)
from samsa.protocol import errors
from samsa.protocol.group_records import OFFSETS_TOPIC
from samsa.protocol.txn_records import TRANSACTION_STATE_TOPIC

log = logging.getLogger(__name__)

MAX_EPOCH = 32767
MARKER_RETRY_S = 0.1
#: Every broker config the transaction coordinator reads.
CONFIG_KEYS = ("transaction.state.log.num.partitions", "transaction.state.log.replication.factor",
               "transaction.state.log.min.isr", "transaction.state.log.segment.bytes", "transaction.max.timeout.ms",
               "transactional.id.expiration.ms", "transaction.abort.timed.out.transaction.cleanup.interval.ms",
               "transaction.remove.expired.transaction.cleanup.interval.ms", "offsets.commit.timeout.ms",
               "offsets.topic.num.partitions")

TopicPartition = tuple[str, int]


class TransactionHost(CoordinatorHost, Protocol):
    """The broker side as the transaction coordinator sees it: the coordinator host, producer
    ids, and the partition leaders that write markers."""

    def allocate_producer_id(self) -> int: ...

    def transaction_version(self) -> int:
        """The cluster's finalized ``transaction.version``: the version of the values written."""
        ...

    def write_txn_markers(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
                          partitions: list[TopicPartition]) -> Awaitable[dict[TopicPartition, int]]:
        """Write a commit or abort marker on each partition (at its leader, wherever that is);
        the error code for each (0 when written and replicated)."""
        ...


@dataclass
class TransactionDescription:
    transactional_id: str
    error: int = 0
    state: str = ""
    timeout_ms: int = 0
    start_ms: int = -1
    producer_id: int = -1
    producer_epoch: int = -1
    partitions: list[TopicPartition] = field(default_factory=list)


@dataclass(frozen=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: str


class TransactionCoordinator:
    def __init__(self, host: TransactionHost):
        self.host = host
        self.txns: dict[str, TransactionMetadata] = {}
        self.epochs: dict[int, int] = {}  # __transaction_state partitions led here -> coordinator epoch
        self._tasks: set[asyncio.Task] = set()
        self._timers: list[asyncio.Task] = []

    def cfg(self, key: str) -> Any:
        return self.host.config[key]

    @property
    def num_partitions(self) -> int:
        topic = self.host.topics.get(TRANSACTION_STATE_TOPIC)
        return len(topic.partitions) if topic else self.cfg("transaction.state.log.num.partitions")

    def partition_of(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.num_partitions)

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> None:
        self._timers = [
            asyncio.ensure_future(self._every(self.cfg("transaction.abort.timed.out.transaction.cleanup.interval.ms"),
                                              self.abort_timed_out)),
            asyncio.ensure_future(self._every(self.cfg("transaction.remove.expired.transaction.cleanup.interval.ms"),
                                              self.expire_transactional_ids)),
        ]

    def stop(self) -> None:
        for task in [*self._timers, *self._tasks]:
            task.cancel()

    async def _every(self, interval_ms: int, fn) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                fn(now_ms())
            except Exception:
                log.exception("transaction coordinator background work failed")

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)

        def done(t: asyncio.Task) -> None:
            self._tasks.discard(t)
            if not t.cancelled() and t.exception() is not None:
                log.warning("transaction work failed: %r", t.exception())
        task.add_done_callback(done)

    def on_leader(self, topic: str, index: int) -> None:
        """This broker now leads a transaction-state partition: load its ids, finish what was prepared."""
        if topic != TRANSACTION_STATE_TOPIC:
            return
        self.on_follower(topic, index)
        partition = self.host.partition(topic, index)
        epoch = partition.state.leader_epoch
        loaded: dict[str, TransactionMetadata] = {}
        for txn_id, value in read_partition(partition):
            if value is None:
                loaded.pop(txn_id, None)
            else:
                try:
                    loaded[txn_id] = TransactionMetadata.from_log(txn_id, value, epoch)
                except ValueError as e:
                    log.warning("skipping the state of %s: %s", txn_id, e)
        self.epochs[index] = epoch
        self.txns.update(loaded)
        if loaded:
            log.info("loaded %d transactional ids of %s-%d", len(loaded), topic, index)
        for meta in loaded.values():
            if meta.state in PREPARING:
                self._spawn(self._complete(meta, meta.state == TxnState.PREPARE_COMMIT))

    def on_follower(self, topic: str, index: int) -> None:
        if topic != TRANSACTION_STATE_TOPIC:
            return
        self.epochs.pop(index, None)
        n = self.num_partitions
        for txn_id in [t for t in self.txns if partition_for(t, n) == index]:
            del self.txns[txn_id]

    # ---------------------------------------------------------------- routing

    def ensure_topic(self) -> None:
        ensure_internal_topic(self.host, TRANSACTION_STATE_TOPIC, self.cfg("transaction.state.log.num.partitions"),
                              "transaction.state.log.replication.factor", {
                                  "cleanup.policy": "compact", "compression.type": "producer",
                                  "min.insync.replicas": str(self.cfg("transaction.state.log.min.isr")),
                                  **segment_bytes_config(self.cfg("transaction.state.log.segment.bytes")),
                                  "unclean.leader.election.enable": "false"})

    def coordinator_for(self, transactional_id: str) -> BrokerInfo:
        """The broker leading the id's transaction-state partition (FindCoordinator)."""
        self.ensure_topic()
        topic = self.host.topics[TRANSACTION_STATE_TOPIC]
        state = topic.partitions[partition_for(transactional_id, len(topic.partitions))]
        for b in self.host.alive_brokers():
            if b.id == state.leader:
                return b
        raise errors.CoordinatorNotAvailableError(f"no leader for the transaction state of {transactional_id}")

    def coordinator_id(self, transactional_id: str) -> int | None:
        """The broker leading the id's transaction-state partition, if it is known (no topic creation)."""
        topic = self.host.topics.get(TRANSACTION_STATE_TOPIC)
        if topic is None:
            return None
        state = topic.partitions.get(partition_for(transactional_id, len(topic.partitions)))
        return state.leader if state is not None and state.leader >= 0 else None

    def is_local(self, transactional_id: str) -> bool:
        return TRANSACTION_STATE_TOPIC in self.host.topics and self.partition_of(transactional_id) in self.epochs

    def _coordinator_epoch(self, transactional_id: str) -> int:
        if not transactional_id:
            raise errors.InvalidRequestError("transactional id must not be empty")
        if TRANSACTION_STATE_TOPIC not in self.host.topics:
            raise errors.CoordinatorNotAvailableError("the transaction state topic does not exist yet")
        index = self.partition_of(transactional_id)
        epoch = self.epochs.get(index)
        if epoch is None:
            raise errors.NotCoordinatorError(
                f"broker {self.host.broker_id} is not the transaction coordinator of {transactional_id}")
        return epoch

    # ---------------------------------------------------------------- writing transitions

    async def _transition(self, meta: TransactionMetadata, to: TxnState, **changes: Any) -> None:
        """Write ``meta`` as it is after moving to ``to`` with ``changes``; apply it once replicated."""
        if meta.pending is not None:
            raise errors.ConcurrentTransactionsError(
                f"transaction {meta.transactional_id} is moving to {meta.pending.display}")
        try:
            meta.check_transition(to)
        except IllegalTransition as e:
            raise errors.InvalidTxnStateError(str(e)) from None
        target = replace(meta, state=to, pending=None, **changes)
        meta.pending = to
        try:
            await write_state(self.host, self.partition_of(meta.transactional_id), meta.coordinator_epoch,
                              meta.transactional_id, target.to_log(),
                              1 if self.host.transaction_version() >= 1 else 0)
        finally:
            meta.pending = None
        if self.txns.get(meta.transactional_id) is not meta:
            raise errors.NotCoordinatorError(f"no longer the coordinator of {meta.transactional_id}")
        meta.__dict__.update(target.__dict__)

    def _get(self, transactional_id: str, producer_id: int, producer_epoch: int) -> TransactionMetadata:
        """The id's metadata, checked against the producer id and epoch a request carries."""
        self._coordinator_epoch(transactional_id)
        meta = self.txns.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            raise errors.InvalidProducerIdMappingError(
                f"producer id {producer_id} is not the one of transactional id {transactional_id}")
        if meta.producer_epoch != producer_epoch:
            raise errors.ProducerFencedError(
                f"producer epoch {producer_epoch} of {transactional_id} is not the current {meta.producer_epoch}: "
                "a newer producer with the same transactional id fenced it")
        if meta.pending is not None or meta.state in PREPARING or meta.state == TxnState.PREPARE_EPOCH_FENCE:
            raise errors.ConcurrentTransactionsError(f"transaction {transactional_id} is completing")
        return meta

    # ---------------------------------------------------------------- InitProducerId

    async def init_producer_id(self, transactional_id: str, timeout_ms: int, producer_id: int = -1,
                               producer_epoch: int = -1) -> tuple[int, int]:
        """(producer id, epoch) for a transactional producer starting (or restarting) with this
        id; an open transaction of the id is aborted and its producer fenced."""
        if not transactional_id:
            raise errors.InvalidRequestError("transactional id must not be empty")
        if timeout_ms <= 0 or timeout_ms > self.cfg("transaction.max.timeout.ms"):
            raise errors.InvalidTransactionTimeoutError(
                f"transaction timeout {timeout_ms} ms is not in (0, transaction.max.timeout.ms="
                f"{self.cfg('transaction.max.timeout.ms')}]")
        coordinator_epoch = self._coordinator_epoch(transactional_id)
        meta = self.txns.get(transactional_id)
        if meta is None:
            meta = TransactionMetadata(transactional_id, self.host.allocate_producer_id(), -1, timeout_ms,
                                       coordinator_epoch=coordinator_epoch)
            self.txns[transactional_id] = meta
        if meta.pending is not None or meta.state in PREPARING or meta.state == TxnState.PREPARE_EPOCH_FENCE:
            raise errors.ConcurrentTransactionsError(f"transaction {transactional_id} is completing")
        if producer_id >= 0:  # KIP-360: a producer bumping its own epoch
            if producer_id != meta.producer_id or producer_epoch not in (meta.producer_epoch,
                                                                         meta.last_producer_epoch):
                raise errors.ProducerFencedError(
                    f"producer {producer_id} epoch {producer_epoch} is not the current producer of {transactional_id}")
            if producer_epoch == meta.last_producer_epoch and meta.state == TxnState.EMPTY:
                return meta.producer_id, meta.producer_epoch  # a retry of the bump just made
        if meta.state == TxnState.ONGOING:
            self._spawn(self._fence_and_abort(meta, "a new producer initialized the transactional id"))
            raise errors.ConcurrentTransactionsError(
                f"aborting the open transaction of {transactional_id} before a new producer may start")
        if meta.producer_epoch + 1 >= MAX_EPOCH:
            pid, epoch = self.host.allocate_producer_id(), 0
        else:
            pid, epoch = meta.producer_id, meta.producer_epoch + 1
        await self._transition(meta, TxnState.EMPTY, producer_id=pid, producer_epoch=epoch,
                               last_producer_epoch=meta.producer_epoch if pid == meta.producer_id else -1,
                               timeout_ms=timeout_ms, partitions=set(), start_ms=-1, last_update_ms=now_ms(),
                               client_version=0, next_producer_id=-1)
        log.info("transactional id %s: producer id %d epoch %d", transactional_id, pid, epoch)
        return pid, epoch

    # ---------------------------------------------------------------- AddPartitionsToTxn / AddOffsetsToTxn

    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: list[TopicPartition], verify_only: bool = False) -> dict[TopicPartition, int]:
        """An error code per partition (a request error is given for all of them)."""
        if verify_only:
            return self.verify(transactional_id, producer_id, producer_epoch, partitions)
        try:
            meta = self._get(transactional_id, producer_id, producer_epoch)
        except errors.KafkaError as e:
            return {tp: e.code for tp in partitions}
        topics = self.host.topics
        unknown = {tp for tp in partitions if tp[0] not in topics or tp[1] not in topics[tp[0]].partitions}
        if unknown:
            return {tp: errors.E_UNKNOWN_TOPIC_OR_PARTITION if tp in unknown else errors.E_OPERATION_NOT_ATTEMPTED
                    for tp in partitions}
        new = set(partitions) - meta.partitions
        if not new and meta.state == TxnState.ONGOING:
            return {tp: 0 for tp in partitions}
        now = now_ms()
        start = meta.start_ms if meta.state == TxnState.ONGOING else now
        try:
            await self._transition(meta, TxnState.ONGOING, partitions=meta.partitions | new, start_ms=start,
                                   last_update_ms=now)
        except errors.KafkaError as e:
            return {tp: e.code for tp in partitions}
        return {tp: 0 for tp in partitions}

    def offsets_partition(self, group_id: str) -> TopicPartition:
        topic = self.host.topics.get(OFFSETS_TOPIC)
        n = len(topic.partitions) if topic else self.cfg("offsets.topic.num.partitions")
        return OFFSETS_TOPIC, partition_for(group_id, n)

    async def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str) -> int:
        tp = self.offsets_partition(group_id)
        if OFFSETS_TOPIC not in self.host.topics:
            return errors.E_COORDINATOR_NOT_AVAILABLE
        return (await self.add_partitions(transactional_id, producer_id, producer_epoch, [tp]))[tp]

    def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
               partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        """KIP-890: may this producer write these partitions in its open transaction? An error
        code per partition, as Kafka's coordinator answers a verify-only AddPartitionsToTxn:
        0 if the partition is in it, TRANSACTION_ABORTABLE if not, CONCURRENT_TRANSACTIONS while
        the transaction completes. A transition being written does not matter: partitions join
        once written and leave once their markers are."""
        try:
            self._coordinator_epoch(transactional_id)
        except errors.KafkaError as e:
            return dict.fromkeys(partitions, e.code)
        meta = self.txns.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            code = errors.E_INVALID_PRODUCER_ID_MAPPING
        elif meta.producer_epoch != producer_epoch:
            code = errors.E_PRODUCER_FENCED
        elif meta.state in PREPARING:
            code = errors.E_CONCURRENT_TRANSACTIONS
        else:
            return {tp: 0 if tp in meta.partitions else errors.E_TRANSACTION_ABORTABLE for tp in partitions}
        return dict.fromkeys(partitions, code)

    # ---------------------------------------------------------------- EndTxn

    async def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool,
                      client_version: int = 0) -> tuple[int, int]:
        """Decide the transaction (PrepareCommit/PrepareAbort, written), then write its markers
        in the background; the producer id and epoch the producer goes on with. Raises the
        Kafka error a client should get.

        With transactions version 2 (``client_version`` 2, EndTxn v5) every EndTxn bumps the
        producer's epoch: the decision carries epoch + 1, the markers are written with it (so
        they fence the transaction's own late writes), and the client gets it back; an abort
        with no transaction open bumps it too. A retry carries the epoch before the bump. An
        exhausted epoch takes a new producer id (epoch 0) once the markers are written."""
        self._coordinator_epoch(transactional_id)
        meta = self.txns.get(transactional_id)
        if meta is None:
            raise errors.InvalidProducerIdMappingError(
                f"producer id {producer_id} is not the one of transactional id {transactional_id}")
        if client_version >= 2:
            return await self._end_txn_v2(meta, producer_id, producer_epoch, commit)
        if meta.producer_id != producer_id:
            raise errors.InvalidProducerIdMappingError(
                f"producer id {producer_id} is not the one of transactional id {transactional_id}")
        if meta.producer_epoch != producer_epoch:
            raise errors.ProducerFencedError(
                f"producer epoch {producer_epoch} of {transactional_id} is not the current {meta.producer_epoch}")
        if meta.pending is not None:
            raise errors.ConcurrentTransactionsError(f"transaction {transactional_id} is changing state")
        state = meta.state
        want = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        if state == done:
            return -1, -1  # a retry of an EndTxn that completed
        if state == want:
            raise errors.ConcurrentTransactionsError(f"transaction {transactional_id} is completing")
        if state != TxnState.ONGOING:
            raise self._invalid_end(meta, commit)
        await self._transition(meta, want, last_update_ms=now_ms(), client_version=0)
        self._spawn(self._complete(meta, commit))
        return -1, -1

    async def _end_txn_v2(self, meta: TransactionMetadata, producer_id: int, producer_epoch: int,
                          commit: bool) -> tuple[int, int]:
        """EndTxn v5: Kafka's table — a retry (the epoch before the bump) of a completed EndTxn
        is answered as it was, of another one INVALID_TXN_STATE; the current epoch commits an
        open transaction, or aborts one open or not (bumping the epoch)."""
        txn_id = meta.transactional_id
        state = meta.state
        retry_of_bump = meta.producer_epoch == producer_epoch + 1
        retry_of_overflow = (meta.previous_producer_id == producer_id and producer_epoch == MAX_EPOCH - 1
                             and meta.producer_epoch == 0)
        current = producer_epoch == meta.producer_epoch
        if meta.producer_id != producer_id and not retry_of_overflow:
            raise errors.InvalidProducerIdMappingError(
                f"producer id {producer_id} is not the one of transactional id {txn_id}")
        if state in PREPARING:
            valid = retry_of_bump
        elif state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            valid = retry_of_bump or retry_of_overflow or current
        else:
            valid = current
        if not valid:
            raise errors.ProducerFencedError(
                f"producer epoch {producer_epoch} of {txn_id} is not the current {meta.producer_epoch}")
        if meta.pending is not None:
            raise errors.ConcurrentTransactionsError(f"transaction {txn_id} is changing state")
        retry = retry_of_bump or retry_of_overflow
        if state == TxnState.ONGOING:
            return await self._bump_and_end(meta, commit)
        if state in PREPARING:
            if (state == TxnState.PREPARE_COMMIT) == commit:
                raise errors.ConcurrentTransactionsError(f"transaction {txn_id} is completing")
            raise self._invalid_end(meta, commit)
        if state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            if retry and (state == TxnState.COMPLETE_COMMIT) == commit:
                return meta.producer_id, meta.producer_epoch  # a retry of an EndTxn that completed
            if not retry and not commit:
                return await self._bump_and_end(meta, commit)
            raise self._invalid_end(meta, commit)
        if state == TxnState.EMPTY and not commit:
            return await self._bump_and_end(meta, commit)
        raise self._invalid_end(meta, commit)

    async def _bump_and_end(self, meta: TransactionMetadata, commit: bool) -> tuple[int, int]:
        exhausted = meta.producer_epoch >= MAX_EPOCH - 1
        now = now_ms()
        await self._transition(meta, TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT,
                               producer_epoch=meta.producer_epoch + 1, last_producer_epoch=meta.producer_epoch,
                               next_producer_id=self.host.allocate_producer_id() if exhausted else -1,
                               client_version=2, last_update_ms=now,
                               start_ms=meta.start_ms if meta.state == TxnState.ONGOING else now)
        self._spawn(self._complete(meta, commit))
        if meta.next_producer_id >= 0:
            return meta.next_producer_id, 0
        return meta.producer_id, meta.producer_epoch

    @staticmethod
    def _invalid_end(meta: TransactionMetadata, commit: bool) -> errors.KafkaError:
        return errors.InvalidTxnStateError(f"cannot {'commit' if commit else 'abort'} transaction "
                                           f"{meta.transactional_id} in state {meta.state.display}")

    async def _fence_and_abort(self, meta: TransactionMetadata, why: str) -> None:
        """Bump the epoch (fencing the producer) and abort its open transaction."""
        if meta.state != TxnState.ONGOING or meta.pending is not None:
            return
        log.info("aborting transaction %s (producer %d epoch %d): %s", meta.transactional_id, meta.producer_id,
                 meta.producer_epoch, why)
        epoch = min(meta.producer_epoch + 1, MAX_EPOCH - 1)
        await self._transition(meta, TxnState.PREPARE_ABORT, producer_epoch=epoch,
                               last_producer_epoch=meta.producer_epoch, last_update_ms=now_ms(),
                               client_version=0, next_producer_id=-1)  # not a bump its producer may retry
        await self._complete(meta, commit=False)

    async def _complete(self, meta: TransactionMetadata, commit: bool) -> None:
        """Markers on every partition of the transaction, then CompleteCommit/CompleteAbort."""
        pending = set(meta.partitions)
        while pending:
            if self.txns.get(meta.transactional_id) is not meta:
                return  # another broker coordinates the id now: it finishes the transaction
            results = await self.host.write_txn_markers(meta.producer_id, meta.producer_epoch,
                                                        meta.coordinator_epoch, commit, sorted(pending))
            for tp, code in results.items():
                if code == 0:
                    pending.discard(tp)
                elif code in (errors.E_UNKNOWN_TOPIC_OR_PARTITION, errors.E_INVALID_PRODUCER_EPOCH,
                              errors.E_TRANSACTION_COORDINATOR_FENCED):
                    # The topic is gone, or a newer epoch/coordinator already wrote there: nothing to add.
                    log.warning("marker of %s for %s-%d not written: %s", meta.transactional_id, tp[0], tp[1],
                                errors.error_name(code))
                    pending.discard(tp)
            if pending:
                await asyncio.sleep(MARKER_RETRY_S)  # a leader is moving: try again
        to = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        changes: dict[str, Any] = {}
        if meta.client_version >= 2 and meta.next_producer_id >= 0:  # the epoch was exhausted: a new id
            changes = {"producer_id": meta.next_producer_id, "producer_epoch": 0, "next_producer_id": -1,
                       "previous_producer_id": meta.producer_id, "last_producer_epoch": -1}
        while self.txns.get(meta.transactional_id) is meta:
            try:
                await self._transition(meta, to, partitions=set(), last_update_ms=now_ms(), **changes)
                return
            except (errors.NotCoordinatorError, errors.InvalidTxnStateError):
                return
            except errors.KafkaError as e:
                log.warning("completing transaction %s failed (%s); retrying", meta.transactional_id, e)
                await asyncio.sleep(MARKER_RETRY_S)

    # ---------------------------------------------------------------- timeouts and expiry

    def abort_timed_out(self, now: int) -> None:
        """transaction.timeout.ms: abort the transactions open longer, fencing their producers."""
        for meta in list(self.txns.values()):
            if (meta.state == TxnState.ONGOING and meta.pending is None and meta.start_ms >= 0
                    and now - meta.start_ms > meta.timeout_ms):
                self._spawn(self._fence_and_abort(meta, f"open longer than its timeout of {meta.timeout_ms} ms"))

    def expire_transactional_ids(self, now: int) -> None:
        """transactional.id.expiration.ms: forget the ids with no open transaction whose last update
        is that old (a tombstone in the log), as Kafka does; the partitions' producer state is theirs
        to expire (producer.id.expiration.ms)."""
        limit = self.cfg("transactional.id.expiration.ms")
        for meta in list(self.txns.values()):
            if meta.state in EXPIRABLE and meta.pending is None and now - meta.last_update_ms >= limit:
                self._spawn(self._expire(meta))

    async def _expire(self, meta: TransactionMetadata) -> None:
        meta.pending = TxnState.DEAD
        try:
            await write_state(self.host, self.partition_of(meta.transactional_id), meta.coordinator_epoch,
                              meta.transactional_id, None)
        finally:
            meta.pending = None
        if self.txns.get(meta.transactional_id) is meta:
            del self.txns[meta.transactional_id]
            log.info("transactional id %s expired", meta.transactional_id)

    # ---------------------------------------------------------------- admin

    def describe(self, transactional_id: str) -> TransactionDescription:
        try:
            self._coordinator_epoch(transactional_id)
        except errors.KafkaError as e:
            return TransactionDescription(transactional_id, e.code)
        meta = self.txns.get(transactional_id)
        if meta is None:
            return TransactionDescription(transactional_id, errors.E_TRANSACTIONAL_ID_NOT_FOUND)
        return TransactionDescription(transactional_id, 0, meta.state.display, meta.timeout_ms, meta.start_ms,
                                      meta.producer_id, meta.producer_epoch, sorted(meta.partitions))

    def list_transactions(self, states: list[str], producer_ids: list[int], min_duration_ms: int = -1
                          ) -> tuple[list[str], list[TransactionListing]]:
        """(unknown state names, the ids led here that pass the filters)."""
        unknown = [s for s in states if TxnState.from_name(s) is None]
        wanted = {TxnState.from_name(s) for s in states} - {None}
        now = now_ms()
        out = []
        for meta in sorted(self.txns.values(), key=lambda m: m.transactional_id):
            if wanted and meta.state not in wanted:
                continue
            if producer_ids and meta.producer_id not in producer_ids:
                continue
            if min_duration_ms >= 0 and (meta.state != TxnState.ONGOING or now - meta.start_ms < min_duration_ms):
                continue
            out.append(TransactionListing(meta.transactional_id, meta.producer_id, meta.state.display))
        return unknown, out
