"""Fixtures of the share-group tests (KIP-932).

Client-level scenarios run against Apache Kafka 4.4.0 (the session's ``kafka`` fixture) and a
Samsa broker process of their own, configured alike (``target``); the share-partition tests use
embedded brokers (real TCP, in this process) whose share partitions keep their state in an
in-memory test persister, and a raw-request side."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "differential"))

from broker_process import BrokerProcess  # noqa: E402
from share_helpers import SHARE_BROKER_CONFIG, ShareTarget  # noqa: E402
from share_memory_persister import MemoryPersister  # noqa: E402

from samsa.embedded import Broker  # noqa: E402


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


def start_share_broker(**overrides) -> tuple[Broker, MemoryPersister]:
    broker = Broker(overrides).start()
    persister = MemoryPersister()  # in place of the broker's own (the share coordinator's): tests read its states
    broker.server.shares.persister = persister
    return broker, persister


@pytest.fixture(scope="module")
def share_broker():
    """One embedded broker (locks of Kafka's default 30 s) for a module's tests; topics and groups are per test."""
    broker, persister = start_share_broker()
    yield broker, persister
    broker.stop()


@pytest.fixture(scope="module")
def short_lock_broker():
    """An embedded broker whose acquisition locks last 1 s and whose records are archived after 2 deliveries."""
    broker, persister = start_share_broker(**{
        "group.share.min.record.lock.duration.ms": "1000", "group.share.record.lock.duration.ms": "1000",
        "group.share.delivery.count.limit": "2"})
    yield broker, persister
    broker.stop()


def set_group_configs(broker: Broker, group: str, configs: dict[str, str]) -> None:
    """A group's share.* configs, written to the broker's metadata store directly (the group
    configs room reads them from there), and its cached copy dropped."""
    broker.server.store.put_entity_configs(f"groups/{group}", configs)
    broker.server.groups.group_configs_changed(group)
