"""Connect worker processes for tests: started with real property files, stopped by pid."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from broker_process import ROOT, ChildProcess, free_port, wait_for_port

HERE = Path(__file__).resolve().parent


class WorkerProcess(ChildProcess):
    stop_timeout = 60

    """``samsa connect-standalone|connect-distributed`` in a child process."""

    def __init__(self, mode: str, workdir: Path, worker_props: dict[str, str], connector_files: list[Path] = ()):
        self.mode = mode
        self.workdir = Path(workdir)
        self.port = free_port()
        self.props = {**worker_props, "listeners": f"http://127.0.0.1:{self.port}"}
        self.connector_files = [str(p) for p in connector_files]
        self.proc: subprocess.Popen | None = None
        self.log_path = self.workdir / f"worker-{self.port}.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "WorkerProcess":
        self.workdir.mkdir(parents=True, exist_ok=True)
        props = self.workdir / f"worker-{self.port}.properties"
        props.write_text("".join(f"{k}={v}\n" for k, v in self.props.items()))
        # tests/connect on the path: connector.class may name the test plugins below by Python path
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))}
        self.proc = subprocess.Popen([sys.executable, "-m", "samsa.cli.main", f"connect-{self.mode}", str(props),
                                      *self.connector_files], stdout=open(self.log_path, "ab"),
                                     stderr=subprocess.STDOUT, cwd=ROOT, env=env)
        wait_for_port(self.port, self.proc, timeout=60)
        return self


    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        return http(method, self.url + path, body)


def http(method: str, url: str, body: Any = None, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            raw = resp.read()
            return resp.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as e:
        raw = e.read()
        return e.code, json.loads(raw) if raw else None


class MirrorMakerProcess(ChildProcess):
    stop_timeout = 60

    def __init__(self, workdir: Path, properties: str):
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.config = workdir / "mm2.properties"
        self.config.write_text(properties)
        self.log_path = workdir / "mm2.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> "MirrorMakerProcess":
        self.proc = subprocess.Popen([sys.executable, "-m", "samsa.cli.main", "mirror-maker", str(self.config)],
                                     stdout=open(self.log_path, "ab"), stderr=subprocess.STDOUT, cwd=ROOT,
                                     env=dict(os.environ))
        return self

