"""``samsa mirror-maker mm2.properties``: the replication flows of connect-mirror-maker.sh's file.

``clusters = A, B``, ``A.bootstrap.servers``, ``A->B.enabled = true`` and keys for every flow
(top level) or one flow (``A->B.`` prefix). Each enabled flow A->B runs, as in Kafka's dedicated
mode, a distributed Connect herder on the target cluster (group ``A-mm2``, internal topics
``mm2-configs|offsets|status.A.internal`` in B) with the MirrorSource, MirrorCheckpoint and
MirrorHeartbeat connectors; several MirrorMaker processes with one file share the work.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from dataclasses import dataclass

log = logging.getLogger(__name__)

CONNECTORS = {"MirrorSourceConnector": "org.apache.kafka.connect.mirror.MirrorSourceConnector",
              "MirrorCheckpointConnector": "org.apache.kafka.connect.mirror.MirrorCheckpointConnector",
              "MirrorHeartbeatConnector": "org.apache.kafka.connect.mirror.MirrorHeartbeatConnector"}
BYTES = "org.apache.kafka.connect.converters.ByteArrayConverter"


@dataclass(frozen=True)
class Flow:
    source: str
    target: str

    def __str__(self) -> str:
        return f"{self.source}->{self.target}"


class MirrorMakerConfig:
    def __init__(self, props: dict[str, str]):
        self.props = {k.strip(): v.strip() for k, v in props.items()}
        self.clusters = [c.strip() for c in self.props.get("clusters", "").split(",") if c.strip()]
        if not self.clusters:
            raise ValueError('Missing required configuration "clusters" which has no default value.')
        for c in self.clusters:
            if not self.props.get(f"{c}.bootstrap.servers"):
                raise ValueError(f'Missing required configuration "{c}.bootstrap.servers" which has no default value.')

    def flows(self, only_targets: list[str] | None = None) -> list[Flow]:
        out = []
        for s in self.clusters:
            for t in self.clusters:
                if s != t and self.props.get(f"{s}->{t}.enabled", "false").lower() == "true" and \
                        (not only_targets or t in only_targets):
                    out.append(Flow(s, t))
        return out

    def _top_level(self) -> dict[str, str]:
        prefixes = tuple(f"{c}." for c in self.clusters)
        return {k: v for k, v in self.props.items() if k != "clusters" and "->" not in k and not k.startswith(prefixes)}

    def _cluster(self, alias: str) -> dict[str, str]:
        p = f"{alias}."
        return {k[len(p):]: v for k, v in self.props.items() if k.startswith(p)}

    def connector_config(self, flow: Flow, name: str) -> dict[str, str]:
        p = f"{flow}."
        config = {**self._top_level(), **{k[len(p):]: v for k, v in self.props.items() if k.startswith(p)}}
        config.pop("enabled", None)
        for side, alias in (("source", flow.source), ("target", flow.target)):
            for k, v in self._cluster(alias).items():
                config[f"{side}.cluster.{k}"] = v
        config.update({"name": name, "connector.class": CONNECTORS[name], "source.cluster.alias": flow.source,
                       "target.cluster.alias": flow.target, "key.converter": BYTES, "value.converter": BYTES,
                       "header.converter": BYTES})
        return config

    def worker_config(self, flow: Flow) -> dict[str, str]:
        from samsa.connect.config import worker_config
        target = self._cluster(flow.target)
        config = {**self._top_level(), **{k: v for k, v in target.items()}}
        rf = self.props.get("replication.factor")
        for key in ("config.storage.replication.factor", "offset.storage.replication.factor",
                    "status.storage.replication.factor"):
            if rf and key not in config:
                config[key] = rf
        config.update({"group.id": f"{flow.source}-mm2",
                       "config.storage.topic": f"mm2-configs.{flow.source}.internal",
                       "offset.storage.topic": f"mm2-offsets.{flow.source}.internal",
                       "status.storage.topic": f"mm2-status.{flow.source}.internal",
                       "key.converter": BYTES, "value.converter": BYTES,
                       "listeners": "http://127.0.0.1:0"})
        return worker_config(config)


class MirrorMaker:
    def __init__(self, config: MirrorMakerConfig, only_targets: list[str] | None = None):
        self.config = config
        self.flows = config.flows(only_targets)
        self.herders: list = []
        self.stopped = threading.Event()

    def start(self) -> None:
        from samsa.connect.distributed import DistributedHerder
        from samsa.connect.errors import NotLeaderException
        host = f"{socket.gethostname()}-{os.getpid()}"
        for flow in self.flows:
            herder = DistributedHerder(self.config.worker_config(flow), f"{host}-{flow.source}-{flow.target}")
            herder.start()
            self.herders.append(herder)
            for name in CONNECTORS:
                try:
                    herder.put_connector_config(name, self.config.connector_config(flow, name), allow_replace=True)
                except NotLeaderException:
                    log.info("Flow %s: another node leads the group and writes the connector configs", flow)
                    break
            log.info("Replication flow %s started", flow)

    def stop(self) -> None:
        for herder in self.herders:
            try:
                herder.stop()
            except Exception:  # noqa: BLE001
                log.exception("Stopping a herder")
        self.stopped.set()
