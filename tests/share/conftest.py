"""Fixtures of the share-partition tests: embedded brokers (real TCP, in this process; their
share partitions keep their state with the broker's share coordinator, in __share_group_state)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "differential"))

from samsa.embedded import Broker  # noqa: E402


def start_share_broker(**overrides) -> Broker:
    return Broker(overrides).start()


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


def set_group_configs(broker: Broker, group: str, configs: dict[str, str]) -> None:
    """A group's share.* configs, set over the wire (IncrementalAlterConfigs on a GROUP resource)."""
    import harness
    side = harness.Side("samsa", broker.bootstrap_servers)
    try:
        r = side.call(44, {"resources": [{"resource_type": 32, "resource_name": group, "configs": [
            {"name": k, "config_operation": 0, "value": v} for k, v in configs.items()]}], "validate_only": False}, 1)
    finally:
        side.close()
    assert r["responses"][0]["error_code"] == 0, r
