"""KafkaBasedLog: a compacted topic read from the start into memory and tailed, plus writes.

Distributed workers keep their configs, offsets and statuses this way. ``read_to_end()``
waits until everything written before the call has been seen, so a worker acts on the
newest state (Kafka's ``readToEnd``).
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable

from samsa.client.admin import Admin
from samsa.client.consumer import Consumer
from samsa.client.producer import Producer
from samsa.client.types import NewTopic, TopicPartition
from samsa.protocol import errors

log = logging.getLogger(__name__)


def ensure_topic(admin: Admin, name: str, partitions: int, replication: int, config: dict[str, str]) -> None:
    try:
        admin.create_topics([NewTopic(name, partitions, replication, config=config)])
        log.info("Created topic %s (%d partitions, replication factor %d)", name, partitions, replication)
    except errors.TopicAlreadyExistsError:
        pass


class KafkaBasedLog:
    def __init__(self, topic: str, client_config: dict[str, Any], on_record: Callable[[Any], None],
                 producer_config: dict[str, Any] | None = None):
        self.topic = topic
        self.on_record = on_record
        self.client_config = client_config
        self.producer = Producer({**client_config, **(producer_config or {}), "acks": "all",
                                  "enable.idempotence": "true", "linger.ms": 0})
        self.consumer = Consumer({**client_config, "enable.auto.commit": "false", "auto.offset.reset": "earliest",
                                  "isolation.level": "read_committed"})
        self.partitions: list[TopicPartition] = []
        self.positions: dict[TopicPartition, int] = {}
        self.cond = threading.Condition()
        self.stopping = False
        self.thread = threading.Thread(target=self._run, name=f"kafka-log-{topic}", daemon=True)

    def start(self) -> None:
        self.partitions = [TopicPartition(self.topic, p.partition)
                           for p in self.consumer.partitions_for(self.topic, timeout=60)]
        self.consumer.assign(self.partitions)
        self.consumer.seek_to_beginning(self.partitions)
        self.thread.start()
        self.read_to_end()

    def _run(self) -> None:
        while not self.stopping:
            try:
                records = self.consumer.poll(0.2)
            except Exception as e:  # noqa: BLE001 - a broker may be between states; keep tailing
                if self.stopping:
                    return
                log.warning("Reading %s: %s", self.topic, e)
                continue
            for r in records:
                try:
                    self.on_record(r)
                except Exception:  # noqa: BLE001
                    log.exception("Applying a record of %s failed", self.topic)
            with self.cond:
                for tp in self.partitions:
                    try:
                        self.positions[tp] = self.consumer.position(tp, timeout=5)
                    except Exception:  # noqa: BLE001
                        pass
                self.cond.notify_all()

    def read_to_end(self, timeout: float = 60.0) -> None:
        ends = self.consumer_end_offsets()
        with self.cond:
            ok = self.cond.wait_for(lambda: all(self.positions.get(tp, -1) >= end for tp, end in ends.items()),
                                    timeout)
        if not ok:
            raise TimeoutError(f"Timed out reading {self.topic} to its end")

    def consumer_end_offsets(self) -> dict[TopicPartition, int]:
        probe = Consumer({**self.client_config, "enable.auto.commit": "false", "isolation.level": "read_committed"})
        try:
            return probe.end_offsets(self.partitions, timeout=30)
        finally:
            probe.close()

    def send(self, key: bytes, value: bytes | None, partition: int | None = None) -> Any:
        return self.producer.send(self.topic, value, key=key, partition=partition)

    def flush(self, timeout: float = 30) -> None:
        self.producer.flush(timeout)

    def stop(self) -> None:
        self.stopping = True
        self.producer.close(10)
        self.thread.join(5)
        try:
            self.consumer.close(5)
        except Exception:  # noqa: BLE001
            pass
