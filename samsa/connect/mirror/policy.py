"""Replication policies: how a topic from cluster A is named in cluster B, and where it came from.

``DefaultReplicationPolicy`` prefixes the source alias (``A.topic``); ``IdentityReplicationPolicy``
keeps names (only heartbeats get the prefix), so it cannot tell a mirrored topic from a local one
and cannot prevent cycles, as in Kafka.
"""

from __future__ import annotations

import re

HEARTBEATS = "heartbeats"


class DefaultReplicationPolicy:
    def __init__(self, separator: str = "."):
        self.separator = separator

    def format_remote_topic(self, source_alias: str, topic: str) -> str:
        return f"{source_alias}{self.separator}{topic}"

    def topic_source(self, topic: str) -> str | None:
        alias, sep, _ = topic.partition(self.separator)
        return alias if sep and alias else None

    def upstream_topic(self, topic: str) -> str | None:
        alias, sep, rest = topic.partition(self.separator)
        return rest if sep and alias else None

    def original_topic(self, topic: str) -> str:
        upstream = self.upstream_topic(topic)
        return topic if upstream is None else self.original_topic(upstream)

    def heartbeats_topic(self) -> str:
        return HEARTBEATS

    def offset_syncs_topic(self, cluster_alias: str) -> str:
        return f"mm2-offset-syncs{self.separator}{cluster_alias}{self.separator}internal"

    def checkpoints_topic(self, cluster_alias: str) -> str:
        return f"{cluster_alias}{self.separator}checkpoints{self.separator}internal"

    def is_heartbeats_topic(self, topic: str) -> bool:
        return self.original_topic(topic) == HEARTBEATS

    def is_internal_topic(self, topic: str) -> bool:
        return topic.startswith(("__", ".")) or topic.endswith(".internal")


class IdentityReplicationPolicy(DefaultReplicationPolicy):
    def format_remote_topic(self, source_alias: str, topic: str) -> str:
        return super().format_remote_topic(source_alias, topic) if topic == HEARTBEATS else topic

    def topic_source(self, topic: str) -> str | None:
        return super().topic_source(topic) if self.is_heartbeats_topic(topic) else None

    def upstream_topic(self, topic: str) -> str | None:
        return super().upstream_topic(topic) if self.is_heartbeats_topic(topic) else topic

    def original_topic(self, topic: str) -> str:
        return HEARTBEATS if self.is_heartbeats_topic(topic) else topic

    def is_heartbeats_topic(self, topic: str) -> bool:
        return topic == HEARTBEATS or topic.endswith(self.separator + HEARTBEATS)


POLICIES = {"org.apache.kafka.connect.mirror.DefaultReplicationPolicy": DefaultReplicationPolicy,
            "org.apache.kafka.connect.mirror.IdentityReplicationPolicy": IdentityReplicationPolicy}


def policy(config: dict[str, str]) -> DefaultReplicationPolicy:
    name = config.get("replication.policy.class", "org.apache.kafka.connect.mirror.DefaultReplicationPolicy").strip()
    for full, cls in POLICIES.items():
        if name in (full, full.rsplit(".", 1)[-1]):
            return cls(config.get("replication.policy.separator", "."))
    raise ValueError(f"Unknown replication.policy.class {name}")


def is_cycle(p: DefaultReplicationPolicy, topic: str, target_alias: str) -> bool:
    """True when ``topic`` came (directly or through other clusters) from ``target_alias``."""
    source = p.topic_source(topic)
    if source is None:
        return False
    if source == target_alias:
        return True
    upstream = p.upstream_topic(topic)
    return upstream is not None and upstream != topic and is_cycle(p, upstream, target_alias)


def pattern(value: str | None, default: str) -> re.Pattern:
    """Kafka's topic/group filter: a comma-separated list of regular expressions, any one matching whole."""
    parts = [p.strip() for p in (value if value is not None else default).split(",") if p.strip()]
    return re.compile("|".join(f"(?:{p})" for p in parts) if parts else "(?!)")
