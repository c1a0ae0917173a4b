"""WorkerSinkTask: consume (group ``connect-<name>``) → convert → transform → put; offsets
committed after the task's flush/pre_commit, on an interval, on revocation and on stop."""

from __future__ import annotations

import logging
import re
import time
from typing import Any

from samsa.client.consumer import Consumer, ConsumerRebalanceListener, OffsetAndMetadata
from samsa.client.producer import Producer
from samsa.client.types import TopicPartition
from samsa.connect.api import ErrantRecordReporter, SinkTask, SinkTaskContext
from samsa.connect.config import integer, sink_topics
from samsa.connect.data import SinkRecord
from samsa.connect.error_handling import KEY_CONVERTER, SKIP, TRANSFORMATION, VALUE_CONVERTER, ErrorHandler
from samsa.connect.errors import RetriableException
from samsa.connect.status import RUNNING
from samsa.connect.worker_task import WorkerTask

log = logging.getLogger(__name__)


class _Listener(ConsumerRebalanceListener):
    def __init__(self, owner: "WorkerSinkTask"):
        self.owner = owner

    def on_partitions_assigned(self, partitions: list[TopicPartition]) -> None:
        self.owner.task.open(list(partitions))

    def on_partitions_revoked(self, partitions: list[TopicPartition]) -> None:
        self.owner.commit(list(partitions))
        self.owner.task.close(list(partitions))
        for tp in partitions:
            self.owner.seen.pop(tp, None)

    def on_partitions_lost(self, partitions: list[TopicPartition]) -> None:
        self.owner.task.close(list(partitions))
        for tp in partitions:
            self.owner.seen.pop(tp, None)


def group_id(connector: str) -> str:
    return f"connect-{connector}"


class WorkerSinkTask(WorkerTask):
    def __init__(self, task: SinkTask, **kw: Any):
        super().__init__(**kw)
        self.task = task
        self.consumer: Consumer | None = None
        self.dlq: Producer | None = None
        self.errors = ErrorHandler(self.connector, self.id, self.connector_config, self._send_to_dlq)
        self.flush_interval = integer(self.worker_config, "offset.flush.interval.ms", 60000) / 1000
        self.seen: dict[TopicPartition, int] = {}
        self.committed: dict[TopicPartition, int] = {}
        self.started = False

    def _send_to_dlq(self, topic: str, key: Any, value: Any, headers: list) -> None:
        if self.dlq is None:
            self.dlq = Producer({"acks": "all", **self.client_config("producer")})
            from samsa.client.admin import Admin

            from samsa.connect.storage.kafka_log import ensure_topic
            with Admin({"bootstrap.servers": self.worker_config["bootstrap.servers"],
                        **self.client_config("admin")}) as admin:
                ensure_topic(admin, topic, 1, self.errors.dlq_replication, {})
        self.dlq.send(topic, value, key=key, headers=headers or None).result(30)

    def execute(self) -> None:
        config = {"group.id": group_id(self.connector), "enable.auto.commit": "false",
                  "auto.offset.reset": "earliest", "client.id": f"connector-consumer-{self.connector}-{self.id}",
                  **self.client_config("consumer")}
        self.consumer = Consumer(config)
        reporter = ErrantRecordReporter(lambda record, error: self.errors.report("TASK_PUT", error, record))
        self.context = SinkTaskContext(self.task_config, reporter)
        self.task.initialize(self.context)
        self.task.start(self.task_config)
        self.started = True
        topics = sink_topics(self.connector_config)
        if topics:
            self.consumer.subscribe(topics, listener=_Listener(self))
        else:
            self.consumer.subscribe(pattern=re.compile(self.connector_config["topics.regex"]),
                                    listener=_Listener(self))
        self.set_state(RUNNING)
        last_commit = time.monotonic()
        retry: list[SinkRecord] | None = None
        while not self.stopping.is_set():
            if not self.wait_if_paused():
                break
            batch = retry if retry is not None else self.convert(self.consumer.poll(0.5))
            retry = None
            try:
                self.task.put(batch)
            except RetriableException as e:
                log.warning("%s-%d put failed, will retry: %s", self.connector, self.id, e)
                retry = batch
                self.stopping.wait(0.5)
                continue
            if self.context.offsets_to_reset:
                for tp, offset in self.context.offsets_to_reset.items():
                    self.consumer.seek(tp, offset)
                self.context.offsets_to_reset = {}
            if self.context.commit_requested or time.monotonic() - last_commit >= self.flush_interval:
                self.context.commit_requested = False
                self.commit(None)
                last_commit = time.monotonic()

    def convert(self, records: list[Any]) -> list[SinkRecord]:
        out: list[SinkRecord] = []
        for r in records:
            tp = TopicPartition(r.topic, r.partition)
            self.seen[tp] = r.offset + 1
            key = self.errors.execute(KEY_CONVERTER, lambda r=r: self.key_converter.to_connect_data(r.topic, r.key), r)
            if key is SKIP:
                continue
            value = self.errors.execute(VALUE_CONVERTER, lambda r=r: self.value_converter.to_connect_data(
                r.topic, r.value), r)
            if value is SKIP:
                continue
            record = SinkRecord(r.topic, r.partition, key[0], key[1], value[0], value[1], r.timestamp,
                                list(r.headers or []), r.offset,
                                "LogAppendTime" if r.timestamp_type == 1 else "CreateTime", r.topic, r.partition,
                                r.offset)
            result = self.errors.execute(TRANSFORMATION, lambda rec=record: self.transforms.apply(rec), r)
            if result is SKIP or result is None:
                continue
            out.append(result)
        return out

    def commit(self, partitions: list[TopicPartition] | None) -> None:
        if self.consumer is None:
            return
        current = {tp: o for tp, o in self.seen.items() if partitions is None or tp in partitions}
        if not current:
            return
        try:
            allowed = self.task.pre_commit(dict(current)) or {}
        except Exception:  # noqa: BLE001 - Kafka skips the commit and goes on
            log.exception("%s-%d Offset commit failed during pre_commit; rewinding", self.connector, self.id)
            for tp, offset in self.committed.items():
                if tp in current:
                    self.consumer.seek(tp, offset)
            return
        todo = {tp: OffsetAndMetadata(o) for tp, o in allowed.items() if self.committed.get(tp) != o}
        if not todo:
            return
        try:
            self.consumer.commit(todo, timeout=30)
            self.committed.update({tp: om.offset for tp, om in todo.items()})
        except Exception as e:  # noqa: BLE001
            log.warning("%s-%d Commit of offsets failed: %s", self.connector, self.id, e)

    def on_pause(self) -> None:
        if self.consumer is not None:
            self.consumer.pause(self.consumer.assignment())

    def while_paused(self) -> None:
        if self.consumer is not None:
            self.consumer.pause(self.consumer.assignment())
            self.consumer.poll(0)

    def on_resume(self) -> None:
        if self.consumer is not None:
            self.consumer.resume(self.consumer.assignment())

    def close(self) -> None:
        try:
            if self.started and self.failed_trace is None:
                self.commit(None)
        finally:
            self.stop_task()
            if self.consumer is not None:
                self.consumer.close(10)
            if self.dlq is not None:
                self.dlq.close(10)
