"""Fixtures of the share-partition tests: embedded brokers (real TCP, in this process; their
share partitions keep their state with the broker's share coordinator, in __share_group_state)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "differential"))

from share_wire import start_share_broker  # noqa: E402


@pytest.fixture(scope="module")
def share_broker():
    """One embedded broker (locks of Kafka's default 30 s) for a module's tests; topics and groups are per test."""
    broker = start_share_broker()
    yield broker
    broker.stop()


@pytest.fixture(scope="module")
def short_lock_broker():
    """An embedded broker whose acquisition locks last 1 s and whose records are archived after 2 deliveries."""
    broker = start_share_broker(**{
        "group.share.min.record.lock.duration.ms": "1000", "group.share.record.lock.duration.ms": "1000",
        "group.share.delivery.count.limit": "2"})
    yield broker
    broker.stop()
