"""Connector and task states (RUNNING, PAUSED, STOPPED, FAILED, UNASSIGNED, RESTARTING)."""

from __future__ import annotations

import json
import threading
from enum import Enum
from typing import Any, Callable

RUNNING, PAUSED, STOPPED, FAILED, UNASSIGNED, RESTARTING = (
    "RUNNING", "PAUSED", "STOPPED", "FAILED", "UNASSIGNED", "RESTARTING")


class TargetState(Enum):
    """What a connector is asked to be (Kafka's TargetState, kept in the config topic)."""

    STARTED = "STARTED"
    PAUSED = "PAUSED"
    STOPPED = "STOPPED"

    @property
    def status(self) -> str:
        """The status a running connector reports in this target state."""
        return {TargetState.STARTED: RUNNING, TargetState.PAUSED: PAUSED, TargetState.STOPPED: STOPPED}[self]


class StatusStore:
    """In memory (standalone); :class:`KafkaStatusStore` shares it through the status topic."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.connectors: dict[str, dict[str, Any]] = {}
        self.tasks: dict[str, dict[int, dict[str, Any]]] = {}

    def put_connector(self, name: str, state: str, worker_id: str, trace: str | None = None,
                      generation: int = 0) -> None:
        self._apply_connector(name, {"state": state, "trace": trace, "worker_id": worker_id,
                                     "generation": generation})

    def put_task(self, name: str, task: int, state: str, worker_id: str, trace: str | None = None,
                 generation: int = 0) -> None:
        self._apply_task(name, task, {"state": state, "trace": trace, "worker_id": worker_id,
                                      "generation": generation})

    def _apply_connector(self, name: str, status: dict[str, Any] | None) -> None:
        with self.lock:
            if status is None:
                self.connectors.pop(name, None)
            else:
                self.connectors[name] = status

    def _apply_task(self, name: str, task: int, status: dict[str, Any] | None) -> None:
        with self.lock:
            if status is None:
                self.tasks.get(name, {}).pop(task, None)
            else:
                self.tasks.setdefault(name, {})[task] = status

    def connector(self, name: str) -> dict[str, Any] | None:
        with self.lock:
            return self.connectors.get(name)

    def task(self, name: str, task: int) -> dict[str, Any] | None:
        with self.lock:
            return self.tasks.get(name, {}).get(task)

    def forget(self, name: str) -> None:
        with self.lock:
            self.connectors.pop(name, None)
            self.tasks.pop(name, None)


class KafkaStatusStore(StatusStore):
    """Keys ``status-connector-<name>`` and ``status-task-<name>-<n>``, values as Kafka's
    (``{"state", "trace", "worker_id", "generation"}``); every worker reads them all."""

    def __init__(self, send: Callable[[bytes, bytes | None], Any]) -> None:
        super().__init__()
        self.send = send

    def put_connector(self, name: str, state: str, worker_id: str, trace: str | None = None,
                      generation: int = 0) -> None:
        value = {"state": state, "trace": trace, "worker_id": worker_id, "generation": generation}
        super().put_connector(name, state, worker_id, trace, generation)
        self.send(f"status-connector-{name}".encode(), json.dumps(value).encode())

    def put_task(self, name: str, task: int, state: str, worker_id: str, trace: str | None = None,
                 generation: int = 0) -> None:
        value = {"state": state, "trace": trace, "worker_id": worker_id, "generation": generation}
        super().put_task(name, task, state, worker_id, trace, generation)
        self.send(f"status-task-{name}-{task}".encode(), json.dumps(value).encode())

    def delete(self, name: str, tasks: int) -> None:
        self.send(f"status-connector-{name}".encode(), None)
        for t in range(tasks):
            self.send(f"status-task-{name}-{t}".encode(), None)
        self.forget(name)

    def on_record(self, record: Any) -> None:
        key = (record.key or b"").decode()
        value = json.loads(record.value) if record.value else None
        if key.startswith("status-connector-"):
            self._apply_connector(key[len("status-connector-"):], value)
        elif key.startswith("status-task-"):
            name, _, task = key[len("status-task-"):].rpartition("-")
            if task.isdigit():
                self._apply_task(name, int(task), value)
