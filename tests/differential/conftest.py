"""Fixtures of the differential tests: Apache Kafka (the session fixture ``kafka``) and a Samsa
broker configured alike, each as a :class:`harness.Side`, and ``diff`` comparing a scenario."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import harness  # noqa: E402
from allowlist import ALLOW, KNOWN  # noqa: E402
from broker_process import BrokerProcess  # noqa: E402

# The Samsa broker is configured as the Kafka fixture: node id 1, one partition a topic, the
# share groups' lower bounds the share tests need (tests/kafka_process.py).
SAMSA_CONF = {"broker.id": "1", "num.partitions": "1", "offsets.topic.num.partitions": "50",
              "group.share.min.record.lock.duration.ms": "1000", "group.share.min.heartbeat.interval.ms": "500",
              "group.share.min.session.timeout.ms": "6000"}


@pytest.fixture(scope="session")
def samsa_broker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("samsa-diff"), **SAMSA_CONF).start()
    yield b
    b.stop()


@pytest.fixture(scope="session")
def kafka_side(request):
    if harness.one_side() == "samsa":
        yield None
        return
    k = request.getfixturevalue("kafka")
    s = harness.Side("kafka", k.bootstrap)
    yield s
    s.close()


@pytest.fixture(scope="session")
def samsa_side(request):
    if harness.one_side() == "kafka":
        yield None
        return
    b = request.getfixturevalue("samsa_broker")
    s = harness.Side("samsa", b.bootstrap)
    yield s
    s.close()


@pytest.fixture(scope="session")
def sides(kafka_side, samsa_side):
    return [s for s in (kafka_side, samsa_side) if s is not None]


@pytest.fixture
def diff(request, kafka_side, samsa_side):
    """``diff(scenario)``: the scenario's answers from both brokers, asserted equal unless allow-listed."""
    reason = ALLOW.get(request.node.name) or ALLOW.get(request.node.originalname)
    bug = KNOWN.get(request.node.name) or KNOWN.get(request.node.originalname)
    if bug and kafka_side is not None and samsa_side is not None:
        request.node.add_marker(pytest.mark.xfail(reason=f"known Samsa difference, not fixed yet: {bug}",
                                                  strict=True))

    def run(scenario):
        k, s = harness.compare(scenario, kafka_side, samsa_side, allow=reason)
        if reason and kafka_side is not None and samsa_side is not None:
            assert k != s, f"allow-listed ({reason}) but equal now: remove {request.node.name} from allowlist.py"
            print(f"allow-listed difference ({reason}):\n kafka: {json.dumps(k, default=str)}\n"
                  f" samsa: {json.dumps(s, default=str)}")
        return k, s
    return run
