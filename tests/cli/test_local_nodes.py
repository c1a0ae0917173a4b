"""``samsa server start --local-nodes N``: one command, a KRaft cluster of N processes on this
machine (issue 34, item 5), formatted on its first run, stopped cleanly by one SIGTERM, and the
same cluster again on the next start."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys

from confluent_kafka.admin import AdminClient, NewTopic

from broker_process import ROOT
from waiting import wait_until


def _free_run(n: int) -> int:
    """A port p with p..p+n-1 free on loopback."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + n >= 65535:
            continue
        ok = True
        for p in range(base, base + n):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", p))
                except OSError:
                    ok = False
                    break
        if ok:
            return base
    raise RuntimeError("no run of free ports")


def _start(conf, port: int, data, log) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "samsa.cli.main", "server", "start", "--local-nodes", "2",
                             str(conf), "--override", f"log.dirs={data}",
                             "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}"],
                            stdout=open(log, "ab"), stderr=subprocess.STDOUT, cwd=ROOT)


def _brokers(port: int) -> list[int]:
    try:
        md = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}", "log_level": 0}).list_topics(timeout=5)
        return sorted(md.brokers)
    except Exception:
        return []


def test_local_nodes_one_command_one_cluster(tmp_path):
    conf = tmp_path / "server.properties"
    conf.write_text((ROOT / "config" / "server.properties").read_text())
    port = _free_run(4)
    data, log = tmp_path / "data", tmp_path / "out.log"
    proc = _start(conf, port, data, log)
    try:
        wait_until(lambda: _brokers(port) == [1, 2], "two brokers in one cluster", 90)
        wait_until(lambda: "a KRaft cluster of 2 nodes" in log.read_text(), "the command to say it is ready", 30)
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port + 2}", "log_level": 0})
        admin.create_topics([NewTopic("spread", 4)])["spread"].result(30)     # default RF: min(3, N) = 2
        md = admin.list_topics("spread", timeout=10)
        parts = md.topics["spread"].partitions.values()
        assert {p.leader for p in parts} == {1, 2} and all(sorted(p.replicas) == [1, 2] for p in parts)
        cluster_id = (data / "node-1" / "meta.properties").read_text()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        assert "[KafkaServer id=1] shut down completed" in log.read_text()
        assert "[KafkaServer id=2] shut down completed" in log.read_text()
        # started again: not formatted again, the same cluster and its topic
        proc = _start(conf, port, data, log)
        wait_until(lambda: _brokers(port) == [1, 2], "the two brokers back", 90)
        assert (data / "node-1" / "meta.properties").read_text() == cluster_id
        md = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}", "log_level": 0}).list_topics("spread", timeout=10)
        assert len(md.topics["spread"].partitions) == 4
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
