"""Per-partition log configuration: the effective values of a topic's log configs."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Mapping

# Kafka config name -> LogConfig field
KAFKA_NAMES: dict[str, str] = {
    "segment.bytes": "segment_bytes",
    "segment.ms": "segment_ms",
    "retention.ms": "retention_ms",
    "retention.bytes": "retention_bytes",
    "cleanup.policy": "cleanup_policy",
    "max.message.bytes": "max_message_bytes",
    "message.timestamp.type": "message_timestamp_type",
    "index.interval.bytes": "index_interval_bytes",
    "flush.messages": "flush_messages",
    "flush.ms": "flush_ms",
    "file.delete.delay.ms": "file_delete_delay_ms",
    "segment.index.bytes": "segment_index_bytes",
    "delete.retention.ms": "delete_retention_ms",
    "min.cleanable.dirty.ratio": "min_cleanable_dirty_ratio",
    "min.compaction.lag.ms": "min_compaction_lag_ms",
    "max.compaction.lag.ms": "max_compaction_lag_ms",
}


@dataclass
class LogConfig:
    """Field names mirror Kafka's topic configs (``segment.bytes`` -> ``segment_bytes``)."""

    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    retention_ms: int = 604800000  # -1 = unlimited
    retention_bytes: int = -1  # per partition, -1 = unlimited
    cleanup_policy: str = "delete"  # "delete", "compact", "compact,delete"
    max_message_bytes: int = 1048588
    message_timestamp_type: str = "CreateTime"  # or "LogAppendTime"
    index_interval_bytes: int = 4096
    flush_messages: int = 9223372036854775807
    flush_ms: int = 9223372036854775807
    file_delete_delay_ms: int = 60000
    segment_index_bytes: int = 10485760
    # Log compaction (samsa.storage.cleaner)
    delete_retention_ms: int = 86400000  # how long tombstones stay after their batch is first cleaned
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0  # KIP-58
    max_compaction_lag_ms: int = 9223372036854775807  # KIP-354

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def delete_enabled(self) -> bool:
        return "delete" in {p.strip() for p in self.cleanup_policy.split(",")}

    @property
    def compact_enabled(self) -> bool:
        return "compact" in {p.strip() for p in self.cleanup_policy.split(",")}

    def with_overrides(self, props: Mapping[str, str | int]) -> LogConfig:
        """A copy with Kafka-named overrides applied (``{"retention.ms": "1000"}``);
        unknown names are ignored (they belong to other layers)."""
        types = {f.name: f.type for f in fields(self)}
        changes: dict[str, object] = {}
        for name, value in props.items():
            field = KAFKA_NAMES.get(name)
            if field is None or value is None:
                continue
            kind = types[field]
            if kind in ("str", str):
                changes[field] = str(value)
            elif kind in ("float", float):
                changes[field] = float(value)
            else:
                changes[field] = int(value)
        return replace(self, **changes)
