"""MirrorHeartbeatConnector: a heartbeat into the target's ``heartbeats`` topic every
``emit.heartbeats.interval.seconds``; mirrored onwards, heartbeats show which flows are alive."""

from __future__ import annotations

import logging
import threading
import time

from samsa.connect.api import ConfigKey, SourceConnector, SourceTask
from samsa.connect.data import BYTES_SCHEMA, SourceRecord
from samsa.connect.mirror.common import cluster_client, config_def, integer
from samsa.connect.mirror.policy import policy
from samsa.connect.mirror.records import Heartbeat

log = logging.getLogger(__name__)


class MirrorHeartbeatConnector(SourceConnector):
    def config_def(self) -> list[ConfigKey]:
        return config_def() + [ConfigKey("emit.heartbeats.enabled", "BOOLEAN", "true", "LOW"),
                               ConfigKey("emit.heartbeats.interval.seconds", "LONG", "1", "LOW")]

    def start(self, props: dict[str, str]) -> None:
        from samsa.client.admin import Admin
        from samsa.client.types import NewTopic
        self.props = dict(props)
        topic = policy(self.props).heartbeats_topic()
        with Admin(cluster_client(self.props, "target")) as target:
            if topic not in target.list_topics():
                try:
                    target.create_topics([NewTopic(topic, 1, integer(self.props, "heartbeats.topic.replication.factor",
                                                                     3), config={"cleanup.policy": "compact"})])
                except Exception as e:  # noqa: BLE001
                    log.info("Creating %s: %s", topic, e)

    def task_class(self) -> type:
        return MirrorHeartbeatTask

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        if str(self.props.get("emit.heartbeats.enabled", "true")).lower() != "true":
            return []
        return [dict(self.props)]  # one task


class MirrorHeartbeatTask(SourceTask):
    def start(self, props: dict[str, str]) -> None:
        self.source_alias = props["source.cluster.alias"]
        self.target_alias = props.get("target.cluster.alias", "target")
        self.topic = policy(props).heartbeats_topic()
        self.interval = integer(props, "emit.heartbeats.interval.seconds", 1)
        self.stopping = threading.Event()
        self.next = 0.0

    def poll(self) -> list[SourceRecord] | None:
        if self.stopping.wait(max(0.0, self.next - time.monotonic())):
            return None
        self.next = time.monotonic() + self.interval
        hb = Heartbeat(self.source_alias, self.target_alias, int(time.time() * 1000))
        return [SourceRecord(self.topic, 0, BYTES_SCHEMA, hb.key(), BYTES_SCHEMA, hb.value(), hb.timestamp, [],
                             {"sourceClusterAlias": self.source_alias, "targetClusterAlias": self.target_alias},
                             None)]

    def stop(self) -> None:
        self.stopping.set()
