"""What a herder does for the REST API, common to standalone and distributed mode.

The herder holds the cluster's view — connector configs, task configs, target states — and
asks its :class:`Worker` to run its share. Subclasses say how a change is written (in memory
and applied at once, or to the config topic and applied when read back).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from samsa.client.admin import Admin
from samsa.client.types import TopicPartition
from samsa.connect import config as cc
from samsa.connect import plugins
from samsa.connect.errors import BadRequestException, NotFoundException
from samsa.connect.sink_task import group_id
from samsa.connect.status import UNASSIGNED, TargetState
from samsa.connect.storage.offsets import offset_key
from samsa.connect.worker import Worker

log = logging.getLogger(__name__)

KAFKA_VERSION = "3.9.0"


class Herder:
    def __init__(self, worker: Worker, worker_config: dict[str, str]):
        self.worker = worker
        self.worker_config = worker_config
        self.configs: dict[str, dict[str, str]] = {}
        self.task_config: dict[str, list[dict[str, str]]] = {}
        self.target: dict[str, TargetState] = {}
        self.lock = threading.RLock()
        self.kafka_cluster_id: str | None = None

    # ---------------------------------------------------------------- reads

    def server_info(self) -> dict[str, Any]:
        if self.kafka_cluster_id is None:
            try:
                with self.admin() as admin:
                    self.kafka_cluster_id = admin.describe_cluster().cluster_id
            except Exception:  # noqa: BLE001
                pass
        return {"version": KAFKA_VERSION, "commit": "samsa", "kafka_cluster_id": self.kafka_cluster_id}

    def admin(self) -> Admin:
        return Admin({"bootstrap.servers": self.worker_config["bootstrap.servers"],
                      **cc.prefixed(self.worker_config, "admin.")})

    def connectors(self) -> list[str]:
        with self.lock:
            return sorted(self.configs)

    def _config(self, name: str) -> dict[str, str]:
        with self.lock:
            config = self.configs.get(name)
        if config is None:
            raise NotFoundException(f"Connector {name} not found")
        return config

    def connector_type(self, name: str) -> str:
        try:
            return plugins.connector_type(plugins.connector_class(self._config(name)["connector.class"]))
        except Exception:  # noqa: BLE001
            return "unknown"

    def connector_info(self, name: str) -> dict[str, Any]:
        config = self._config(name)
        tasks = [{"connector": name, "task": i} for i in range(len(self.task_config.get(name, [])))]
        return {"name": name, "config": dict(config), "tasks": tasks, "type": self.connector_type(name)}

    def connector_config(self, name: str) -> dict[str, str]:
        return dict(self._config(name))

    def task_configs(self, name: str) -> list[dict[str, Any]]:
        self._config(name)
        return [{"id": {"connector": name, "task": i}, "config": dict(c)}
                for i, c in enumerate(self.task_config.get(name, []))]

    def connector_status(self, name: str) -> dict[str, Any]:
        self._config(name)
        conn = self.worker.status.connector(name) or {"state": UNASSIGNED, "worker_id": self.worker.worker_id}
        out_conn = {"state": conn["state"], "worker_id": conn["worker_id"]}
        if conn.get("trace"):
            out_conn["trace"] = conn["trace"]
        tasks = [self.task_status(name, i) for i in range(len(self.task_config.get(name, [])))]
        return {"name": name, "connector": out_conn, "tasks": tasks, "type": self.connector_type(name)}

    def task_status(self, name: str, task: int) -> dict[str, Any]:
        self._config(name)
        if task >= len(self.task_config.get(name, [])) or task < 0:
            raise NotFoundException(f"Task {name}-{task} not found")
        st = self.worker.status.task(name, task) or {"state": UNASSIGNED, "worker_id": self.worker.worker_id}
        out = {"id": task, "state": st["state"], "worker_id": st["worker_id"]}
        if st.get("trace"):
            out["trace"] = st["trace"]
        return out

    # ---------------------------------------------------------------- config changes

    def validate(self, config: dict[str, Any]) -> dict[str, Any]:
        _, results = cc.validate(config)
        return cc.validation_json(str(config.get("connector.class") or ""), results, config)

    def put_connector_config(self, name: str, config: dict[str, Any], allow_replace: bool) -> tuple[bool, dict]:
        """(created, info). 400 for an invalid config, 409 if it exists and may not be replaced."""
        config = {k: str(v) if not isinstance(v, str) else v for k, v in config.items() if v is not None}
        if config.get("name", name) != name:
            raise BadRequestException(f"Connector name configuration ({config['name']}) doesn't match connector name "
                                      f"in the URL ({name})")
        config["name"] = name
        if not name.strip():
            raise BadRequestException("Connector name must not be empty")
        _, results = cc.validate(config)
        if cc.error_count(results):
            raise BadRequestException(cc.invalid_message(results))
        created = self.write_connector_config(name, config, allow_replace)
        return created, {"name": name, "config": config, "tasks": [], "type": self.connector_type_of(config)}

    @staticmethod
    def connector_type_of(config: dict[str, str]) -> str:
        return plugins.connector_type(plugins.connector_class(config["connector.class"]))

    def delete_connector(self, name: str) -> None:
        self._config(name)
        self.write_delete(name)

    def pause(self, name: str) -> None:
        self._config(name)
        self.write_target_state(name, TargetState.PAUSED)

    def resume(self, name: str) -> None:
        self._config(name)
        self.write_target_state(name, TargetState.STARTED)

    def stop_connector(self, name: str) -> None:
        self._config(name)
        self.write_target_state(name, TargetState.STOPPED)

    # ---------------------------------------------------------------- offsets (KIP-875)

    def offsets(self, name: str) -> dict[str, Any]:
        config = self._config(name)
        if self.connector_type(name) == "sink":
            with self.admin() as admin:
                committed = admin.list_consumer_group_offsets(group_id(name))
            return {"offsets": [{"partition": {"kafka_topic": tp.topic, "kafka_partition": tp.partition},
                                 "offset": {"kafka_offset": om.offset}}
                                for tp, om in sorted(committed.items(), key=lambda kv: (kv[0].topic, kv[0].partition))
                                if om is not None]}
        del config
        return {"offsets": [{"partition": p, "offset": o} for p, o in self.worker.offsets.for_connector(name)]}

    def _check_stopped(self, name: str) -> None:
        self._config(name)
        if self.target.get(name) is not TargetState.STOPPED:
            raise BadRequestException("Connectors must be in the STOPPED state before their offsets can be modified. "
                                      f"This can be done for the specified connector by issuing a 'PUT' request to "
                                      f"the '/connectors/{name}/stop' endpoint")

    def alter_offsets(self, name: str, offsets: list[dict[str, Any]] | None) -> str:
        """PATCH (offsets given) or DELETE (None) of a stopped connector's offsets."""
        self._check_stopped(name)
        if self.connector_type(name) == "sink":
            with self.admin() as admin:
                if offsets is None:
                    try:
                        admin.delete_consumer_groups([group_id(name)])
                    except Exception as e:  # noqa: BLE001 - no group: nothing to reset
                        log.info("Resetting %s: %s", group_id(name), e)
                else:
                    changes = {}
                    for entry in offsets:
                        p = entry.get("partition") or {}
                        try:
                            tp = TopicPartition(str(p["kafka_topic"]), int(p["kafka_partition"]))
                        except (KeyError, TypeError, ValueError):
                            raise BadRequestException("Partitions for sink connectors must contain the keys "
                                                      "'kafka_topic' and 'kafka_partition'") from None
                        off = entry.get("offset")
                        if off is None:
                            admin.delete_consumer_group_offsets(group_id(name), [tp])
                        else:
                            changes[tp] = int(off["kafka_offset"])
                    if changes:
                        admin.alter_consumer_group_offsets(group_id(name), changes)
        else:
            if offsets is None:
                values = {offset_key(name, p): None for p, _ in self.worker.offsets.for_connector(name)}
            else:
                values = {}
                for entry in offsets:
                    if not isinstance(entry.get("partition"), dict):
                        raise BadRequestException("Source partitions may not be null")
                    values[offset_key(name, entry["partition"])] = entry.get("offset")
            self.worker.offsets.put(name, values)
        return ("The offsets for this connector have been reset successfully" if offsets is None else
                "The offsets for this connector have been altered successfully")

    # ---------------------------------------------------------------- for subclasses

    def write_connector_config(self, name: str, config: dict[str, str], allow_replace: bool) -> bool:
        """Store the config (409 if it exists and may not be replaced); True if the connector is new."""
        raise NotImplementedError

    def write_delete(self, name: str) -> None:
        raise NotImplementedError

    def write_target_state(self, name: str, state: TargetState) -> None:
        raise NotImplementedError

    def restart_connector(self, name: str, include_tasks: bool, only_failed: bool) -> dict[str, Any] | None:
        raise NotImplementedError

    def restart_task(self, name: str, task: int) -> None:
        raise NotImplementedError

    def put_task_configs(self, name: str, configs: list[dict[str, str]], signature: tuple[str, str] | None = None,
                         body: bytes = b"") -> None:
        """``PUT /connectors/{name}/tasks``: task configs sent by the worker running the connector
        (``signature``: the request's algorithm and signature of ``body``, KIP-507)."""
        raise BadRequestException("Kafka Connect in standalone mode does not support externally setting task "
                                  "configurations.")

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError
