"""``samsa schema-registry`` processes for tests: real property files, stopped or killed by pid."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from broker_process import ROOT, ChildProcess, free_port, wait_for_port

# Brokers that host registries in tests let a group session be this short, so a killed
# registry is replaced in seconds (Kafka's group.min.session.timeout.ms is 6 s).
BROKER_OVERRIDES = {"group.min.session.timeout.ms": "1000", "offsets.topic.num.partitions": "1"}
SESSION_MS = 2000


class RegistryProcess(ChildProcess):
    def __init__(self, workdir: Path, bootstrap: str, **props: str):
        self.workdir = Path(workdir)
        self.port = free_port()
        self.props = {"listeners": f"http://127.0.0.1:{self.port}", "kafkastore.bootstrap.servers": bootstrap,
                      "schema.registry.group.session.timeout.ms": str(SESSION_MS), **props}
        self.proc: subprocess.Popen | None = None
        self.log_path = self.workdir / f"registry-{self.port}.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "RegistryProcess":
        return self.launch().wait()

    def launch(self) -> "RegistryProcess":
        self.workdir.mkdir(parents=True, exist_ok=True)
        path = self.workdir / f"registry-{self.port}.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in self.props.items()))
        self.proc = subprocess.Popen([sys.executable, "-m", "samsa.cli.main", "schema-registry", str(path)],
                                     stdout=open(self.log_path, "ab"), stderr=subprocess.STDOUT, cwd=ROOT)
        return self

    def wait(self) -> "RegistryProcess":
        wait_for_port(self.port, self.proc, timeout=60)
        return self


    def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json",
                raw: bytes | None = None) -> tuple[int, Any]:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": content_type})
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                text = resp.read()
                return resp.status, json.loads(text) if text else None
        except urllib.error.HTTPError as e:
            text = e.read()
            return e.code, json.loads(text) if text else None

    def is_writer(self) -> bool:
        return self.request("GET", "/v1/metadata/leader")[1]["is_leader"]
