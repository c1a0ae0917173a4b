"""Pure pieces of Samsa's share consumer (KIP-932): acknowledgement batches on the wire,
acknowledge types, the share consumer's config."""

from __future__ import annotations

import pytest

from samsa.client.config import ConfigError
from samsa.client.consumer_internals.async_share_consumer import AsyncShareConsumer, ack_type
from samsa.client.consumer_internals.share_fetcher import ACCEPT, GAP, REJECT, RELEASE, ack_batches
from samsa.client.share_consumer import AcknowledgeType


def test_ack_batches_are_runs_of_one_type():
    acks = {5: ACCEPT, 6: ACCEPT, 7: RELEASE, 9: ACCEPT, 10: GAP, 11: GAP, 3: REJECT}
    assert ack_batches(acks) == [
        {"first_offset": 3, "last_offset": 3, "acknowledge_types": [REJECT]},
        {"first_offset": 5, "last_offset": 6, "acknowledge_types": [ACCEPT]},
        {"first_offset": 7, "last_offset": 7, "acknowledge_types": [RELEASE]},
        {"first_offset": 9, "last_offset": 9, "acknowledge_types": [ACCEPT]},
        {"first_offset": 10, "last_offset": 11, "acknowledge_types": [GAP]},
    ]
    assert ack_batches({}) == []


def test_ack_types_by_name_value_or_enum():
    assert [ack_type(k) for k in ("accept", "RELEASE", "Reject")] == [1, 2, 3]
    assert [ack_type(k) for k in AcknowledgeType] == [1, 2, 3]
    assert ack_type(2) == RELEASE

    class Foreign:  # confluent-kafka's AcknowledgeType, Java's: an enum with a name
        name = "REJECT"
    assert ack_type(Foreign()) == REJECT
    for bad in (0, 4, "GAP", True, None):
        with pytest.raises(ValueError):
            ack_type(bad)


def test_share_consumer_config():
    with pytest.raises(ConfigError, match="auto.offset.reset is not supported for share consumers"):
        AsyncShareConsumer({"bootstrap.servers": "localhost:9092", "group.id": "g", "auto.offset.reset": "earliest"})
    with pytest.raises(ConfigError):
        AsyncShareConsumer({"bootstrap.servers": "localhost:9092", "group.id": "g",
                            "share.acknowledgement.mode": "sometimes"})
    with pytest.raises(Exception, match="group.id"):
        AsyncShareConsumer({"bootstrap.servers": "localhost:9092"})
