"""A real ZooKeeper server (Debian's `zookeeper` package) on a free loopback port."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from broker_process import free_port, wait_for_port

ZK_SERVER = "/usr/share/zookeeper/bin/zkServer.sh"


class ZooKeeperProcess:
    def __init__(self, data_dir: Path, port: int | None = None):
        self.dir = Path(data_dir)
        self.port = port or free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def connect(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> "ZooKeeperProcess":
        (self.dir / "data").mkdir(parents=True, exist_ok=True)
        cfg = self.dir / "zoo.cfg"
        cfg.write_text(f"tickTime=500\ndataDir={self.dir / 'data'}\nclientPort={self.port}\n"
                       "clientPortAddress=127.0.0.1\nadmin.enableServer=false\nmaxSessionTimeout=60000\n")
        env = dict(os.environ, ZOOCFGDIR=str(self.dir), ZOO_LOG_DIR=str(self.dir))
        self.proc = subprocess.Popen([ZK_SERVER, "start-foreground", str(cfg)], env=env, cwd=self.dir,
                                     stdout=open(self.dir / "zk.out", "ab"), stderr=subprocess.STDOUT,
                                     start_new_session=True)
        wait_for_port(self.port, self.proc, timeout=60)
        return self

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
