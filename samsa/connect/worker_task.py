"""A running task: one thread, its state in the status store, its trace when it fails."""

from __future__ import annotations

import logging
import threading
import traceback
from typing import Any

from samsa.connect import plugins
from samsa.connect.config import prefixed
from samsa.connect.converters import Converter
from samsa.connect.status import FAILED, PAUSED, RUNNING, UNASSIGNED, StatusStore
from samsa.connect.transforms import TransformationChain

log = logging.getLogger(__name__)


def make_converter(worker: dict[str, str], connector: dict[str, str], which: str) -> Converter:
    """``key.converter``/``value.converter`` of the connector, else the worker's, with their sub-keys."""
    source = connector if connector.get(which) else worker
    conv = plugins.converter(source[which])
    conv.configure(prefixed(source, which + "."), which.startswith("key"))
    return conv


class WorkerTask:
    def __init__(self, connector: str, task_id: int, worker_id: str, worker_config: dict[str, str],
                 connector_config: dict[str, str], task_config: dict[str, str], status: StatusStore,
                 paused: bool = False, generation: int = 0):
        self.connector, self.id = connector, task_id
        self.worker_id = worker_id
        self.worker_config = worker_config
        self.connector_config = connector_config
        self.task_config = task_config
        self.status = status
        self.generation = generation
        self.stopping = threading.Event()
        self.resumed = threading.Event()
        if not paused:
            self.resumed.set()
        self.state = UNASSIGNED
        self.failed_trace: str | None = None
        self.thread = threading.Thread(target=self._main, name=f"task-{connector}-{task_id}", daemon=True)
        self.key_converter = make_converter(worker_config, connector_config, "key.converter")
        self.value_converter = make_converter(worker_config, connector_config, "value.converter")
        self.transforms = TransformationChain(connector_config, plugins.find_transform)

    def start(self) -> None:
        self.thread.start()

    def set_state(self, state: str, trace: str | None = None) -> None:
        if state != self.state or trace:
            self.state = state
            self.status.put_task(self.connector, self.id, state, self.worker_id, trace, self.generation)

    def _main(self) -> None:
        try:
            self.execute()
        except BaseException as e:  # noqa: BLE001 - a task's failure is its status, never the worker's
            self.failed_trace = "".join(traceback.format_exception(e))
            log.error("%s-%d Task threw an uncaught and unrecoverable exception. Task is being killed and will "
                      "not recover until manually restarted", self.connector, self.id, exc_info=e)
            self.set_state(FAILED, self.failed_trace)
        finally:
            try:
                self.close()
            except Exception:  # noqa: BLE001
                log.exception("Closing task %s-%d", self.connector, self.id)
            if self.state != FAILED and not self.stopping.is_set():
                self.set_state(UNASSIGNED)

    def wait_if_paused(self) -> bool:
        """True when the task should go on; while paused its state is PAUSED."""
        if self.resumed.is_set():
            if self.state == PAUSED:
                self.set_state(RUNNING)
            return not self.stopping.is_set()
        self.set_state(PAUSED)
        self.on_pause()
        while not self.resumed.wait(0.2):
            if self.stopping.is_set():
                return False
            self.while_paused()
        self.on_resume()
        self.set_state(RUNNING)
        return not self.stopping.is_set()

    def on_pause(self) -> None:
        pass

    def while_paused(self) -> None:
        pass

    def on_resume(self) -> None:
        pass

    def pause(self) -> None:
        self.resumed.clear()

    def resume(self) -> None:
        self.resumed.set()

    def stop(self) -> None:
        self.stopping.set()
        self.resumed.set()

    def stop_task(self) -> None:
        """Stop the connector's task if it was started (``task``/``started`` are the subclass's),
        then the transforms; a task that throws here is logged, not raised."""
        if self.started:  # type: ignore[attr-defined]
            try:
                self.task.stop()  # type: ignore[attr-defined]
            except Exception:  # noqa: BLE001
                log.exception("Stopping task %s-%d", self.connector, self.id)
        self.transforms.close()

    def join(self, timeout: float) -> bool:
        self.thread.join(timeout)
        return not self.thread.is_alive()

    def execute(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def client_config(self, kind: str) -> dict[str, Any]:
        """The worker's ``producer.*``/``consumer.*`` keys, then the connector's ``<kind>.override.*``."""
        w = self.worker_config
        out: dict[str, Any] = {"bootstrap.servers": w["bootstrap.servers"]}
        out.update(prefixed(w, kind + "."))
        out.update(prefixed(self.connector_config, kind + ".override."))
        return out
