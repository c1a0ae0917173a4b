"""A real Samsa broker process on a free loopback port, for tests that need one (and may kill it)."""

from __future__ import annotations

import resource
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen | None = None, timeout: float = 30.0,
                  host: str = "127.0.0.1") -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"broker exited with {proc.returncode}")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listening on {host}:{port} after {timeout}s")


class ChildProcess:
    """A process a test started (``self.proc``, its output in ``self.log_path``): stopped with SIGTERM
    (SIGKILL after ``stop_timeout`` seconds) or killed, by its pid only."""

    proc: subprocess.Popen | None = None
    log_path: Path
    stop_timeout: float = 30

    def stop(self, timeout: float | None = None) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(self.stop_timeout if timeout is None else timeout)
            except subprocess.TimeoutExpired:
                self.kill()

    def kill(self) -> None:
        """SIGKILL: no clean shutdown, as in a crash."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


class BrokerProcess(ChildProcess):
    """``samsa server start`` in a child process, with its own data dir and port.

    With ``netns`` (a ``nemesis.Node``) it runs inside that network namespace, listening on the
    node's address."""

    def __init__(self, data_dir: Path, port: int | None = None, nofile: int | None = None,
                 netns=None, **overrides: object):
        self.data_dir = Path(data_dir)
        self.nofile = nofile  # the child's open-file limit (soft and hard), as `ulimit -n` sets it
        self.port = port or free_port()
        self.netns = netns
        self.host = netns.host if netns is not None else "127.0.0.1"
        self.overrides = {"broker.id": "0", "listeners": f"PLAINTEXT://{self.host}:{self.port}",
                          "log.dirs": str(self.data_dir / "logs"), "num.partitions": "1",
                          "offsets.topic.replication.factor": "1", "group.initial.rebalance.delay.ms": "0",
                          "transaction.state.log.replication.factor": "1", "transaction.state.log.min.isr": "1",
                          "share.coordinator.state.topic.replication.factor": "1",
                          "share.coordinator.state.topic.min.isr": "1"}
        self.overrides.update({k: str(v) for k, v in overrides.items()})
        self.proc: subprocess.Popen | None = None
        self.log_path = self.data_dir / f"broker-{self.port}.log"

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def log_dir(self) -> Path:
        """Where its partitions' directories are (``log.dirs``)."""
        return self.data_dir / "logs"

    def start(self) -> "BrokerProcess":
        self.data_dir.mkdir(parents=True, exist_ok=True)
        props = self.data_dir / "server.properties"
        props.write_text("".join(f"{k}={v}\n" for k, v in self.overrides.items()))
        self.proc = subprocess.Popen(
            (self.netns.prefix() if self.netns is not None else [])
            + [sys.executable, "-m", "samsa.cli.main", "server", "start", str(props)],
            stdout=open(self.log_path, "ab"), stderr=subprocess.STDOUT, cwd=ROOT,
            preexec_fn=None if self.nofile is None else self._limit_files)
        wait_for_port(self.port, self.proc, host=self.host)
        return self

    def _limit_files(self) -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (self.nofile, self.nofile))

