"""Exactly once out of an at-least-once writer: :class:`ExactlyOnceRelay` copies a topic written
at least once (Spark's Kafka sink) to another topic exactly once.

Spark's Real-Time Mode writes with Spark's Kafka sink, at least once: after a crash Spark
replays the input from its last checkpoint (up to a Real-Time Mode batch) and writes those
outputs again. Its ``foreach`` sink could write in transactions, but PySpark hands a Python
``foreach`` its rows in batches that double in size (Spark's ``AutoBatchedPickler``), so rows
waited seconds there (BENCHMARKS.md, issue 25). So the query tags each output record with
where its input came from (header ``samsa.source``: ``<partition>:<offset>`` of the input
topic), and the relay, a consume-transform-produce loop with Kafka transactions:

- reads the tagged topic; for each of its partitions and each input partition it keeps the
  highest input offset it has copied. One Spark task writes one input partition's outputs in
  order, and a replay writes them again from an earlier offset: a record whose input offset is
  not above that mark was copied already, and is left out;
- writes the others, without the tag, to the output topic in a transaction that also commits
  its position in the tagged topic, as consumer group ``group``, with the marks as the offsets'
  metadata. So output, position and marks are committed together, every ``commit_interval_ms``;
- starts by fencing an older relay with the same transactional id (its open transaction is
  aborted) and reading position and marks back.

Readers of the output topic use ``isolation.level=read_committed``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any, Callable, Sequence

from samsa.client.consumer import Consumer
from samsa.client.producer import Producer
from samsa.client.types import OffsetAndMetadata, TopicPartition

log = logging.getLogger("samsa.pipelines.relay")

SOURCE_HEADER = "samsa.source"


def source_tag(partition: int, offset: int) -> bytes:
    return f"{partition}:{offset}".encode()


class ExactlyOnceRelay:
    def __init__(self, config: dict[str, Any], tagged_topic: str, output_topic: str, group: str,
                 commit_interval_ms: int = 50, also: Callable[[bytes], Sequence[str]] | None = None):
        """``config``: the clients' connection keys (``bootstrap.servers``, security); ``group``
        is also the transactional id; ``also``: more topics a record's value is copied to, in the
        same transaction."""
        self.config = dict(config)
        self.also = also
        self.tagged, self.output, self.group = tagged_topic, output_topic, group
        self.interval = commit_interval_ms / 1000
        self._producer: Producer | None = None
        self._consumer: Consumer | None = None
        self._marks: dict[TopicPartition, dict[int, int]] = {}  # tagged partition -> input partition -> offset
        self._positions: dict[TopicPartition, int] = {}  # next offsets of the tagged partitions, not committed
        self._opened_at: float | None = None  # when the open transaction began
        self.copied = self.skipped = 0

    # ---------------------------------------------------------------- life

    def start(self) -> None:
        self._producer = Producer({**self.config, "transactional.id": self.group, "linger.ms": 0})
        self._producer.init_transactions()  # fences an older relay; its open transaction is aborted
        self._consumer = Consumer({**self.config, "group.id": self.group, "enable.auto.commit": False,
                                   "auto.offset.reset": "earliest", "fetch.max.wait.ms": 50})
        tps = [TopicPartition(self.tagged, p.partition) for p in self._consumer.partitions_for(self.tagged)]
        self._consumer.assign(tps)
        for tp, committed in self._consumer.committed(tps).items():
            if committed is not None and committed.offset >= 0:
                self._consumer.seek(tp, committed.offset)
                self._marks[tp] = {int(k): v for k, v in json.loads(committed.metadata or "{}").items()}

    def run(self, stop: threading.Event) -> None:
        """Copy until ``stop`` is set, then commit what was copied."""
        while not stop.is_set():
            self.step(0.05)
        self.commit()

    def drain(self, timeout: float = 120.0) -> None:
        """Copy up to the tagged topic's current end, and commit."""
        assert self._consumer is not None
        tps = list(self._consumer.assignment())
        ends = self._consumer.end_offsets(tps)
        deadline = time.monotonic() + timeout
        while any(self._consumer.position(tp) < end for tp, end in ends.items()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.tagged} not relayed to its end offsets {ends} in {timeout:g} s")
            self.step(0.2)
        self.commit()

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
        if self._producer is not None:
            self._producer.close()

    # ---------------------------------------------------------------- copying

    def step(self, timeout: float) -> None:
        assert self._consumer is not None and self._producer is not None
        for r in self._consumer.poll(timeout):
            tp = TopicPartition(r.topic, r.partition)
            self._positions[tp] = r.offset + 1
            tag = next((v for k, v in r.headers if k == SOURCE_HEADER), None)
            if tag is None:
                raise ValueError(f"record {r.offset} of {tp} has no {SOURCE_HEADER} header")
            partition, _, offset = tag.decode().partition(":")
            marks = self._marks.setdefault(tp, {})
            if int(offset) <= marks.get(int(partition), -1):
                self.skipped += 1  # a replay's copy of a record copied already
                continue
            marks[int(partition)] = int(offset)
            self._begin()
            headers = [(k, v) for k, v in r.headers if k != SOURCE_HEADER] or None
            for topic in (self.output, *(self.also(r.value) if self.also is not None else ())):
                self._producer.send(topic, r.value, key=r.key, headers=headers)
            self.copied += 1
        if self._positions:
            self._begin()
        if self._opened_at is not None and time.monotonic() - self._opened_at >= self.interval:
            self.commit()

    def _begin(self) -> None:
        if self._opened_at is None:
            assert self._producer is not None
            self._producer.begin_transaction()
            self._opened_at = time.monotonic()

    def commit(self) -> None:
        if self._opened_at is None:
            return
        assert self._producer is not None
        offsets = {tp: OffsetAndMetadata(pos, json.dumps(self._marks.get(tp, {}), separators=(",", ":")))
                   for tp, pos in self._positions.items()}
        if offsets:
            self._producer.send_offsets_to_transaction(offsets, self.group)
        self._producer.commit_transaction()
        self._positions.clear()
        self._opened_at = None


def copied_up_to(config: dict[str, Any], tagged_topic: str, group: str) -> dict[int, int]:
    """Per input partition, the input offset up to which the relay ``group`` has copied every
    output (committed): the lowest of its marks over the tagged partitions. A writer started
    again may leave out its outputs of inputs up to there: the relay would leave them out."""
    consumer = Consumer({**config, "group.id": group, "enable.auto.commit": False})
    try:
        tps = [TopicPartition(tagged_topic, p.partition) for p in consumer.partitions_for(tagged_topic)]
        marks = [json.loads(c.metadata or "{}") if c is not None and c.offset >= 0 else {}
                 for c in consumer.committed(tps).values()]
    finally:
        consumer.close()
    inputs = {int(p) for m in marks for p in m}
    return {p: min(int(m.get(str(p), -1)) for m in marks) for p in inputs if all(str(p) in m for m in marks)}


class RelayThread(threading.Thread):
    """An :class:`ExactlyOnceRelay` running beside the pipeline's queries. If it fails it calls
    ``on_failure`` (the pipeline stops: its decisions would go nowhere), and ``stop()`` raises
    its error."""

    def __init__(self, relay: ExactlyOnceRelay, on_failure: Callable[[], None] = lambda: None):
        super().__init__(name=f"relay-{relay.group}", daemon=True)
        self.relay = relay
        self.on_failure = on_failure
        self.stopping = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.relay.run(self.stopping)
        except BaseException as e:  # noqa: BLE001 - reported by the pipeline (stop())
            self.error = e
            log.exception("the relay from %s to %s failed", self.relay.tagged, self.relay.output)
            self.on_failure()

    def stop(self) -> None:
        self.stopping.set()
        self.join()
        if self.error is not None:
            raise self.error
