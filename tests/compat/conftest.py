"""Fixtures of the client-compatibility tests (the broker fixtures are in tests/conftest.py)."""

from __future__ import annotations

import os

import pytest


def pytest_configure(config):
    # kafka-python 3.0 loads its protocol schemas with importlib.resources' deprecated API
    config.addinivalue_line("filterwarnings", "ignore:read_text is deprecated:DeprecationWarning")
    config.addinivalue_line("filterwarnings", "ignore:open_text is deprecated:DeprecationWarning")


@pytest.fixture
def topic_name(request) -> str:
    """A topic per test, unique across modules too: the test files share one broker and have
    tests of the same name (test_acks in every client's file)."""
    module = request.node.module.__name__.rsplit(".", 1)[-1].removeprefix("test_")
    name = request.node.name.replace("[", "-").replace("]", "").replace("/", "-")
    name = "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in name)
    return f"t-{module}-{name}-{os.getpid()}"[:200]
