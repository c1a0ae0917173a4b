"""WorkerSourceTask: poll → transform → convert → produce; offsets stored once acknowledged."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from samsa.client.producer import Producer
from samsa.connect.api import OffsetStorageReader, SourceTask, SourceTaskContext
from samsa.connect.config import integer
from samsa.connect.data import SourceRecord
from samsa.connect.error_handling import KEY_CONVERTER, SKIP, TRANSFORMATION, VALUE_CONVERTER, ErrorHandler
from samsa.connect.errors import ConnectException
from samsa.connect.status import RUNNING
from samsa.connect.storage.offsets import OffsetStore, offset_key
from samsa.connect.worker_task import WorkerTask

log = logging.getLogger(__name__)


class WorkerSourceTask(WorkerTask):
    def __init__(self, task: SourceTask, offsets: OffsetStore, **kw: Any):
        super().__init__(**kw)
        self.task = task
        self.offsets = offsets
        self.errors = ErrorHandler(self.connector, self.id, self.connector_config)
        self.flush_interval = integer(self.worker_config, "offset.flush.interval.ms", 60000) / 1000
        self.pending: dict[bytes, dict[str, Any] | None] = {}
        self.send_error: BaseException | None = None
        self.producer: Producer | None = None
        self.lock = threading.Lock()
        self.started = False

    def reader(self) -> OffsetStorageReader:
        return OffsetStorageReader(lambda partition: self.offsets.get(self.connector, partition))

    def execute(self) -> None:
        config = {"acks": "all", "linger.ms": 0, "max.in.flight.requests.per.connection": 1,
                  "client.id": f"connector-producer-{self.connector}-{self.id}", **self.client_config("producer")}
        self.producer = Producer(config)
        self.task.initialize(SourceTaskContext(self.task_config, self.reader()))
        self.task.start(self.task_config)
        self.started = True
        self.set_state(RUNNING)
        last_commit = time.monotonic()
        while not self.stopping.is_set():
            if not self.wait_if_paused():
                break
            records = self.task.poll() or []
            for record in records:
                self.send(record)
            if self.send_error is not None:
                raise ConnectException("Unrecoverable exception from producer send callback") from self.send_error
            if time.monotonic() - last_commit >= self.flush_interval:
                self.commit_offsets()
                last_commit = time.monotonic()

    def send(self, record: SourceRecord) -> None:
        key = None
        if record.source_partition is not None:
            key = offset_key(self.connector, record.source_partition)
        out = self.errors.execute(TRANSFORMATION, lambda: self.transforms.apply(record))
        if out is None or out is SKIP:
            self.note_offset(key, record)
            self.task.commit_record(record, None)
            return
        assert isinstance(out, SourceRecord) or hasattr(out, "topic")
        k = self.errors.execute(KEY_CONVERTER, lambda: self.key_converter.from_connect_data(
            out.topic, out.key_schema, out.key))
        v = self.errors.execute(VALUE_CONVERTER, lambda: self.value_converter.from_connect_data(
            out.topic, out.value_schema, out.value))
        if k is SKIP or v is SKIP:
            self.note_offset(key, record)
            return

        def delivered(metadata: Any, error: BaseException | None) -> None:
            if error is not None:
                self.send_error = error
                return
            try:
                self.task.commit_record(record, metadata)
            except Exception:  # noqa: BLE001
                log.exception("commit_record of %s-%d", self.connector, self.id)
        self.producer.send(out.topic, v, key=k, partition=out.kafka_partition, timestamp=out.timestamp,
                           headers=list(out.headers) or None, on_delivery=delivered)
        self.note_offset(key, record)

    def note_offset(self, key: bytes | None, record: SourceRecord) -> None:
        if key is not None and record.source_offset is not None:
            with self.lock:
                self.pending[key] = record.source_offset

    def commit_offsets(self) -> None:
        """Flush the producer, then store the offsets of every record it acknowledged."""
        with self.lock:
            snapshot, self.pending = self.pending, {}
        if self.producer is not None:
            left = self.producer.flush(integer(self.worker_config, "offset.flush.timeout.ms", 5000) / 1000 + 25)
            if left or self.send_error is not None:
                with self.lock:
                    self.pending = {**snapshot, **self.pending}
                log.error("%s-%d Failed to flush, timed out or failed sends: offsets not committed",
                          self.connector, self.id)
                return
        if snapshot:
            self.offsets.put(self.connector, snapshot)
        try:
            self.task.commit()
        except Exception:  # noqa: BLE001
            log.exception("commit of %s-%d", self.connector, self.id)

    def close(self) -> None:
        try:
            if self.send_error is None:
                self.commit_offsets()
        finally:
            self.stop_task()
            if self.producer is not None:
                self.producer.close(10)

    def stop(self) -> None:
        super().stop()
