"""The Worker: runs the connectors and tasks a herder gives it, each task in its own thread."""

from __future__ import annotations

import logging
import threading
import traceback
from typing import Any, Callable

from samsa.connect import plugins
from samsa.connect.api import ConnectorContext, OffsetStorageReader, SinkTask, SourceTask
from samsa.connect.config import integer
from samsa.connect.sink_task import WorkerSinkTask
from samsa.connect.source_task import WorkerSourceTask
from samsa.connect.status import FAILED, STOPPED, UNASSIGNED, StatusStore, TargetState
from samsa.connect.storage.offsets import OffsetStore
from samsa.connect.worker_task import WorkerTask

log = logging.getLogger(__name__)

class WorkerConnector:
    def __init__(self, name: str, instance: Any, config: dict[str, str]):
        self.name, self.instance, self.config = name, instance, config
        self.started = False


class Worker:
    def __init__(self, worker_id: str, config: dict[str, str], offsets: OffsetStore, status: StatusStore):
        self.worker_id = worker_id
        self.config = config
        self.offsets = offsets
        self.status = status
        self.connectors: dict[str, WorkerConnector] = {}
        self.tasks: dict[tuple[str, int], WorkerTask] = {}
        self.lock = threading.RLock()
        self.generation = 0

    # ---------------------------------------------------------------- connectors

    def start_connector(self, name: str, config: dict[str, str], target: TargetState,
                        on_reconfigure: Callable[[str], None]) -> bool:
        """Start the connector instance (not its tasks); False and FAILED status if it throws."""
        with self.lock:
            self.stop_connector(name)
            try:
                cls = plugins.connector_class(config["connector.class"])
                instance = cls()
                reader = OffsetStorageReader(lambda p: self.offsets.get(name, p))
                instance.initialize(ConnectorContext(lambda: on_reconfigure(name),
                                                     lambda e: self._connector_failed(name, e), reader))
                wc = WorkerConnector(name, instance, config)
                self.connectors[name] = wc
                if target is TargetState.STOPPED:
                    self.status.put_connector(name, STOPPED, self.worker_id, generation=self.generation)
                    return True
                instance.start(dict(config))
                wc.started = True
            except Exception as e:  # noqa: BLE001 - a connector's failure is its status
                self._connector_failed(name, e)
                return False
            self.status.put_connector(name, target.status, self.worker_id,
                                      generation=self.generation)
            return True

    def _connector_failed(self, name: str, error: BaseException) -> None:
        log.error("[%s] Connector failed", name, exc_info=error)
        self.status.put_connector(name, FAILED, self.worker_id, "".join(traceback.format_exception(error)),
                                  self.generation)

    def task_configs(self, name: str, max_tasks: int) -> list[dict[str, str]] | None:
        """The connector's task configs (each with ``task.class``), None if it is not running."""
        with self.lock:
            wc = self.connectors.get(name)
            if wc is None or not wc.started:
                return None
            instance = wc.instance
        try:
            configs = instance.task_configs(max_tasks)
            task_cls = instance.task_class()
        except Exception as e:  # noqa: BLE001
            self._connector_failed(name, e)
            return None
        task_class = f"{task_cls.__module__}.{task_cls.__qualname__}"
        return [{**{k: str(v) for k, v in c.items()}, "task.class": task_class} for c in configs[:max_tasks]]

    def stop_connector(self, name: str) -> None:
        with self.lock:
            wc = self.connectors.pop(name, None)
        if wc is not None and wc.started:
            try:
                wc.instance.stop()
            except Exception:  # noqa: BLE001
                log.exception("[%s] Stopping the connector", name)

    def set_connector_state(self, name: str, target: TargetState) -> None:
        wc = self.connectors.get(name)
        if wc is not None:
            self.status.put_connector(name, target.status,
                                      self.worker_id, generation=self.generation)

    # ---------------------------------------------------------------- tasks

    def start_task(self, name: str, task: int, connector_config: dict[str, str], task_config: dict[str, str],
                   target: TargetState) -> bool:
        with self.lock:
            self.stop_task(name, task)
            try:
                cls = plugins.connector_class(connector_config["connector.class"])
                task_cls = plugins._python_class(task_config.get("task.class", "")) or cls().task_class()
                instance = task_cls()
                common = dict(connector=name, task_id=task, worker_id=self.worker_id, worker_config=self.config,
                              connector_config=connector_config, task_config=task_config, status=self.status,
                              paused=target is TargetState.PAUSED, generation=self.generation)
                if isinstance(instance, SourceTask):
                    wt: WorkerTask = WorkerSourceTask(instance, self.offsets, **common)
                elif isinstance(instance, SinkTask):
                    wt = WorkerSinkTask(instance, **common)
                else:
                    raise TypeError(f"{task_cls} is neither a SourceTask nor a SinkTask")
            except Exception as e:  # noqa: BLE001
                log.error("Failed to start task %s-%d", name, task, exc_info=e)
                self.status.put_task(name, task, FAILED, self.worker_id, "".join(traceback.format_exception(e)),
                                     self.generation)
                return False
            self.tasks[(name, task)] = wt
            wt.start()
            return True

    def stop_task(self, name: str, task: int) -> None:
        self.stop_tasks([(name, task)])

    def stop_tasks(self, ids: list[tuple[str, int]]) -> None:
        """Stop them all at once, then wait for each (up to task.shutdown.graceful.timeout.ms)."""
        with self.lock:
            running = [self.tasks.pop(i) for i in ids if i in self.tasks]
        for wt in running:
            wt.stop()
        timeout = integer(self.config, "task.shutdown.graceful.timeout.ms", 5000) / 1000
        for wt in running:
            if not wt.join(max(timeout, 30)):
                log.error("Graceful stop of task %s-%d failed.", wt.connector, wt.id)

    def set_task_states(self, name: str, target: TargetState) -> None:
        for (n, _), wt in list(self.tasks.items()):
            if n == name:
                (wt.pause if target is TargetState.PAUSED else wt.resume)()

    def task_ids(self, name: str | None = None) -> list[tuple[str, int]]:
        return [i for i in self.tasks if name is None or i[0] == name]

    def stop(self) -> None:
        self.stop_tasks(list(self.tasks))
        for name in list(self.connectors):
            self.stop_connector(name)
            self.status.put_connector(name, UNASSIGNED, self.worker_id, generation=self.generation)
