"""Standalone mode: one worker, configs in memory, source offsets in ``offset.storage.file.filename``."""

from __future__ import annotations

import logging
from typing import Any

from samsa.connect.config import integer
from samsa.connect.herder import Herder
from samsa.connect.errors import ConflictException
from samsa.connect.status import FAILED, StatusStore, TargetState
from samsa.connect.storage.offsets import FileOffsetStore
from samsa.connect.worker import Worker

log = logging.getLogger(__name__)


class StandaloneHerder(Herder):
    def __init__(self, worker_config: dict[str, str], worker_id: str):
        path = worker_config.get("offset.storage.file.filename")
        if not path:
            raise ValueError('Missing required configuration "offset.storage.file.filename" which has no default '
                             'value.')
        offsets = FileOffsetStore(path)
        super().__init__(Worker(worker_id, worker_config, offsets, StatusStore()), worker_config)

    def start(self) -> None:
        self.worker.offsets.start()

    def stop(self) -> None:
        self.worker.stop()
        self.worker.offsets.stop()

    # ---------------------------------------------------------------- applying changes

    def write_connector_config(self, name: str, config: dict[str, str], allow_replace: bool) -> bool:
        with self.lock:
            created = name not in self.configs
            if not created and not allow_replace:
                raise ConflictException(f"Connector {name} already exists")
            self.configs[name] = config
            self.target.setdefault(name, TargetState.STARTED)
            self._start(name)
            return created

    def _start(self, name: str) -> None:
        config, target = self.configs[name], self.target[name]
        self.worker.stop_tasks(self.worker.task_ids(name))
        if not self.worker.start_connector(name, config, target, self.reconfigure):
            self.task_config[name] = []
            return
        if target is TargetState.STOPPED:
            self.task_config[name] = []
            return
        self._update_tasks(name)

    def _update_tasks(self, name: str) -> None:
        config = self.configs[name]
        configs = self.worker.task_configs(name, integer(config, "tasks.max", 1))
        if configs is None:
            return
        self.worker.stop_tasks(self.worker.task_ids(name))
        self.task_config[name] = configs
        for i, tc in enumerate(configs):
            self.worker.start_task(name, i, config, tc, self.target[name])

    def reconfigure(self, name: str) -> None:
        """The connector asked for new task configs (its input changed)."""
        with self.lock:
            if name in self.configs and self.target.get(name) is not TargetState.STOPPED:
                old = self.task_config.get(name)
                configs = self.worker.task_configs(name, integer(self.configs[name], "tasks.max", 1))
                if configs is not None and configs != old:
                    self._update_tasks(name)

    def write_delete(self, name: str) -> None:
        with self.lock:
            self.worker.stop_tasks(self.worker.task_ids(name))
            self.worker.stop_connector(name)
            self.configs.pop(name, None)
            self.task_config.pop(name, None)
            self.target.pop(name, None)
            self.worker.status.forget(name)

    def write_target_state(self, name: str, state: TargetState) -> None:
        with self.lock:
            previous = self.target.get(name)
            self.target[name] = state
            if state is TargetState.STOPPED or previous is TargetState.STOPPED:
                self._start(name)
            else:
                self.worker.set_connector_state(name, state)
                self.worker.set_task_states(name, state)

    def restart_connector(self, name: str, include_tasks: bool, only_failed: bool) -> dict[str, Any] | None:
        self._config(name)
        with self.lock:
            connector_failed = (self.worker.status.connector(name) or {}).get("state") == FAILED
            if not only_failed or connector_failed:
                self.worker.start_connector(name, self.configs[name], self.target[name], self.reconfigure)
            if include_tasks:
                for i, tc in enumerate(self.task_config.get(name, [])):
                    if not only_failed or (self.worker.status.task(name, i) or {}).get("state") == FAILED:
                        self.worker.start_task(name, i, self.configs[name], tc, self.target[name])
        return self.connector_status(name) if include_tasks or only_failed else None

    def restart_task(self, name: str, task: int) -> None:
        self.task_status(name, task)
        with self.lock:
            self.worker.start_task(name, task, self.configs[name], self.task_config[name][task], self.target[name])
