"""Fixtures of the CLI tests: one embedded broker and an Admin per module."""

from __future__ import annotations

import pytest

from samsa.client.admin import Admin
from samsa.embedded import Broker


@pytest.fixture(scope="module")
def broker():
    with Broker() as b:
        yield b


@pytest.fixture(scope="module")
def admin(broker):
    with Admin({"bootstrap.servers": broker.bootstrap_servers}) as a:
        yield a
