"""MirrorSourceConnector: records of the source cluster's topics into remote topics of the target.

The connector creates each remote topic with the source's partition count (and adds partitions
when the source grows), copies topic configs (``sync.topic.configs.enabled``), and re-lists
topics every ``refresh.topics.interval.seconds``. Tasks consume assigned partitions (no group;
the position is the source offset ``{"offset": n}`` of partition ``{"cluster", "topic",
"partition"}``) and produce key, value, headers and timestamp into the same partition number.
Each task writes offset syncs (upstream offset ↔ downstream offset) to
``mm2-offset-syncs.<target>.internal`` in the source cluster, which checkpoints translate with.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from samsa.connect.api import ConfigKey, SourceConnector, SourceTask
from samsa.connect.data import OPTIONAL_BYTES_SCHEMA, SourceRecord
from samsa.connect.mirror.common import Periodic, TopicFilter, cluster_client, config_def, flag, integer
from samsa.connect.mirror.records import OffsetSync

log = logging.getLogger(__name__)

# Kafka's DefaultConfigPropertyFilter: configs never copied to the remote topic
CONFIG_EXCLUDE = ("follower.replication.throttled.replicas", "leader.replication.throttled.replicas",
                  "message.timestamp.difference.max.ms", "message.timestamp.type", "unclean.leader.election.enable",
                  "min.insync.replicas")


class MirrorSourceConnector(SourceConnector):
    def config_def(self) -> list[ConfigKey]:
        return config_def() + [ConfigKey("topics", "LIST", ".*", "HIGH"),
                               ConfigKey("topics.exclude", "LIST", None, "HIGH"),
                               ConfigKey("replication.factor", "INT", "2", "LOW"),
                               ConfigKey("sync.topic.configs.enabled", "BOOLEAN", "true", "LOW"),
                               ConfigKey("refresh.topics.interval.seconds", "LONG", "600", "LOW"),
                               ConfigKey("offset.lag.max", "LONG", "100", "LOW")]

    def start(self, props: dict[str, str]) -> None:
        from samsa.client.admin import Admin
        self.props = dict(props)
        self.filter = TopicFilter(self.props)
        self.source_alias = self.props["source.cluster.alias"]
        self.source = Admin(cluster_client(self.props, "source"))
        self.target = Admin(cluster_client(self.props, "target"))
        self.lock = threading.Lock()
        self.partitions = self._refresh_topics()
        self._create_offset_syncs_topic()
        self.refresher = Periodic("mirror-source-refresh",
                                  integer(self.props, "refresh.topics.interval.seconds", 600), self._refresh)
        self.refresher.start()

    def _source_partitions(self) -> dict[str, int]:
        topics = [t for t in self.source.list_topics() if self.filter.replicate(t)]
        if not topics:
            return {}
        return {name: len(d.partitions) for name, d in self.source.describe_topics(topics).items()}

    def _refresh_topics(self) -> dict[str, int]:
        """Create or grow the remote topics; the source's topic → partition count."""
        from samsa.client.types import NewTopic
        found = self._source_partitions()
        remote_names = {self.filter.policy.format_remote_topic(self.source_alias, t): t for t in found}
        existing = set(self.target.list_topics())
        rf = integer(self.props, "replication.factor", 2)
        configs = self._topic_configs(list(found)) if flag(self.props, "sync.topic.configs.enabled", True) else {}
        new = [NewTopic(r, found[t], rf, config=configs.get(t) or {}) for r, t in remote_names.items()
               if r not in existing]
        if new:
            try:
                self.target.create_topics(new)
                log.info("Created remote topics %s", [n.name for n in new])
            except Exception as e:  # noqa: BLE001 - another MirrorMaker may have created them
                log.info("Creating remote topics: %s", e)
        grown = [r for r, t in remote_names.items() if r in existing]
        if grown:
            counts = {n: len(d.partitions) for n, d in self.target.describe_topics(grown).items()}
            more = {r: found[remote_names[r]] for r in grown if counts.get(r, 0) < found[remote_names[r]]}
            if more:
                self.target.create_partitions(more)
                log.info("Added partitions to remote topics %s", more)
        return found

    def _topic_configs(self, topics: list[str]) -> dict[str, dict[str, str]]:
        from samsa.client.types import ConfigResource
        if not topics:
            return {}
        described = self.source.describe_configs([ConfigResource("topic", t) for t in topics])
        return {res.name: {k: e.value for k, e in entries.items() if e.value is not None and not e.is_default
                           and e.source not in ("DEFAULT_CONFIG", "STATIC_BROKER_CONFIG", "DYNAMIC_BROKER_CONFIG",
                                                "DYNAMIC_DEFAULT_BROKER_CONFIG") and k not in CONFIG_EXCLUDE}
                for res, entries in described.items()}

    def _sync_configs(self, topics: list[str]) -> None:
        from samsa.client.types import ConfigResource
        changes = {ConfigResource("topic", self.filter.policy.format_remote_topic(self.source_alias, t)): c
                   for t, c in self._topic_configs(topics).items() if c}
        if changes:
            self.target.incremental_alter_configs({r: _set_ops(c) for r, c in changes.items()})

    def _create_offset_syncs_topic(self) -> None:
        from samsa.client.types import NewTopic
        name = self.filter.policy.offset_syncs_topic(self.props.get("target.cluster.alias", "target"))
        if name not in self.source.list_topics(include_internal=True):
            try:
                self.source.create_topics([NewTopic(name, 1, integer(self.props, "offset-syncs.topic.replication."
                                                                     "factor", 3),
                                                    config={"cleanup.policy": "compact"})])
            except Exception as e:  # noqa: BLE001
                log.info("Creating %s: %s", name, e)

    def _refresh(self) -> None:
        found = self._refresh_topics()
        if flag(self.props, "sync.topic.configs.enabled", True):
            self._sync_configs(list(found))
        with self.lock:
            changed, self.partitions = found != self.partitions, found
        if changed:
            log.info("Source topics changed: %s; reconfiguring tasks", found)
            self.context.request_task_reconfiguration()

    def task_class(self) -> type:
        return MirrorSourceTask

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        with self.lock:
            tps = [f"{t}-{p}" for t in sorted(self.partitions) for p in range(self.partitions[t])]
        if not tps:
            return []
        n = min(max_tasks, len(tps))
        return [{**self.props, "task.assigned.partitions": ",".join(tps[i::n])} for i in range(n)]

    def stop(self) -> None:
        self.refresher.stop()
        self.source.close()
        self.target.close()


def _set_ops(config: dict[str, str]) -> list[Any]:
    from samsa.client.types import AlterConfigOp
    return [AlterConfigOp(k, v, "set") for k, v in config.items()]


class _PartitionState:
    """When to write an offset sync (Kafka's PartitionState)."""

    def __init__(self, max_lag: int):
        self.max_lag = max_lag
        self.prev_up = self.prev_down = self.sync_up = self.sync_down = -1

    def update(self, up: int, down: int) -> bool:
        target = self.sync_down + (up - self.sync_up)
        need = (self.sync_down == -1 or abs(down - target) >= self.max_lag or up - self.prev_up != 1
                or down < self.prev_down)
        self.prev_up, self.prev_down = up, down
        if need:
            self.sync_up, self.sync_down = up, down
        return need


class MirrorSourceTask(SourceTask):
    def start(self, props: dict[str, str]) -> None:
        from samsa.client.consumer import Consumer
        from samsa.client.producer import Producer
        from samsa.client.types import TopicPartition
        self.props = props
        self.filter = TopicFilter(props)
        self.source_alias = props["source.cluster.alias"]
        self.syncs_topic = self.filter.policy.offset_syncs_topic(props.get("target.cluster.alias", "target"))
        self.max_lag = integer(props, "offset.lag.max", 100)
        self.states: dict[tuple[str, int], _PartitionState] = {}
        self.syncs: list[OffsetSync] = []
        self.syncs_lock = threading.Lock()
        tps = []
        for item in filter(None, props.get("task.assigned.partitions", "").split(",")):
            topic, _, p = item.rpartition("-")
            tps.append(TopicPartition(topic, int(p)))
        self.consumer = Consumer(cluster_client(props, "source", **{
            "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "client.id": f"mirror-source-{self.source_alias}"}))
        self.consumer.assign(tps)
        for tp in tps:
            stored = self.context.offset_storage_reader.offset(self._partition(tp.topic, tp.partition))
            if stored and stored.get("offset") is not None:
                self.consumer.seek(tp, int(stored["offset"]) + 1)
        self.producer = Producer(cluster_client(props, "source", **{"acks": "all", "linger.ms": 0}))

    def _partition(self, topic: str, partition: int) -> dict[str, Any]:
        return {"cluster": self.source_alias, "topic": topic, "partition": partition}

    def poll(self) -> list[SourceRecord] | None:
        self._send_syncs()
        out = []
        for r in self.consumer.poll(0.5):
            remote = self.filter.policy.format_remote_topic(self.source_alias, r.topic)
            out.append(SourceRecord(remote, r.partition, OPTIONAL_BYTES_SCHEMA, r.key, OPTIONAL_BYTES_SCHEMA,
                                    r.value, r.timestamp, list(r.headers or ()), self._partition(r.topic, r.partition),
                                    {"offset": r.offset}))
        return out

    def commit_record(self, record: SourceRecord, metadata: Any) -> None:
        """Acknowledged by the target: maybe an offset sync (upstream ↔ downstream offset)."""
        if metadata is None or metadata.offset < 0 or record.source_partition is None:
            return
        topic, partition = record.source_partition["topic"], record.source_partition["partition"]
        up = int(record.source_offset["offset"])
        state = self.states.setdefault((topic, partition), _PartitionState(self.max_lag))
        if state.update(up, metadata.offset):
            with self.syncs_lock:
                self.syncs.append(OffsetSync(topic, partition, up, metadata.offset))

    def _send_syncs(self) -> None:
        with self.syncs_lock:
            syncs, self.syncs = self.syncs, []
        for s in syncs:
            self.producer.send(self.syncs_topic, s.value(), key=s.key())

    def commit(self) -> None:
        self._send_syncs()
        self.producer.flush(10)

    def stop(self) -> None:
        try:
            self._send_syncs()
            self.producer.close(10)
        finally:
            self.consumer.close()
