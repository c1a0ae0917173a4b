"""Fixtures of the consumer-group tests (BrokerProcess itself is in tests/conftest.py)."""

from __future__ import annotations

import itertools
import os

import pytest

from group_helpers import GROUP_BROKER, BrokerProcess

_ids = itertools.count()


def pytest_configure(config):
    # kafka-python 3.0 loads its protocol schemas with importlib.resources' deprecated API
    config.addinivalue_line("filterwarnings", "ignore:read_text is deprecated:DeprecationWarning")
    config.addinivalue_line("filterwarnings", "ignore:open_text is deprecated:DeprecationWarning")


@pytest.fixture(scope="session")
def gbroker(tmp_path_factory) -> BrokerProcess:
    """One broker process shared by the group tests that do not restart it (names are per test)."""
    b = BrokerProcess(tmp_path_factory.mktemp("groups-broker"), **GROUP_BROKER).start()
    yield b
    b.stop()


@pytest.fixture
def own_broker(tmp_path):
    """A broker of this test alone (restarted, killed...): ``own_broker(**overrides)`` starts it."""
    made = []

    def make(**overrides):
        b = BrokerProcess(tmp_path / f"broker{len(made)}", **{**GROUP_BROKER, **overrides}).start()
        made.append(b)
        return b
    yield make
    for b in made:
        b.kill()


@pytest.fixture
def names(request):
    """(topic, group) names unique to this test."""
    module = request.node.module.__name__.rsplit(".", 1)[-1].removeprefix("test_")
    name = "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in request.node.name)
    base = f"{module}-{name}-{os.getpid()}-{next(_ids)}"[:180]
    return f"t-{base}", f"g-{base}"
