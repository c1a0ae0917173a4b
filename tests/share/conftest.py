"""Fixtures of the share-group tests (KIP-932).

Client-level scenarios run against Apache Kafka 4.4.0 (the session's ``kafka`` fixture) and a
Samsa broker process of their own, configured alike (``target``); the share-partition tests use
embedded brokers (real TCP, in this process; their share partitions keep their state with the
broker's share coordinator, in __share_group_state)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "differential"))

from broker_process import BrokerProcess  # noqa: E402
from share_helpers import SHARE_BROKER_CONFIG, ShareTarget  # noqa: E402
from share_wire import start_share_broker  # noqa: E402


@pytest.fixture(scope="session")
def share_samsa(tmp_path_factory):
    """A Samsa broker process with the same share-group lower bounds as the reference Kafka."""
    b = BrokerProcess(tmp_path_factory.mktemp("share-broker"), **SHARE_BROKER_CONFIG).start()
    yield b
    b.stop()


@pytest.fixture(params=["kafka", "samsa"])
def target(request) -> ShareTarget:
    """One broker serving share groups: Kafka 4.4.0, then Samsa."""
    if request.param == "kafka":
        return ShareTarget("kafka", request.getfixturevalue("kafka").bootstrap)
    return ShareTarget.samsa(request.getfixturevalue("share_samsa").bootstrap)


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
