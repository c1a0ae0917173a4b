"""Apache Kafka 4.4.0's tools as a user runs them against a broker (``kafka_process.run_tool``), and
what a client reads of a broker's features: shared by the cli and cluster tests."""

from __future__ import annotations

import asyncio
import os

import pytest

from samsa.client.connection import BrokerConnection
from samsa.protocol.api_keys import ApiKey


def kafka_tools():
    """``kafka_process`` (Kafka's jars and tools); the test is skipped when Kafka's side is not run."""
    if os.environ.get("SAMSA_DIFF_SIDE", "both") == "samsa":
        pytest.skip("SAMSA_DIFF_SIDE=samsa: Kafka's tools are not run")
    import kafka_process
    return kafka_process


def kafka_tool(tool: str, bootstrap: str, *args: str) -> tuple[int, list[str]]:
    """``kafka-<tool> --bootstrap-server B args``: exit status and the lines it printed (stdout,
    then stderr; Kafka's deprecation notice for ``--metadata`` left out)."""
    kp = kafka_tools()
    r = kp.run_tool(kp.TOOLS[tool], "--bootstrap-server", bootstrap, *args, timeout=240)
    return r.returncode, [ln.rstrip() for ln in (r.stdout + r.stderr).splitlines()
                          if ln.strip() and "`metadata` flag is deprecated" not in ln]


def finalized_features(bootstrap: str) -> tuple[dict[str, int], int]:
    """ApiVersions v4's finalized levels and epoch, over a connection of its own."""
    host, port = bootstrap.rsplit(":", 1)

    async def ask():
        c = BrokerConnection(host, int(port), client_id="features-test")
        await c.connect()
        try:
            r = await c.request(ApiKey.API_VERSIONS, {"client_software_name": "t", "client_software_version": "1"}, 4)
        finally:
            c.close()
        return {f["name"]: f["max_version_level"] for f in r["finalized_features"]}, r["finalized_features_epoch"]
    return asyncio.run(ask())
