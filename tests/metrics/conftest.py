"""A broker process with its Prometheus endpoint on, shared by the metrics tests."""

from __future__ import annotations

import pytest

from broker_process import BrokerProcess, free_port


@pytest.fixture(scope="module")
def metered_broker(tmp_path_factory) -> BrokerProcess:
    port = free_port()
    b = BrokerProcess(tmp_path_factory.mktemp("metered"), **{"prometheus.listener": f"http://127.0.0.1:{port}"})
    b.metrics_url = f"http://127.0.0.1:{port}/metrics"
    b.start()
    yield b
    b.stop()
