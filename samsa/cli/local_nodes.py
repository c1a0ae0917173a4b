"""``samsa server start --local-nodes N server.properties``: one KRaft cluster of N combined nodes
(``process.roles=broker,controller``) on this machine, one process each, so that a cluster uses
N cores. Kafka's own answer to using more cores is more brokers; this starts them with one
command and no ZooKeeper.

From the one ``server.properties`` (and its ``--override``\\ s), node ``i`` (1..N) gets:
``node.id=i``; its broker listener on the base port + 2(i-1) and its controller listener on the
next port (9092/9093, 9094/9095, ... for the default 9092, as Kafka's quickstart uses 9093 for
the controller); ``log.dirs`` under ``<log.dirs>/node-i``; every node a voter of
``controller.quorum.voters``; replication factors of the internal topics and the default
``min(3, N)``. Each node's directory is formatted on the first run (``samsa storage format``,
one cluster id for all), and its generated ``server.properties`` kept there. The command
supervises the nodes: SIGTERM or Ctrl-C stops them all cleanly.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from samsa.configdef import ConfigError, parse_properties

READY_TIMEOUT_S = 120


def node_properties(base: dict[str, str], n: int) -> dict[int, dict[str, str]]:
    """Each node's properties, from the base properties (overrides applied)."""
    if n < 1:
        raise ConfigError(f"--local-nodes must be at least 1 (got {n})")
    listeners = base.get("listeners", "PLAINTEXT://localhost:9092").split(",")
    first = listeners[0]
    name, _, address = first.partition("://")
    host, _, port_text = address.rpartition(":")
    try:
        port = int(port_text)
    except ValueError:
        raise ConfigError(f"listeners: cannot read a port in {first!r}") from None
    if port == 0:
        raise ConfigError("--local-nodes needs a fixed port in listeners (each node takes the next two)")
    log_dirs = base.get("log.dirs") or base.get("log.dir") or "/tmp/kafka-logs"
    root = Path(log_dirs.split(",")[0])
    rf = str(min(3, n))
    protocol_map = base.get("listener.security.protocol.map") or \
        f"{name}:{name if name in ('PLAINTEXT', 'SSL', 'SASL_PLAINTEXT', 'SASL_SSL') else 'PLAINTEXT'}"
    voters = ",".join(f"{i}@{host or 'localhost'}:{port + 2 * (i - 1) + 1}" for i in range(1, n + 1))
    out = {}
    for i in range(1, n + 1):
        p = {k: v for k, v in base.items() if k not in ("broker.id", "zookeeper.connect", "advertised.listeners")}
        bport = port + 2 * (i - 1)
        p.update({
            "process.roles": "broker,controller", "node.id": str(i),
            "listeners": f"{name}://{host}:{bport},CONTROLLER://{host}:{bport + 1}",
            "advertised.listeners": f"{name}://{host or 'localhost'}:{bport}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": protocol_map + ",CONTROLLER:PLAINTEXT",
            "controller.quorum.voters": voters, "log.dirs": str(root / f"node-{i}"),
            "default.replication.factor": rf, "offsets.topic.replication.factor": rf,
            "transaction.state.log.replication.factor": rf,
            "transaction.state.log.min.isr": str(min(2, n)),
            "share.coordinator.state.topic.replication.factor": rf,
            "share.coordinator.state.topic.min.isr": str(min(2, n)),
        })
        p.pop("metadata.log.dir", None)
        out[i] = p
    return out


def _samsa(*args: str) -> list[str]:
    return [sys.executable, "-m", "samsa.cli.main", *args]


def _cluster_id(dirs: list[Path]) -> str:
    for d in dirs:
        meta = d / "meta.properties"
        if meta.exists():
            cid = parse_properties(meta.read_text()).get("cluster.id")
            if cid:
                return cid
    r = subprocess.run(_samsa("storage", "random-uuid"), capture_output=True, text=True, check=True)
    return r.stdout.strip()


def _listening(host: str, port: int) -> bool:
    import socket
    try:
        with socket.create_connection((host or "localhost", port), timeout=0.5):
            return True
    except OSError:
        return False


def run(base: dict[str, str], n: int) -> int:
    nodes = node_properties(base, n)
    dirs = {i: Path(p["log.dirs"]) for i, p in nodes.items()}
    cluster_id = _cluster_id(list(dirs.values()))
    procs: dict[int, subprocess.Popen] = {}
    for i, props in nodes.items():
        dirs[i].mkdir(parents=True, exist_ok=True)
        conf = dirs[i].parent / f"node-{i}.properties"
        conf.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        if not (dirs[i] / "meta.properties").exists():
            r = subprocess.run(_samsa("storage", "format", "-t", cluster_id, "-c", str(conf)), capture_output=True,
                               text=True)
            if r.returncode != 0:
                print(f"samsa server: formatting node {i} failed: {r.stderr.strip() or r.stdout.strip()}",
                      file=sys.stderr)
                return 1
        # its own session: a Ctrl-C of the terminal reaches the supervisor only, which stops them in order
        procs[i] = subprocess.Popen(_samsa("server", "start", str(conf)), start_new_session=True)
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    brokers = []
    for i, props in nodes.items():
        address = props["advertised.listeners"].split("://", 1)[1]
        host, _, port = address.rpartition(":")
        brokers.append((host, int(port)))
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not stopping and time.monotonic() < deadline:
        if any(p.poll() is not None for p in procs.values()):
            break
        if all(_listening(h, p) for h, p in brokers):
            boot = ",".join(f"{h}:{p}" for h, p in brokers)
            print(f"[local-nodes] a KRaft cluster of {n} nodes (cluster id {cluster_id}) is serving on {boot}\n"
                  f"  samsa topics --bootstrap-server {boot} --create --topic spread --partitions {2 * n}\n"
                  f"  samsa topics --bootstrap-server {boot} --describe --topic spread\n"
                  f"  Ctrl-C stops every node (one at a time: each moves its leadership away first)", flush=True)
            break
        time.sleep(0.2)
    codes: dict[int, int] = {}
    while len(codes) < len(procs) and not stopping:
        for i, p in procs.items():
            if i not in codes and p.poll() is not None:
                codes[i] = p.returncode
                print(f"[local-nodes] node {i} exited with {p.returncode}", file=sys.stderr, flush=True)
        time.sleep(0.2)
    # One at a time, the last first: each node's controlled shutdown needs a quorum that can
    # still commit, which stopping them all at once would take away.
    for i in sorted(procs, reverse=True):
        p = procs[i]
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        codes.setdefault(i, p.returncode)
    return 0 if stopping else max(codes.values(), default=0)
