"""The producer itself, as the seeds describe Kafka's: interceptors -> serializers ->
partitioner -> record accumulator -> sender.

:class:`ProducerCore` is shared by both faces: :class:`samsa.client.producer.Producer`
runs its sender on a private loop thread and calls :meth:`ProducerCore.send` from any
thread; :class:`samsa.aio.AIOProducer` runs the sender as a task on the caller's loop.
``send()`` itself never touches the event loop: it appends to the accumulator, which wakes
the sender only when a batch needs it.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from concurrent.futures import Future
from typing import Any, Callable

from samsa.client.config import PRODUCER_KEYS, ClientConfig, ConfigError, load_plugin, load_plugins, load_serde
from samsa.client.connection import KafkaTimeoutError
from samsa.client.loop import IdleSignal
from samsa.client.metadata import ClusterMetadata
from samsa.client.metrics import MetricName, default_client_id
from samsa.client.partitioner import StickyPartitioner
from samsa.client.producer_internals.accumulator import RecordAccumulator
from samsa.client.producer_internals.producer_metrics import ProducerMetrics
from samsa.client.producer_internals.sender import Sender
from samsa.client.producer_internals.transactions import IllegalStateError, TransactionManager
from samsa.client.types import RecordMetadata
from samsa.client.security import security_of
from samsa.protocol import compression, errors
from samsa.protocol.records import RECORD_OVERHEAD_MAX, estimate_record_size
from samsa.serialization import SerializationError, default_serialize

log = logging.getLogger(__name__)

OnDelivery = Callable[[RecordMetadata | None, Exception | None], None]


class ProducerCore:
    """Config, plugins, the send pipeline, the accumulator and the sender of one producer.

    ``loop``: the event loop the sender runs on. ``lookup(topic)``: the partition count of a
    topic not yet known, for :meth:`send` (the blocking face waits for metadata there; the
    asyncio face fetches it before calling :meth:`send`). ``sender_idle``: the idle signal of
    the loop's thread when :meth:`send` is called from other threads; None when it is called
    on the loop itself.
    """

    def __init__(self, config: dict[str, Any] | None, loop: asyncio.AbstractEventLoop, *,
                 lookup: Callable[[str], int], sender_idle: IdleSignal | None, **kwargs: Any):
        self.config = c = ClientConfig(PRODUCER_KEYS, config, **kwargs)
        configs = dict(c.originals)
        self.acks = {"all": -1, "-1": -1, "0": 0, "1": 1}[str(c["acks"])]
        txn_id = c["transactional.id"]
        if txn_id is not None:
            if "enable.idempotence" in c.originals and not c["enable.idempotence"]:
                raise ConfigError("Cannot set a transactional.id without also enabling idempotence.")
            if self.acks != -1:
                raise ConfigError("Must set acks to all in order to use the transactional producer.")
        self.idempotent = c["enable.idempotence"] and self.acks == -1 or txn_id is not None
        if c["enable.idempotence"] and "enable.idempotence" in c.originals and self.acks != -1:
            raise ConfigError("Must set acks to all in order to use the idempotent producer.")
        self.key_serializer = _serializer(configs.get("key.serializer"), configs, True)
        self.value_serializer = _serializer(configs.get("value.serializer"), configs, False)
        self.interceptors = load_plugins(c["interceptor.classes"], configs)
        self.partitioner = load_plugin(c["partitioner.class"], configs) if c["partitioner.class"] else None
        self._ignore_keys = c["partitioner.ignore.keys"]
        self._sticky = StickyPartitioner()
        self._max_request = c["max.request.size"]
        self._loop, self._lookup, self._sender_idle = loop, lookup, sender_idle
        self.partition_counts: dict[str, int] = {}
        self.closed = False
        self.cluster = ClusterMetadata(c["bootstrap.servers"], client_id=c["client.id"] or "samsa-producer",
                                       request_timeout_ms=c["request.timeout.ms"],
                                       connect_timeout_ms=c["socket.connection.setup.timeout.ms"],
                                       bootstrap_timeout_ms=c["max.block.ms"], retry_backoff_ms=c["retry.backoff.ms"],
                                       reconnect_backoff_ms=c["reconnect.backoff.ms"],
                                       reconnect_backoff_max_ms=c["reconnect.backoff.max.ms"],
                                       metadata_max_age_ms=c["metadata.max.age.ms"],
                                       security=security_of(c))
        codec = compression.codec_id(c["compression.type"])
        level_key = {compression.GZIP: "compression.gzip.level", compression.LZ4: "compression.lz4.level",
                     compression.ZSTD: "compression.zstd.level"}.get(codec)
        level = c[level_key] if level_key in c.originals else None  # else the codec's Kafka default
        self.accumulator = RecordAccumulator(
            batch_size=c["batch.size"], linger_s=c["linger.ms"] / 1000, buffer_memory=c["buffer.memory"],
            max_block_s=c["max.block.ms"] / 1000, codec=codec, compression_level=level,
            delivery_timeout_s=c["delivery.timeout.ms"] / 1000, blocking=sender_idle is not None,
            idempotent=self.idempotent,
            # Kafka refuses more than 5 with idempotence; the sequence numbers keep up to 5 in order
            max_in_flight=min(c["max.in.flight.requests.per.connection"], 5 if self.idempotent else 1 << 30))
        self._metrics = ProducerMetrics(c["client.id"] or default_client_id("producer"), self.accumulator)
        self.sender = Sender(self.accumulator, self.cluster, acks=self.acks, idempotent=self.idempotent,
                             request_timeout_ms=c["request.timeout.ms"], retries=c["retries"],
                             retry_backoff_ms=c["retry.backoff.ms"], retry_backoff_max_ms=c["retry.backoff.max.ms"],
                             interceptors=self.interceptors, partition_counts=self.partition_counts,
                             metrics=self._metrics)
        self.txn: TransactionManager | None = None
        if txn_id is not None:
            self.txn = TransactionManager(self.cluster, txn_id, c["transaction.timeout.ms"],
                                          max_block_ms=c["max.block.ms"], retry_backoff_ms=c["retry.backoff.ms"])
            self.sender.txn = self.txn
        self._task: asyncio.Future | None = None

    # ---------------------------------------------------------------- the caller's side

    def send(self, topic: str, value: Any = None, key: Any = None, partition: int | None = None,
             timestamp: int | None = None, headers: Any = None, on_delivery: OnDelivery | None = None) -> Future:
        """Serialize, partition and append one record: a Future of its RecordMetadata."""
        if self.closed:
            raise RuntimeError("Cannot send after the producer is closed.")
        if self.txn is not None:
            self.txn.check_send()
        if self.interceptors:
            topic, value, key, partition, timestamp, headers = self._on_send(topic, value, key, partition, timestamp,
                                                                             headers)
        try:
            if self.key_serializer is not None:
                key_bytes = self.key_serializer.serialize(topic, key, headers)
            else:
                key_bytes = key if key is None or type(key) is bytes else default_serialize(key)
            if self.value_serializer is not None:
                value_bytes = self.value_serializer.serialize(topic, value, headers)
            else:
                value_bytes = value if type(value) is bytes else default_serialize(value)
        except SerializationError:
            raise
        except Exception as e:
            raise SerializationError(f"Can't serialize data of topic {topic}: {e}") from e
        if headers:
            headers = [(k, v.encode() if isinstance(v, str) else v)
                       for k, v in (headers.items() if isinstance(headers, dict) else headers)]
            size = estimate_record_size(key_bytes, value_bytes, headers)
        else:
            headers = []
            size = RECORD_OVERHEAD_MAX + (len(key_bytes) if key_bytes is not None else 0) + (
                len(value_bytes) if value_bytes is not None else 0)
        if size > self._max_request:
            raise errors.MessageTooLargeError(
                f"The message is {size} bytes when serialized which is larger than {self._max_request}, "
                "which is the value of the max.request.size configuration.")
        count = self.partition_counts.get(topic) or self._lookup(topic)
        p = partition
        if p is None:
            if self.partitioner is not None:
                p = self.partitioner.partition(topic, key, key_bytes, value, value_bytes, count)
            else:
                p = self._sticky.partition(topic, None if self._ignore_keys else key_bytes, count)
        elif not 0 <= p < count:
            raise errors.UnknownTopicOrPartitionError(f"Partition {p} of topic {topic} with partition count {count} "
                                                      "is not present in metadata")
        ts = timestamp if timestamp is not None else int(time.time() * 1000)
        idle = self._sender_idle
        if idle is not None:
            idle_count = idle.count
        fut, closed, wake = self.accumulator.append(topic, p, key_bytes, value_bytes, ts, headers, size, on_delivery)
        if wake:
            if idle is None:
                self.sender.wake()  # the sender runs on this thread's loop
            else:
                self._loop.call_soon_threadsafe(self.sender.wake)
        if closed:
            if partition is None and self.partitioner is None and (key_bytes is None or self._ignore_keys):
                self._sticky.on_new_batch(topic, p, count)  # KIP-480: a complete batch moves keyless records on
            if idle is not None and threading.get_ident() != idle.thread_id:  # (not from an on_delivery callback)
                # A batch to send. The sender's thread needs the GIL for it, and would wait up to the
                # interpreter's switch interval (5 ms), then lose it again at each of its system calls
                # while this thread wants it back. Waiting here until its loop has nothing left to do
                # gives it one uncontended turn per batch instead.
                idle.wait_past(idle_count, 0.1)
        return fut

    def metrics(self) -> dict[MetricName, float]:
        """Kafka's producer metrics (``producer-metrics``), by name, as they are now."""
        return self._metrics.registry.values()

    def _on_send(self, *fields: Any) -> tuple:
        names = ("topic", "value", "key", "partition", "timestamp", "headers")
        record = dict(zip(names, fields))
        for interceptor in self.interceptors:
            try:
                record = interceptor.on_send(record) or record
            except Exception:
                log.exception("Error executing interceptor onSend callback")
        return tuple(record[n] for n in names)

    # ---------------------------------------------------------------- on the sender's loop

    async def fetch_partitions(self, topic: str) -> int:
        """The partition count of ``topic``, waiting up to max.block.ms for it to appear."""
        deadline = time.monotonic() + self.config["max.block.ms"] / 1000
        while True:
            try:
                await self.cluster.bootstrap()
                resp = await self.cluster.refresh([topic], allow_auto_create=True)
                t = next((t for t in resp["topics"] if t["name"] == topic), None)
                if t is not None and t["error_code"] == 0 and t["partitions"]:
                    self.partition_counts[topic] = len(t["partitions"])
                    return len(t["partitions"])
                error = errors.error_for(t["error_code"] if t else 3, f"Topic {topic} not present in metadata")
            except errors.KafkaError as e:
                error = e
            if time.monotonic() >= deadline:
                raise KafkaTimeoutError(f"Topic {topic} not present in metadata after "
                                        f"{self.config['max.block.ms']} ms: {error}")
            await asyncio.sleep(self.config["retry.backoff.ms"] / 1000)

    # ---------------------------------------------------------------- transactions (on the sender's loop)

    def _transactional(self) -> TransactionManager:
        if self.txn is None:
            raise IllegalStateError("Cannot use transactional methods without enabling transactions "
                                    "by setting the transactional.id configuration property")
        return self.txn

    async def init_transactions(self) -> None:
        """Called again on a READY producer, it bumps the epoch (waiting for the id's last
        transaction to complete): sequences start again at 0."""
        await self._transactional().init()
        self.sender.reset_sequences()

    def begin_transaction(self) -> None:
        self._transactional().begin()

    async def send_offsets_to_transaction(self, offsets, group_metadata) -> None:
        await self._transactional().send_offsets(offsets, group_metadata)

    async def end_transaction(self, commit: bool) -> None:
        """After a flush (the caller's): EndTxn. A commit of a transaction with a failed send
        raises that failure instead (the application must abort)."""
        txn = self._transactional()
        if commit and txn.error is not None:
            raise txn.error
        epoch = (txn.producer_id, txn.epoch)
        await txn.end(commit)
        if (txn.producer_id, txn.epoch) != epoch:  # transactions version 2: a new epoch, sequences from 0
            self.sender.reset_sequences()

    def start(self) -> None:
        """Start the sender (on the running loop)."""
        if self._task is None:
            self._task = asyncio.ensure_future(self.sender.run())

    def flush_now(self) -> None:
        """Make every queued batch sendable now, lingering or not."""
        self.accumulator.flushing = True
        self.sender.wake()

    async def close(self) -> None:
        """After the records still queued are answered: stop the sender, close interceptors,
        serializers and connections. (Flush first to bound the wait.)"""
        self.closed = True
        self.accumulator.closing = True
        self.sender.wake()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
        for plugin in [*self.interceptors, self.key_serializer, self.value_serializer]:
            closer = getattr(plugin, "close", None)
            if callable(closer):
                try:
                    closer()
                except Exception:  # noqa: BLE001 - one plugin's failure does not stop the close
                    log.exception("Failed to close %s", plugin)
        await self.sender.close()
        await self.cluster.aclose()


def _serializer(spec: Any, configs: dict, is_key: bool) -> Any:
    return None if spec is None else load_serde(spec, configs, is_key=is_key, method="serialize")
