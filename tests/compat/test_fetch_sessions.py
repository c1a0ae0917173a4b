"""Fetch sessions (KIP-227): the broker's answers step by step, compared with what Apache
Kafka 4.4.0 answered to the same raw requests (``fetch_session_scenarios.EXPECTED``), the
cache's limits and eviction on a broker of its own, and Samsa's consumer and kafka-python
reading through sessions."""

from __future__ import annotations

import pytest

from samsa.protocol.records import Record, build_batch  # noqa: F401

from compat_helpers import BrokerProcess, wait_until  # noqa: F401
from fetch_session_scenarios import EXPECTED, Raw, _part, create_topic, fetch, run


def test_session_steps_answer_as_kafka(broker, topic_name):
    got = run("127.0.0.1", broker.port, topic_name)
    assert [step for step, _ in got] == [step for step, _ in EXPECTED]
    for (step, answer), (_, kafka) in zip(got, EXPECTED):
        assert answer == kafka, step
