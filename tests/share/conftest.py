"""Fixtures of the share-group tests (KIP-932): the same scenarios against Apache Kafka 4.4.0
(the session's ``kafka`` fixture) and a Samsa broker of their own, configured alike."""

from __future__ import annotations

import pytest

from broker_process import BrokerProcess
from share_helpers import SHARE_BROKER_CONFIG, ShareTarget


@pytest.fixture(scope="session")
def share_samsa(tmp_path_factory):
    """A Samsa broker with the same share-group lower bounds as the reference Kafka."""
    b = BrokerProcess(tmp_path_factory.mktemp("share-broker"), **SHARE_BROKER_CONFIG).start()
    yield b
    b.stop()


@pytest.fixture(params=["kafka", "samsa"])
def target(request) -> ShareTarget:
    """One broker serving share groups: Kafka 4.4.0, then Samsa."""
    if request.param == "kafka":
        return ShareTarget("kafka", request.getfixturevalue("kafka").bootstrap)
    return ShareTarget.samsa(request.getfixturevalue("share_samsa").bootstrap)
