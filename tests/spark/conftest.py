"""Fixtures of the Spark tests: one SparkSession (local[2]) for all of them, one embedded broker.

The session is package-scoped: its JVM starts with the first Spark test and is shut down
after the last one, so the other suites never run beside a JVM.
"""

from __future__ import annotations

import subprocess

import pytest

import samsa.spark
from samsa.client.admin import Admin
from samsa.embedded import Broker
from samsa.pipelines.common import connector_conf


@pytest.fixture(scope="package")
def spark():
    # Worker Python processes inherit this; the venv's python has pyarrow and samsa.
    # With Spark's own Kafka connector too (format "kafka"), from ~/.m2 or Maven Central through Ivy.
    session = samsa.spark.local_session("samsa-tests", **{"spark.sql.shuffle.partitions": "2",
                                                          **connector_conf("kafka")})
    yield session
    session.stop()
    _shut_down_jvm()


def _shut_down_jvm() -> None:
    from pyspark import SparkContext
    gateway = SparkContext._gateway
    if gateway is None:
        return
    proc = getattr(gateway, "proc", None)
    gateway.shutdown()
    SparkContext._gateway = None
    SparkContext._jvm = None
    if isinstance(proc, subprocess.Popen):
        try:
            proc.stdin.close()  # the gateway exits when its stdin closes
            proc.wait(timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait()


@pytest.fixture(scope="package")
def broker():
    with Broker({"num.partitions": 1}) as b:
        yield b


@pytest.fixture(scope="package")
def admin(broker):
    with Admin({"bootstrap.servers": broker.bootstrap_servers}) as a:
        yield a


@pytest.fixture
def fresh_broker():
    """A broker of its own, for a test whose topic names are fixed (a pipeline's)."""
    with Broker({"num.partitions": 2}) as b:
        yield b


@pytest.fixture
def postgres():
    """A PostgreSQL server of its own (Debian's binaries, as ./test installs them)."""
    from postgres_server import PostgresServer
    server = PostgresServer().start()
    yield server
    server.stop()
