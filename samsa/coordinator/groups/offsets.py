"""Committed offsets: what each group committed for each partition, held in memory.

The durable copy is in ``__consumer_offsets`` (:mod:`.persistence`); this store is what a
leader of that partition read back and what it has written since. It answers OffsetFetch
and decides which offsets ``offsets.retention.minutes`` expires.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from samsa.coordinator.groups.state import EMPTY, Group
from samsa.protocol.group_records import OffsetAndMetadata

TopicPartition = tuple[str, int]


class OffsetStore:
    def __init__(self) -> None:
        self._committed: dict[str, dict[TopicPartition, OffsetAndMetadata]] = {}

    def group_ids(self) -> list[str]:
        return list(self._committed)

    def __contains__(self, group_id: str) -> bool:
        return group_id in self._committed

    def committed(self, group_id: str) -> dict[TopicPartition, OffsetAndMetadata]:
        """The group's committed offsets (a read-only view by convention; empty if none)."""
        return self._committed.get(group_id, {})

    def get(self, group_id: str, tp: TopicPartition) -> OffsetAndMetadata | None:
        return self._committed.get(group_id, {}).get(tp)

    def commit(self, group_id: str, offsets: Iterable[tuple[TopicPartition, OffsetAndMetadata]]) -> None:
        """Record offsets that were written (an empty iterable still registers the group)."""
        committed = self._committed.setdefault(group_id, {})
        for tp, o in offsets:
            committed[tp] = o

    def load(self, group_id: str, tp: TopicPartition, offset: OffsetAndMetadata | None) -> None:
        """A record read back from the log: the offset, or (None) its tombstone."""
        committed = self._committed.setdefault(group_id, {})
        if offset is None:
            committed.pop(tp, None)
        else:
            committed[tp] = offset

    def delete(self, group_id: str, tps: Iterable[TopicPartition]) -> None:
        committed = self._committed.get(group_id)
        if committed is None:
            return
        for tp in tps:
            committed.pop(tp, None)

    def drop_group(self, group_id: str) -> None:
        self._committed.pop(group_id, None)

    def fetch(self, group_id: str, wanted: dict[str, list[int]] | None
              ) -> Iterator[tuple[str, list[tuple[int, OffsetAndMetadata | None]]]]:
        """(topic, [(partition, offset or None)]) for the partitions asked for, or for all
        the group committed (sorted) when ``wanted`` is None."""
        committed = self.committed(group_id)
        if wanted is None:
            wanted = {}
            for topic, partition in sorted(committed):
                wanted.setdefault(topic, []).append(partition)
        for topic, partitions in wanted.items():
            yield topic, [(p, committed.get((topic, p))) for p in partitions]

    def expired(self, group_id: str, group: Group | None, now_ms: int, retention_ms: int) -> list[TopicPartition]:
        """The offsets retention removes now: all of a group that stayed Empty that long, or (for a
        group without a protocol, committing on its own) each offset committed that long ago."""
        committed = self.committed(group_id)
        if group is not None and group.state != EMPTY:
            return []
        if group is not None and group.protocol_type and group.state_timestamp >= 0:
            return list(committed) if now_ms - group.state_timestamp >= retention_ms else []
        return [tp for tp, o in committed.items() if now_ms - o.commit_timestamp >= retention_ms]
