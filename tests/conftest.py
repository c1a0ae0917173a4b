"""Shared fixtures. ``tests/`` is on sys.path, so test modules import ``broker_process``."""

from __future__ import annotations

import os

# Encoders refuse message keys their schema does not know (samsa.protocol.codec.STRICT);
# set before samsa is imported, and inherited by the broker processes tests start.
os.environ.setdefault("SAMSA_STRICT_CODEC", "1")

import pytest  # noqa: E402

from broker_process import BrokerProcess  # noqa: E402


@pytest.fixture(scope="session")
def broker(tmp_path_factory) -> BrokerProcess:
    """One broker process shared by the compatibility tests (topics are per test)."""
    b = BrokerProcess(tmp_path_factory.mktemp("broker")).start()
    yield b
    b.stop()


@pytest.fixture
def topic_name(request) -> str:
    name = request.node.name.replace("[", "-").replace("]", "").replace("/", "-")
    return f"t-{name}-{os.getpid()}"[:200]


@pytest.fixture(scope="session")
def kafka(tmp_path_factory):
    """Apache Kafka 4.4.0, one KRaft node (broker and controller), started once per session."""
    import kafka_process
    if os.environ.get("SAMSA_DIFF_SIDE", "both") == "samsa":
        pytest.skip("SAMSA_DIFF_SIDE=samsa: Kafka's side is not run")
    k = kafka_process.KafkaProcess(tmp_path_factory.mktemp("kafka")).start()
    yield k
    k.stop()
