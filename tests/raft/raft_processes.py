"""Samsa KRaft controller processes for tests: start, format, ask DescribeQuorum, read their logs."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

from broker_process import ROOT, ChildProcess, wait_for_port
from samsa.client.connection import BrokerConnection
from samsa.protocol.api_keys import ApiKey
from samsa.protocol.batch import iter_headers

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"
SAMSA = [sys.executable, "-m", "samsa.cli.main"]


class Controller(ChildProcess):
    def __init__(self, d: Path, node_id: int, port: int, voters: str, **extra: str):
        self.dir, self.node_id, self.port = d, node_id, port
        self.log_path = d / "controller.log"
        self.conf = d / "server.properties"
        d.mkdir(parents=True, exist_ok=True)
        props = controller_props(d, node_id, port, voters) | extra
        self.conf.write_text("".join(f"{k}={v}\n" for k, v in props.items()))

    @property
    def partition_dir(self) -> Path:
        return self.dir / "metadata" / "__cluster_metadata-0"

    def start(self) -> "Controller":
        self.proc = subprocess.Popen([*SAMSA, "server", "start", str(self.conf)], stdout=open(self.log_path, "ab"),
                                     stderr=subprocess.STDOUT, cwd=ROOT)
        wait_for_port(self.port, self.proc)
        return self

    def quorum_state(self) -> dict:
        return json.loads((self.partition_dir / "quorum-state").read_text())

    def batches(self) -> list[tuple[int, int, int, int, bool]]:
        return batches(self.partition_dir)


def describe_quorum(port: int, host: str = "127.0.0.1", timeout_ms: int = 5000) -> dict:
    """DescribeQuorum v2 of __cluster_metadata-0 from the controller at ``host:port``: the partition."""
    async def ask() -> dict:
        conn = BrokerConnection(host, port, request_timeout_ms=timeout_ms, connect_timeout_ms=timeout_ms)
        await conn.connect()
        try:
            resp = await conn.request(ApiKey.DESCRIBE_QUORUM, {"topics": [{
                "topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}]}, 2)
        finally:
            conn.close()
        assert resp["error_code"] == 0, resp
        return resp["topics"][0]["partitions"][0] | {"nodes": resp["nodes"]}
    return asyncio.run(ask())


def controller_props(d: Path, node_id: int, port: int, voters: str) -> dict[str, str]:
    return {"process.roles": "controller", "node.id": str(node_id), "listeners": f"CONTROLLER://127.0.0.1:{port}",
            "controller.listener.names": "CONTROLLER", "listener.security.protocol.map": "CONTROLLER:PLAINTEXT",
            "controller.quorum.voters": voters, "log.dirs": str(d / "metadata")}


def format_controller(conf: Path) -> None:
    r = subprocess.run([*SAMSA, "storage", "format", "-t", CLUSTER_ID, "-c", str(conf)], capture_output=True,
                       text=True, cwd=ROOT, timeout=60)
    assert r.returncode == 0, r.stderr


def batches(partition_dir: Path) -> list[tuple[int, int, int, int, bool]]:
    """(base offset, last offset, leader epoch, crc, control) of each batch in a metadata log's files."""
    out = []
    for f in sorted(partition_dir.glob("*.log")):
        out += [(h.base_offset, h.last_offset, h.partition_leader_epoch, h.crc, h.is_control)
                for _, h in iter_headers(f.read_bytes())]
    return out


def leader_view(nodes: dict, among=None) -> dict | None:
    """The DescribeQuorum answer of the node (of ``among``, else all) that says it is the leader
    with a committed offset; None when none does."""
    for i in among or nodes:
        try:
            part = describe_quorum(nodes[i].port)
        except Exception:
            continue
        if part["error_code"] == 0 and part["leader_id"] == i and part["high_watermark"] > 0:
            return part
    return None
