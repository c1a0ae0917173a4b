"""Samsa: Apache Kafka, rebuilt in Python.

``from samsa import Producer, Consumer, ShareConsumer, Admin, TopicPartition`` — the clients load on first
use, so importing ``samsa`` (or starting a broker) does not pull them in.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Producer", "Consumer", "ShareConsumer", "AcknowledgeType", "Admin", "TopicPartition"]


def __getattr__(name: str) -> Any:
    if name == "Producer":
        from samsa.client.producer import Producer
        return Producer
    if name == "Consumer":
        from samsa.client.consumer import Consumer
        return Consumer
    if name in ("ShareConsumer", "AcknowledgeType"):
        from samsa.client import share_consumer
        return getattr(share_consumer, name)
    if name == "Admin":
        from samsa.client.admin import Admin
        return Admin
    if name == "TopicPartition":
        from samsa.client.types import TopicPartition
        return TopicPartition
    raise AttributeError(f"module 'samsa' has no attribute {name!r}")
