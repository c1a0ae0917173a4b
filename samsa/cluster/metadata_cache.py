"""This broker's view of the cluster's topics, and the effective config of each.

The replica manager keeps it in step with the metadata store (topics applied and removed);
the request handlers, the topic administration and the coordinators read it.
"""

from __future__ import annotations

from typing import Any

from samsa.broker_config import TOPIC_KEYS, BrokerConfig, stored_topic_config
from samsa.cluster.metadata import TopicInfo
from samsa.storage.config import LogConfig


class MetadataCache:
    def __init__(self, config: BrokerConfig):
        self.config = config
        self.topics: dict[str, TopicInfo] = {}
        self.topic_ids: dict[bytes, str] = {}

    def load(self, topics: dict[str, TopicInfo]) -> None:
        self.topics = dict(topics)
        self.topic_ids = {t.topic_id: n for n, t in self.topics.items()}

    def put(self, topic: TopicInfo) -> None:
        self.topics[topic.name] = topic
        self.topic_ids[topic.topic_id] = topic.name

    def pop(self, name: str) -> TopicInfo | None:
        topic = self.topics.pop(name, None)
        if topic is not None:
            self.topic_ids.pop(topic.topic_id, None)
        return topic

    def topic_config(self, topic: str) -> dict[str, Any]:
        """Effective value of every topic config: override, else the broker's default."""
        overrides = self.topics[topic].configs if topic in self.topics else {}
        return self.effective(overrides)

    def effective(self, overrides: dict[str, str]) -> dict[str, Any]:
        return {name: (stored_topic_config(name, overrides[name]) if name in overrides
                       else self.config.topic_default(name))
                for name in TOPIC_KEYS}

    def log_config(self, topic: str) -> LogConfig:
        overrides = self.topics[topic].configs if topic in self.topics else {}
        return self.log_config_of(overrides)

    def log_config_of(self, overrides: dict[str, str]) -> LogConfig:
        """The storage config of a topic with these overrides."""
        values = self.effective(overrides)
        if values.get("internal.segment.bytes") is not None:  # Kafka 4's test key wins over segment.bytes
            values["segment.bytes"] = values["internal.segment.bytes"]
        return LogConfig.from_topic_values(values)
