"""A Spark standalone cluster on loopback: a master and workers started with PySpark's own
launcher (``bin/spark-class`` of the installed pyspark package), small enough to share a machine."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pyspark

from broker_process import free_port
from waiting import wait_until

SPARK_CLASS = str(Path(pyspark.__file__).parent / "bin" / "spark-class")


class SparkStandalone:
    def __init__(self, root: Path, workers: int = 2, cores: int = 2, memory: str = "1g"):
        self.root = Path(root)
        self.port, self.ui_port = free_port(), free_port()
        self.workers, self.cores, self.memory = workers, cores, memory
        self.master: subprocess.Popen | None = None
        self.worker_procs: list[subprocess.Popen] = []

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _env(self) -> dict[str, str]:
        # The executors run this interpreter, which has samsa installed: "an environment on every node".
        return {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_DAEMON_MEMORY": "256m",
                "PYSPARK_PYTHON": sys.executable, "SPARK_NO_DAEMONIZE": "1"}

    def _launch(self, name: str, *args: str) -> subprocess.Popen:
        self.root.mkdir(parents=True, exist_ok=True)
        # Own process group: a worker's executors are its children, and stop() ends them with it.
        return subprocess.Popen([SPARK_CLASS, *args], env=self._env(), cwd=self.root, start_new_session=True,
                                stdout=open(self.root / f"{name}.log", "ab"), stderr=subprocess.STDOUT)

    def start(self) -> "SparkStandalone":
        self.master = self._launch("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                   "--port", str(self.port), "--webui-port", str(self.ui_port))
        wait_until(lambda: self.state() is not None or self.master.poll() is not None, timeout=120,
                   what="the Spark master's web UI")
        assert self.master.poll() is None, self.log("master")
        for i in range(self.workers):
            self.worker_procs.append(self._launch(
                f"worker-{i}", "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores",
                str(self.cores), "--memory", self.memory, "--webui-port", str(free_port()),
                "--work-dir", str(self.root / f"work-{i}"), self.url))
        wait_until(lambda: self.alive_workers() == self.workers, timeout=120, what="the Spark workers registered")
        return self

    def state(self) -> dict | None:
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
                os.killpg(p.pid, signal.SIGKILL)  # the group this helper started (a worker's executors too)
            except ProcessLookupError:
                pass
            p.wait(10)
