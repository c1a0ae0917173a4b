"""Shared fixtures. ``tests/`` is on sys.path, so test modules import ``broker_process``."""

from __future__ import annotations

import os

import pytest

from broker_process import BrokerProcess


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
