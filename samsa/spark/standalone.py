"""A Spark standalone cluster on loopback: a master and workers started with PySpark's own
launcher (``bin/spark-class`` of the installed pyspark package), small enough to share a machine.
The cluster tests and ``bench/spark_bench.py --master standalone:…`` start one.

    cluster = SparkStandalone(Path("/tmp/spark"), workers=2, cores=1, memory="1g").start()
    spark = samsa.spark.local_session(master=cluster.url, ...)
    ...
    cluster.stop()
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Callable


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spark_class() -> str:
    import pyspark
    return str(Path(pyspark.__file__).parent / "bin" / "spark-class")


class SparkStandalone:
    """``workers`` worker JVMs of ``cores`` cores and ``memory`` each under one master; their
    executors run ``python`` (default: this interpreter, which has samsa: an environment on every node)."""

    def __init__(self, root: Path, workers: int = 2, cores: int = 2, memory: str = "1g",
                 python: str = sys.executable):
        self.root = Path(root)
        self.port, self.ui_port = _free_port(), _free_port()
        self.workers, self.cores, self.memory, self.python = workers, cores, memory, python
        self.master: subprocess.Popen | None = None
        self.worker_procs: list[subprocess.Popen] = []

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _env(self) -> dict[str, str]:
        return {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_DAEMON_MEMORY": "256m",
                "PYSPARK_PYTHON": self.python, "SPARK_NO_DAEMONIZE": "1"}

    def _launch(self, name: str, *args: str) -> subprocess.Popen:
        self.root.mkdir(parents=True, exist_ok=True)
        # Own process group: a worker's executors are its children, and stop() ends them with it.
        with open(self.root / f"{name}.log", "ab") as log:
            return subprocess.Popen([_spark_class(), *args], env=self._env(), cwd=self.root, start_new_session=True,
                                    stdout=log, stderr=subprocess.STDOUT)

    def _wait(self, ready: Callable[[], bool], what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            if self.master is not None and self.master.poll() is not None:
                raise RuntimeError(f"the Spark master exited {self.master.returncode}:\n{self.log('master')}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out after {timeout:g} s waiting for {what}:\n{self.log('master')}")
            time.sleep(0.2)

    def start(self, timeout: float = 120) -> "SparkStandalone":
        self.master = self._launch("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                   "--port", str(self.port), "--webui-port", str(self.ui_port))
        self._wait(lambda: self.state() is not None, "the Spark master's web UI", timeout)
        for i in range(self.workers):
            self.worker_procs.append(self._launch(
                f"worker-{i}", "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores",
                str(self.cores), "--memory", self.memory, "--webui-port", str(_free_port()),
                "--work-dir", str(self.root / f"work-{i}"), self.url))
        self._wait(lambda: self.alive_workers() == self.workers, "the Spark workers registered", timeout)
        return self

    def state(self) -> dict | None:
        """The master's status JSON (workers, applications), or None while it does not answer."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as r:
                return json.loads(r.read())
        except OSError:
            return None

    def alive_workers(self) -> int:
        s = self.state()
        return 0 if s is None else sum(1 for w in s.get("workers", []) if w.get("state") == "ALIVE")

    def kill_worker(self, i: int) -> None:
        """SIGKILL to the worker's JVM alone, as in a crash (its executors notice and exit)."""
        self.worker_procs[i].send_signal(signal.SIGKILL)
        self.worker_procs[i].wait(10)

    def log(self, name: str) -> str:
        path = self.root / f"{name}.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def stop(self) -> None:
        for p in [*self.worker_procs, self.master]:
            if p is None:
                continue
            try:
                os.killpg(p.pid, signal.SIGKILL)  # the group this started (a worker's executors too)
            except ProcessLookupError:
                pass
            p.wait(10)
