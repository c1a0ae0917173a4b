"""A real ZooKeeper server (Debian's `zookeeper` package) on a free loopback port."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from broker_process import free_port, wait_for_port

ZK_SERVER = "/usr/share/zookeeper/bin/zkServer.sh"


class ZooKeeperProcess:
    def __init__(self, data_dir: Path, port: int | None = None, myid: int | None = None,
                 servers: list[str] | None = None, netns=None):
        self.dir = Path(data_dir)
        self.netns = netns  # a nemesis.Node: run inside its network namespace, on its address
        self.host = netns.host if netns is not None else "127.0.0.1"
        self.port = port or free_port()
        self.myid = myid
        self.servers = servers or []  # "server.N=host:peer:election" lines of an ensemble
        self.proc: subprocess.Popen | None = None

    @property
    def connect(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> "ZooKeeperProcess":
        """Start, on a new free port if another process took this one first."""
        for attempt in range(3):
            self._launch()
            wait_for_port(self.port, self.proc, timeout=60, host=self.host)
            if self.answers():
                return self
            self.stop()
            self.port = free_port()
        raise RuntimeError(f"ZooKeeper in {self.dir} does not answer")

    def answers(self, timeout: float = 60.0) -> bool:
        """ZooKeeper itself (not some other process) serves the port: 'srvr' reports its mode.

        (The port listens, and 'ruok' answers, before the server takes sessions.)"""
        deadline = time.time() + timeout
        while time.time() < deadline and self.proc.poll() is None:
            try:
                with socket.create_connection((self.host, self.port), timeout=2) as conn:
                    conn.sendall(b"srvr")
                    reply = b""
                    while chunk := conn.recv(4096):
                        reply += chunk
                    if b"Mode:" in reply:
                        return True
            except OSError:
                pass
            time.sleep(0.1)
        return False

    def _launch(self) -> None:
        (self.dir / "data").mkdir(parents=True, exist_ok=True)
        cfg = self.dir / "zoo.cfg"
        cfg.write_text(f"tickTime=500\ndataDir={self.dir / 'data'}\nclientPort={self.port}\n"
                       f"clientPortAddress={self.host}\nadmin.enableServer=false\nmaxSessionTimeout=60000\n"
                       "initLimit=20\nsyncLimit=10\n4lw.commands.whitelist=srvr\n" + "".join(f"{line}\n" for line in self.servers))
        if self.myid is not None:
            (self.dir / "data" / "myid").write_text(f"{self.myid}\n")
        env = dict(os.environ, ZOOCFGDIR=str(self.dir), ZOO_LOG_DIR=str(self.dir))
        prefix = self.netns.prefix() if self.netns is not None else []
        self.proc = subprocess.Popen(prefix + [ZK_SERVER, "start-foreground", str(cfg)], env=env, cwd=self.dir,
                                     stdout=open(self.dir / "zk.out", "ab"), stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


class ZooKeeperEnsemble:
    """Three ZooKeeper servers in one ensemble (zoo.cfg ``server.N`` lines and ``myid``)."""

    def __init__(self, data_dir: Path, size: int = 3):
        ports = [(free_port(), free_port()) for _ in range(size)]
        lines = [f"server.{i + 1}=127.0.0.1:{peer}:{election}" for i, (peer, election) in enumerate(ports)]
        self.nodes = [ZooKeeperProcess(Path(data_dir) / f"zk{i + 1}", myid=i + 1, servers=lines)
                      for i in range(size)]

    @property
    def connect(self) -> str:
        return ",".join(n.connect for n in self.nodes)

    def start(self) -> "ZooKeeperEnsemble":
        for n in self.nodes:  # start all before waiting: a member serves once it has a quorum
            n._launch()
        for n in self.nodes:
            wait_for_port(n.port, n.proc, timeout=60)
            if not n.answers():
                raise RuntimeError(f"ZooKeeper in {n.dir} does not serve (no quorum?)")
        return self

    def stop(self) -> None:
        for n in self.nodes:
            n.stop()
