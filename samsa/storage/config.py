"""Per-partition log configuration: the effective values of a topic's log configs."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Mapping


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

    @classmethod
    def from_topic_values(cls, values: Mapping[str, Any]) -> LogConfig:
        """From a topic's effective config values by Kafka name (``{"segment.bytes": 1024, ...}``):
        each field is its Kafka key with dots as underscores; other keys belong to other layers."""
        picked: dict[str, Any] = {}
        for f in fields(cls):
            value = values.get(f.name.replace("_", "."))
            if value is not None:
                picked[f.name] = ",".join(value) if isinstance(value, list) else value
        return cls(**picked)
