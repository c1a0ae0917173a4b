"""Distributed mode: configs, offsets and statuses in compacted topics; connectors and tasks
spread over the workers of one ``group.id`` by the group protocol (:mod:`samsa.connect.group`).

Config topic records (Kafka's keys and JSON): ``connector-<name>`` ``{"properties": {...}}``,
``task-<name>-<n>`` ``{"properties": {...}}``, ``commit-<name>`` ``{"tasks": n}`` (the task
configs before it take effect together), ``target-state-<name>`` ``{"state": ...}`` and
``restart-connector-<name>``. Any worker writes them; every worker reads them all, and a
change in the set of connectors or tasks makes the workers rebalance.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

from samsa.client.admin import Admin
from samsa.client.loop import LoopThread
from samsa.connect.config import integer
from samsa.connect.group import Assignment, ConnectGroupMember
from samsa.connect.herder import Herder
from samsa.connect.status import FAILED, KafkaStatusStore
from samsa.connect.storage.kafka_log import KafkaBasedLog, ensure_topic
from samsa.connect.storage.kafka_offsets import KafkaOffsetStore
from samsa.connect.worker import STARTED, STOPPED, Worker

log = logging.getLogger(__name__)


def _json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


class DistributedHerder(Herder):
    def __init__(self, worker_config: dict[str, str], worker_id: str):
        for key in ("group.id", "config.storage.topic", "offset.storage.topic", "status.storage.topic"):
            if not worker_config.get(key):
                raise ValueError(f'Missing required configuration "{key}" which has no default value.')
        self.offset_store = KafkaOffsetStore()
        self.status_store = KafkaStatusStore(lambda k, v: self.status_log.send(k, v))
        super().__init__(Worker(worker_id, worker_config, self.offset_store, self.status_store), worker_config)
        self.staged: dict[str, dict[int, dict[str, str]]] = {}
        self.config_offset = -1
        self.assignment = Assignment()
        self.generation = -1
        self.loop: LoopThread | None = None
        self.member: ConnectGroupMember | None = None
        self.member_task: Any = None
        self.applied = threading.Condition(self.lock)

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> None:
        w = self.worker_config
        client = {"bootstrap.servers": w["bootstrap.servers"]}
        with Admin(client) as admin:
            ensure_topic(admin, w["config.storage.topic"], 1, integer(w, "config.storage.replication.factor", 3),
                         {"cleanup.policy": "compact"})
            ensure_topic(admin, w["offset.storage.topic"], integer(w, "offset.storage.partitions", 25),
                         integer(w, "offset.storage.replication.factor", 3), {"cleanup.policy": "compact"})
            ensure_topic(admin, w["status.storage.topic"], integer(w, "status.storage.partitions", 5),
                         integer(w, "status.storage.replication.factor", 3), {"cleanup.policy": "compact"})
        self.offset_log = KafkaBasedLog(w["offset.storage.topic"], client, self.offset_store.on_record)
        self.status_log = KafkaBasedLog(w["status.storage.topic"], client, self.status_store.on_record)
        self.config_log = KafkaBasedLog(w["config.storage.topic"], client, self._on_config)
        self.offset_store.send = lambda k, v: self.offset_log.send(k, v)
        self.offset_store.flush = lambda: self.offset_log.flush()
        for kl in (self.offset_log, self.status_log, self.config_log):
            kl.start()
        self.member = ConnectGroupMember(
            w["bootstrap.servers"], w["group.id"], f"http://{self.worker.worker_id}/",
            integer(w, "session.timeout.ms", 10000), integer(w, "rebalance.timeout.ms", 60000),
            integer(w, "heartbeat.interval.ms", 3000), lambda: self.config_offset, self._assign,
            self._on_assigned, self._on_revoked)
        self.loop = LoopThread("connect-group")
        self.member_task = self.loop.submit(self.member.run())

    def stop(self) -> None:
        if self.loop is not None and self.member is not None:
            self.member.stopped = True
            self._on_revoked()
            try:
                self.loop.run(self.member.leave(), 10)
            except Exception:  # noqa: BLE001
                pass
            self.loop.stop()
        for kl in (getattr(self, n, None) for n in ("config_log", "status_log", "offset_log")):
            if kl is not None:
                kl.stop()

    # ---------------------------------------------------------------- the config topic

    def _task_counts(self) -> dict[str, int]:
        return {n: len(self.task_config.get(n, [])) for n in self.configs}

    def _on_config(self, record: Any) -> None:
        key = (record.key or b"").decode()
        value = json.loads(record.value) if record.value else None
        with self.lock:
            before = self._task_counts()
            self.config_offset = record.offset
            owned = set(self.assignment.connectors)
            if key.startswith("connector-"):
                name = key[len("connector-"):]
                if value is None:
                    for d in (self.configs, self.task_config, self.target, self.staged):
                        d.pop(name, None)
                    self.status_store.forget(name)
                else:
                    changed = name in self.configs and self.configs[name] != value["properties"]
                    self.configs[name] = value["properties"]
                    self.target.setdefault(name, STARTED)
                    if changed and name in owned:
                        threading.Thread(target=self._restart_owned_connector, args=(name,), daemon=True).start()
            elif key.startswith("task-"):
                name, _, n = key[len("task-"):].rpartition("-")
                if value is not None and n.isdigit():
                    self.staged.setdefault(name, {})[int(n)] = value["properties"]
            elif key.startswith("commit-"):
                name = key[len("commit-"):]
                staged = self.staged.pop(name, {})
                count = int((value or {}).get("tasks", 0))
                self.task_config[name] = [staged[i] for i in range(count) if i in staged]
            elif key.startswith("target-state-"):
                name = key[len("target-state-"):]
                state = (value or {}).get("state", STARTED)
                previous = self.target.get(name)
                self.target[name] = state
                if name in self.configs and previous != state:
                    threading.Thread(target=self._apply_target, args=(name, state, previous), daemon=True).start()
            elif key.startswith("restart-connector-") and value is not None:
                name = key[len("restart-connector-"):]
                threading.Thread(target=self._restart_owned, args=(name, bool(value.get("include-tasks")),
                                                                     bool(value.get("only-failed"))),
                                 daemon=True).start()
            elif key.startswith("restart-task-") and value is not None:
                name, _, n = key[len("restart-task-"):].rpartition("-")
                threading.Thread(target=self._restart_owned_task, args=(name, int(n)), daemon=True).start()
            if self._task_counts() != before and self.member is not None:
                self.member.request_rejoin()
            self.applied.notify_all()

    def _write(self, records: list[tuple[str, Any]]) -> None:
        """Write config records and wait until this worker has read them back."""
        futures = [self.config_log.send(k.encode(), None if v is None else _json(v)) for k, v in records]
        offset = max(f.result(30).offset for f in futures)
        with self.lock:
            if not self.applied.wait_for(lambda: self.config_offset >= offset, 30):
                raise TimeoutError("Timed out reading back the config topic")

    def write_connector_config(self, name: str, config: dict[str, str]) -> None:
        records: list[tuple[str, Any]] = [("connector-" + name, {"properties": config})]
        if name not in self.configs:
            records.insert(0, ("target-state-" + name, {"state": STARTED}))
        self._write(records)

    def write_delete(self, name: str) -> None:
        self._write([("connector-" + name, None), ("target-state-" + name, None)])
        self.status_store.delete(name, 0)

    def write_target_state(self, name: str, state: str) -> None:
        self._write([("target-state-" + name, {"state": state})])

    def restart_connector(self, name: str, include_tasks: bool, only_failed: bool) -> dict[str, Any] | None:
        self._config(name)
        self._write([("restart-connector-" + name, {"include-tasks": include_tasks, "only-failed": only_failed})])
        return self.connector_status(name) if include_tasks or only_failed else None

    def restart_task(self, name: str, task: int) -> None:
        self.task_status(name, task)
        self._write([(f"restart-task-{name}-{task}", {"restart": True})])

    # ---------------------------------------------------------------- assignment

    def _assign(self, leader: str, members: dict[str, tuple[str, int]]) -> dict[str, Assignment]:
        """The leader's round robin of connectors, then tasks, over the members (by member id)."""
        self.config_log.read_to_end()
        with self.lock:
            connectors = sorted(self.configs)
            tasks = [(n, i) for n in connectors for i in range(len(self.task_config.get(n, [])))]
            offset = self.config_offset
        ids = sorted(members)
        out = {m: Assignment(0, leader, members[leader][0], offset) for m in ids}
        for i, c in enumerate(connectors):
            out[ids[i % len(ids)]].connectors.append(c)
        for i, t in enumerate(tasks):
            out[ids[(i + len(connectors)) % len(ids)]].tasks.append(t)
        log.info("Assignment by leader %s: %s", leader,
                 {members[m][0]: (a.connectors, a.tasks) for m, a in out.items()})
        return out

    def _on_revoked(self) -> None:
        self.worker.stop_tasks(self.worker.task_ids())
        for name in list(self.worker.connectors):
            self.worker.stop_connector(name)
        with self.lock:
            self.assignment = Assignment()

    def _on_assigned(self, assignment: Assignment, generation: int) -> None:
        self.config_log.read_to_end()
        with self.lock:
            self.assignment = assignment
            self.generation = self.worker.generation = generation
        log.info("Assigned connectors %s and tasks %s (generation %d)", assignment.connectors, assignment.tasks,
                 generation)
        for name in assignment.connectors:
            self._start_connector(name)
        for name, task in assignment.tasks:
            self._start_task(name, task)

    def _start_connector(self, name: str) -> None:
        with self.lock:
            config, target = self.configs.get(name), self.target.get(name, STARTED)
        if config is None:
            return
        if not self.worker.start_connector(name, config, target, self.reconfigure):
            return
        if target == STOPPED:
            if self.task_config.get(name):
                self._write([("commit-" + name, {"tasks": 0})])
            return
        self.reconfigure(name)

    def reconfigure(self, name: str) -> None:
        """Write the connector's task configs if they changed (the owner of the connector does)."""
        with self.lock:
            config = self.configs.get(name)
            old = self.task_config.get(name)
        if config is None or name not in self.assignment.connectors:
            return
        configs = self.worker.task_configs(name, integer(config, "tasks.max", 1))
        if configs is None or configs == old:
            return
        records: list[tuple[str, Any]] = [(f"task-{name}-{i}", {"properties": c}) for i, c in enumerate(configs)]
        records.append(("commit-" + name, {"tasks": len(configs)}))
        self._write(records)
        if old is not None and len(old) == len(configs) and self.member is not None:
            self.member.request_rejoin()  # same count, new configs: the tasks must start again

    def _start_task(self, name: str, task: int) -> None:
        with self.lock:
            config, configs = self.configs.get(name), self.task_config.get(name, [])
            target = self.target.get(name, STARTED)
        if config is None or task >= len(configs):
            return
        self.worker.start_task(name, task, config, configs[task], target)

    def _restart_owned_connector(self, name: str) -> None:
        if name in self.assignment.connectors:
            self._start_connector(name)

    def _apply_target(self, name: str, state: str, previous: str | None) -> None:
        if state == STOPPED or previous == STOPPED:
            if name in self.assignment.connectors:
                self._start_connector(name)
            return
        if name in self.assignment.connectors:
            self.worker.set_connector_state(name, state)
        self.worker.set_task_states(name, state)

    def _restart_owned(self, name: str, include_tasks: bool, only_failed: bool) -> None:
        if name in self.assignment.connectors:
            failed = (self.status_store.connector(name) or {}).get("state") == FAILED
            if not only_failed or failed:
                self._start_connector(name)
        if include_tasks:
            for n, t in list(self.assignment.tasks):
                if n == name and (not only_failed or (self.status_store.task(n, t) or {}).get("state") == FAILED):
                    self._start_task(n, t)

    def _restart_owned_task(self, name: str, task: int) -> None:
        if (name, task) in self.assignment.tasks:
            self._start_task(name, task)

    def wait_stable(self, timeout: float = 60) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.member is not None and not self.member.rejoin:
                return True
            time.sleep(0.1)
        return False
