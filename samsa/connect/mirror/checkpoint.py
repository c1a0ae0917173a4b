"""MirrorCheckpointConnector: consumer group offsets of the source translated into the target.

Every ``emit.checkpoints.interval.seconds`` each task reads its groups' committed offsets in
the source cluster, translates them through the offset syncs (the latest sync at or before the
committed offset: its downstream offset, plus one when the group is past it — never ahead of
what the target holds) and writes a Checkpoint to ``<source>.checkpoints.internal`` in the
target. With ``sync.group.offsets.enabled`` it also commits the translated offsets for the
group in the target, when the group has no active members there and only forward.
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
from typing import Any

from samsa.connect.api import ConfigKey, SourceConnector, SourceTask
from samsa.connect.data import BYTES_SCHEMA, SourceRecord
from samsa.connect.mirror.common import GROUPS_EXCLUDE, Periodic, TopicFilter, cluster_client, config_def, flag, \
    integer
from samsa.connect.mirror.policy import pattern
from samsa.connect.mirror.records import Checkpoint, OffsetSync
from samsa.protocol import errors

log = logging.getLogger(__name__)


def _groups(admin: Any, props: dict[str, str]) -> list[str]:
    include = pattern(props.get("groups"), ".*")
    exclude = pattern(props.get("groups.exclude", props.get("groups.blacklist")), GROUPS_EXCLUDE)
    return sorted(g.group_id for g in admin.list_consumer_groups()
                  if include.fullmatch(g.group_id) and not exclude.fullmatch(g.group_id))


class MirrorCheckpointConnector(SourceConnector):
    def config_def(self) -> list[ConfigKey]:
        return config_def() + [ConfigKey("groups", "LIST", ".*", "HIGH"), ConfigKey("groups.exclude", "LIST", None),
                               ConfigKey("emit.checkpoints.enabled", "BOOLEAN", "true", "LOW"),
                               ConfigKey("emit.checkpoints.interval.seconds", "LONG", "60", "LOW"),
                               ConfigKey("sync.group.offsets.enabled", "BOOLEAN", "false", "LOW"),
                               ConfigKey("sync.group.offsets.interval.seconds", "LONG", "60", "LOW"),
                               ConfigKey("refresh.groups.interval.seconds", "LONG", "600", "LOW")]

    def start(self, props: dict[str, str]) -> None:
        from samsa.client.admin import Admin
        from samsa.client.types import NewTopic
        self.props = dict(props)
        self.enabled = flag(self.props, "emit.checkpoints.enabled", True)
        self.source = Admin(cluster_client(self.props, "source"))
        self.lock = threading.Lock()
        self.groups = _groups(self.source, self.props) if self.enabled else []
        if self.enabled:
            topic = TopicFilter(self.props).policy.checkpoints_topic(self.props["source.cluster.alias"])
            from samsa.client.admin import Admin as TargetAdmin
            with TargetAdmin(cluster_client(self.props, "target")) as target:
                if topic not in target.list_topics(include_internal=True):
                    try:
                        target.create_topics([NewTopic(topic, 1, integer(
                            self.props, "checkpoints.topic.replication.factor", 3), config={"cleanup.policy": "compact"})])
                    except Exception as e:  # noqa: BLE001
                        log.info("Creating %s: %s", topic, e)
        self.refresher = Periodic("mirror-checkpoint-refresh", integer(self.props, "refresh.groups.interval.seconds",
                                                                       600), self._refresh)
        self.refresher.start()

    def _refresh(self) -> None:
        if not self.enabled:
            return
        groups = _groups(self.source, self.props)
        with self.lock:
            changed, self.groups = groups != self.groups, groups
        if changed:
            log.info("Consumer groups to checkpoint: %s", groups)
            self.context.request_task_reconfiguration()

    def task_class(self) -> type:
        return MirrorCheckpointTask

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        with self.lock:
            groups = list(self.groups)
        if not groups:
            return []
        n = min(max_tasks, len(groups))
        return [{**self.props, "task.assigned.groups": ",".join(groups[i::n])} for i in range(n)]

    def stop(self) -> None:
        self.refresher.stop()
        self.source.close()


class OffsetSyncStore:
    """Reads ``mm2-offset-syncs.<target>.internal`` from the start; keeps each partition's syncs."""

    def __init__(self, client: dict[str, Any], topic: str):
        from samsa.client.consumer import Consumer
        from samsa.client.types import TopicPartition
        self.consumer = Consumer({**client, "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        self.consumer.assign([TopicPartition(topic, 0)])
        self.syncs: dict[tuple[str, int], list[tuple[int, int]]] = {}

    def update(self) -> None:
        while records := self.consumer.poll(0.2):
            for r in records:
                s = OffsetSync.parse(r.key, r.value)
                syncs = self.syncs.setdefault((s.topic, s.partition), [])
                if syncs and s.upstream_offset < syncs[-1][0]:  # the source task restarted from older offsets
                    del syncs[bisect.bisect_left(syncs, (s.upstream_offset, -1)):]
                syncs.append((s.upstream_offset, s.downstream_offset))
                del syncs[:-1000]

    def translate(self, topic: str, partition: int, upstream: int) -> int | None:
        syncs = self.syncs.get((topic, partition))
        if not syncs:
            return None
        i = bisect.bisect_right(syncs, (upstream, float("inf"))) - 1
        if i < 0:
            return None
        up, down = syncs[i]
        return down if up == upstream else down + 1

    def close(self) -> None:
        self.consumer.close()


class MirrorCheckpointTask(SourceTask):
    def start(self, props: dict[str, str]) -> None:
        from samsa.client.admin import Admin
        self.props = props
        self.filter = TopicFilter(props)
        self.source_alias = props["source.cluster.alias"]
        self.groups = [g for g in props.get("task.assigned.groups", "").split(",") if g]
        self.topic = self.filter.policy.checkpoints_topic(self.source_alias)
        self.interval = integer(props, "emit.checkpoints.interval.seconds", 60)
        self.sync_groups = flag(props, "sync.group.offsets.enabled", False)
        self.sync_interval = integer(props, "sync.group.offsets.interval.seconds", 60)
        self.source = Admin(cluster_client(props, "source"))
        self.target = Admin(cluster_client(props, "target"))
        self.store = OffsetSyncStore(cluster_client(props, "source"),
                                     self.filter.policy.offset_syncs_topic(props.get("target.cluster.alias",
                                                                                      "target")))
        self.emitted: dict[tuple[str, str, int], tuple[int, int]] = {}
        self.next_emit = 0.0
        self.next_sync = 0.0
        self.stopping = threading.Event()

    def _checkpoints(self, group: str) -> list[Checkpoint]:
        out = []
        for tp, om in self.source.list_consumer_group_offsets(group).items():
            if om is None or om.offset < 0 or not self.filter.replicate(tp.topic):
                continue
            down = self.store.translate(tp.topic, tp.partition, om.offset)
            if down is None:
                continue
            remote = self.filter.policy.format_remote_topic(self.source_alias, tp.topic)
            out.append(Checkpoint(group, remote, tp.partition, om.offset, down, om.metadata or ""))
        return out

    def poll(self) -> list[SourceRecord] | None:
        if self.stopping.wait(min(1.0, max(0.0, self.next_emit - time.monotonic()))):
            return None
        now = time.monotonic()
        if now < self.next_emit:
            return None
        self.next_emit = now + self.interval
        self.store.update()
        records, by_group = [], {}
        for group in self.groups:
            try:
                checkpoints = self._checkpoints(group)
            except Exception as e:  # noqa: BLE001 - a group deleted meanwhile
                log.info("Checkpointing group %s: %s", group, e)
                continue
            by_group[group] = checkpoints
            for c in checkpoints:
                key = (c.group, c.topic, c.partition)
                if self.emitted.get(key) == (c.upstream_offset, c.downstream_offset):
                    continue
                self.emitted[key] = (c.upstream_offset, c.downstream_offset)
                records.append(SourceRecord(self.topic, 0, BYTES_SCHEMA, c.key(), BYTES_SCHEMA, c.value(),
                                            int(time.time() * 1000), [], {"group": c.group}, None))
        if self.sync_groups and now >= self.next_sync:
            self.next_sync = now + self.sync_interval
            for group, checkpoints in by_group.items():
                self._sync_group(group, checkpoints)
        return records

    def _sync_group(self, group: str, checkpoints: list[Checkpoint]) -> None:
        """Commit the translated offsets in the target, forward only, while nobody consumes there."""
        from samsa.client.types import TopicPartition
        if not checkpoints:
            return
        try:
            try:
                described = self.target.describe_consumer_groups([group]).get(group)
            except errors.GroupIdNotFoundError:   # Kafka 4's answer for a group the target has never had
                described = None
            if described is not None and described.state not in ("Empty", "Dead") and described.members:
                return
            try:
                current = self.target.list_consumer_group_offsets(group)
            except errors.GroupIdNotFoundError:
                current = {}
            move = {}
            for c in checkpoints:
                tp = TopicPartition(c.topic, c.partition)
                have = current.get(tp)
                if have is None or have.offset < c.downstream_offset:
                    move[tp] = c.downstream_offset
            if move:
                self.target.alter_consumer_group_offsets(group, move)
                log.info("Synced offsets of group %s in the target: %s", group, move)
        except Exception as e:  # noqa: BLE001 - next round
            log.info("Syncing offsets of group %s: %s", group, e)

    def stop(self) -> None:
        self.stopping.set()
        for closeable in (self.store, self.source, self.target):
            try:
                closeable.close()
            except Exception:  # noqa: BLE001
                pass
