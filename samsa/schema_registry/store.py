"""The registry's state, as the compacted ``_schemas`` topic holds it (one partition).

Keys and values are the Schema Registry's JSON: a key is ``{"keytype": ..., "subject": ...,
"version": ..., "magic": ...}`` with keytype SCHEMA (value: subject, version, id, schema,
schemaType, references, deleted), CONFIG (``{"compatibilityLevel": ...}``), MODE
(``{"mode": ...}``), DELETE_SUBJECT (``{"subject", "version"}``: every version up to it soft
deleted), CLEAR_SUBJECT and NOOP; a null value removes the key (a permanent delete). Every
process reads the topic from the start into memory; only the elected leader writes, and a
write returns once this process has read its own record back, so what it answers is what
every other process will have.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from samsa.client.admin import Admin
from samsa.client.consumer import Consumer
from samsa.client.producer import Producer
from samsa.client.types import NewTopic, TopicPartition
from samsa.protocol import errors

log = logging.getLogger(__name__)


@dataclass
class Version:
    subject: str
    version: int
    id: int
    schema_type: str
    schema: str
    references: list[dict]
    deleted: bool = False

    def to_json(self) -> dict:
        out: dict[str, Any] = {"subject": self.subject, "version": self.version, "id": self.id}
        if self.schema_type != "AVRO":
            out["schemaType"] = self.schema_type
        if self.references:
            out["references"] = self.references
        out["schema"] = self.schema
        return out


@dataclass
class State:
    subjects: dict[str, dict[int, Version]] = field(default_factory=dict)
    configs: dict[str | None, str] = field(default_factory=dict)
    modes: dict[str | None, str] = field(default_factory=dict)
    max_id: int = 0

    def apply(self, key: dict, value: dict | None) -> None:
        kind, subject = key.get("keytype"), key.get("subject")
        if kind == "SCHEMA":
            versions = self.subjects.setdefault(subject, {})
            if value is None:
                versions.pop(key["version"], None)
                if not versions:
                    self.subjects.pop(subject, None)
                return
            v = Version(value["subject"], value["version"], value["id"], value.get("schemaType") or "AVRO",
                        value["schema"], value.get("references") or [], bool(value.get("deleted")))
            versions[v.version] = v
            self.max_id = max(self.max_id, v.id)
        elif kind == "CONFIG":
            if value is None:
                self.configs.pop(subject, None)
            else:
                self.configs[subject] = value.get("compatibilityLevel") or value.get("compatibility")
        elif kind == "MODE":
            if value is None:
                self.modes.pop(subject, None)
            else:
                self.modes[subject] = value["mode"]
        elif kind == "DELETE_SUBJECT" and value is not None:
            for v in self.subjects.get(subject, {}).values():
                if v.version <= value.get("version", 1 << 31):
                    v.deleted = True

    def by_id(self, schema_id: int) -> list[Version]:
        return [v for vs in self.subjects.values() for v in vs.values() if v.id == schema_id]


def schema_key(subject: str, version: int) -> dict:
    return {"keytype": "SCHEMA", "subject": subject, "version": version, "magic": 1}


def config_key(subject: str | None) -> dict:
    return {"keytype": "CONFIG", "subject": subject, "magic": 0}


def mode_key(subject: str | None) -> dict:
    return {"keytype": "MODE", "subject": subject, "magic": 0}


def delete_subject_key(subject: str) -> dict:
    return {"keytype": "DELETE_SUBJECT", "subject": subject, "magic": 0}


def _encode(obj: dict | None) -> bytes | None:
    return None if obj is None else json.dumps(obj, separators=(",", ":")).encode()


class StoreError(Exception):
    """50001/50002: the topic could not be written or read back in time."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


class KafkaStore:
    """``client_config``: bootstrap servers and the broker connection's security keys."""

    def __init__(self, client_config: dict[str, Any], topic: str = "_schemas", replication_factor: int = 3,
                 timeout_ms: int = 500, init_timeout_ms: int = 60000, on_change: Callable[[], None] | None = None):
        self.client_config, self.topic = client_config, topic
        self.replication_factor, self.timeout_s = replication_factor, timeout_ms / 1000
        self.init_timeout_s = init_timeout_ms / 1000
        self.state = State()
        self.lock = threading.RLock()          # guards state
        self._read_up_to = threading.Condition(self.lock)
        self.next_offset = 0                   # of the next record to read
        self._stopped = threading.Event()
        self._tp = TopicPartition(topic, 0)
        self.on_change = on_change
        self.producer: Producer | None = None
        self.consumer: Consumer | None = None
        self._reader: threading.Thread | None = None

    def start(self) -> None:
        self._ensure_topic()
        self.consumer = Consumer({**self.client_config, "enable.auto.commit": False,
                                  "auto.offset.reset": "earliest", "client.id": "schema-registry-reader"})
        self.consumer.assign([self._tp])
        self.consumer.seek_to_beginning([self._tp])
        self.producer = Producer({**self.client_config, "acks": "all", "client.id": "schema-registry-writer",
                                  "enable.idempotence": True, "linger.ms": 0})
        end = self.consumer.end_offsets([self._tp])[self._tp]
        self._reader = threading.Thread(target=self._read, name="schema-registry-reader", daemon=True)
        self._reader.start()
        self.wait_for(end, self.init_timeout_s)
        log.info("Read %s up to offset %d: %d subjects, largest id %d", self.topic, end,
                 len(self.state.subjects), self.state.max_id)

    def _ensure_topic(self) -> None:
        admin = Admin(self.client_config)
        try:
            if self.topic in admin.list_topics(include_internal=True):
                return
            brokers = len(admin.describe_cluster().brokers)
            rf = min(self.replication_factor, brokers)
            if rf < self.replication_factor:
                log.warning("Creating %s with replication factor %d: only %d brokers (kafkastore.topic."
                            "replication.factor=%d)", self.topic, rf, brokers, self.replication_factor)
            try:
                admin.create_topics([NewTopic(self.topic, 1, rf, config={"cleanup.policy": "compact"})])
            except errors.TopicAlreadyExistsError:
                pass
        finally:
            admin.close()

    def _read(self) -> None:
        assert self.consumer is not None
        while not self._stopped.is_set():
            try:
                records = self.consumer.poll(0.2)
            except Exception as e:  # noqa: BLE001 - the reader keeps reading, as the registry's does
                if self._stopped.is_set():
                    return
                log.warning("Reading %s: %s", self.topic, e)
                time.sleep(0.5)
                continue
            with self.lock:
                changed = False
                for r in records:
                    try:
                        key = json.loads(r.key) if r.key is not None else None
                        value = json.loads(r.value) if r.value is not None else None
                        if isinstance(key, dict):
                            self.state.apply(key, value)
                            changed = True
                    except (ValueError, KeyError, TypeError) as e:
                        log.warning("Skipping record %d of %s: %s", r.offset, self.topic, e)
                    self.next_offset = r.offset + 1
                if records:
                    self._read_up_to.notify_all()
            if changed and self.on_change is not None:
                self.on_change()

    def wait_for(self, offset: int, timeout: float) -> None:
        """Until every record before ``offset`` has been read."""
        deadline = time.monotonic() + timeout
        with self.lock:
            while self.next_offset < offset:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise StoreError(50002, f"Timed out waiting for the store to read offset {offset} of "
                                            f"{self.topic} (read up to {self.next_offset})")
                self._read_up_to.wait(left)

    def write(self, records: list[tuple[dict, dict | None]]) -> None:
        """Append (key, value) records and wait until they are read back (the leader only)."""
        assert self.producer is not None
        try:
            futures = [self.producer.send(self.topic, _encode(v), _encode(k), partition=0) for k, v in records]
            last = [f.result(timeout=max(self.timeout_s, 5.0)) for f in futures][-1]
        except Exception as e:  # noqa: BLE001 - any failure to append is the store's error
            raise StoreError(50001, f"Error while writing to the {self.topic} topic: {e}") from None
        self.wait_for(last.offset + 1, max(self.timeout_s, 10.0))

    def sync(self) -> None:
        """Read everything written so far (a NOOP of our own, read back): a new leader's first step."""
        self.write([({"keytype": "NOOP", "magic": 0}, None)])

    def close(self) -> None:
        self._stopped.set()
        if self._reader is not None:
            self._reader.join(5)
        for c in (self.producer, self.consumer):
            if c is not None:
                try:
                    c.close()
                except Exception:  # noqa: BLE001
                    pass
