"""Kafka's own Connect runtime 4.4.0 (``ConnectDistributed``, connect-runtime from tests/kafka/pom.xml) against
Samsa: its config, offset and status topics on Samsa; Kafka's FileStreamSourceConnector and
FileStreamSinkConnector (connect-file 4.3.0, installed on the worker's plugin.path with its own 4.3.0 dependencies:
its 4.4.0 jar is not served by the Maven Central reachable here; tests/kafka/connect-4.3.0/pom.xml) created through
its REST API; two Java workers sharing the work, one stopped and restarted: every line copied once and in order.

``SAMSA_JAVA_ECO_BROKER=kafka`` runs it against Apache Kafka 4.4.0 instead."""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

import pytest

import kafka_process
from broker_process import BrokerProcess, ChildProcess, free_port, wait_for_port
from connect_helpers import http
from waiting import wait_until

WAIT = 180


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory):
    if os.environ.get("SAMSA_JAVA_ECO_BROKER") == "kafka":
        k = kafka_process.KafkaProcess(tmp_path_factory.mktemp("kafka")).start()
        yield k.bootstrap
        k.stop()
        return
    b = BrokerProcess(tmp_path_factory.mktemp("broker"), **{"group.initial.rebalance.delay.ms": "0"}).start()
    yield b.bootstrap
    b.stop()


class JavaWorker(ChildProcess):
    stop_timeout = 90

    def __init__(self, workdir: Path, bootstrap: str, group: str):
        self.port = free_port()
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.props = workdir / f"worker-{self.port}.properties"
        self.props.write_text("".join(f"{k}={v}\n" for k, v in {
            "bootstrap.servers": bootstrap, "group.id": group, "listeners": f"http://127.0.0.1:{self.port}",
            "config.storage.topic": f"{group}-configs", "offset.storage.topic": f"{group}-offsets",
            "status.storage.topic": f"{group}-status", "config.storage.replication.factor": "1",
            "offset.storage.replication.factor": "1", "status.storage.replication.factor": "1",
            "key.converter": "org.apache.kafka.connect.storage.StringConverter",
            "value.converter": "org.apache.kafka.connect.storage.StringConverter",
            "offset.flush.interval.ms": "500", "scheduled.rebalance.max.delay.ms": "3000",
            "plugin.path": str(kafka_process.CONNECT_PLUGIN_PATH),      # connect-file 4.3.0, with its dependencies
        }.items()))
        self.log_path = workdir / f"worker-{self.port}.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "JavaWorker":
        cmd = kafka_process.java("org.apache.kafka.connect.cli.ConnectDistributed", str(self.props))
        self.proc = subprocess.Popen(cmd, stdout=open(self.log_path, "ab"), stderr=subprocess.STDOUT)
        wait_for_port(self.port, self.proc, timeout=WAIT)
        wait_until(lambda: self._serving(), f"the Java worker on {self.port} serving", WAIT)
        return self

    def _serving(self) -> bool:
        assert self.proc.poll() is None, self.log_text()[-3000:]
        try:
            return http("GET", self.url + "/connectors")[0] == 200
        except OSError:
            return False

    def workers_of(self, *connectors: str) -> set[str]:
        out = set()
        for name in connectors:
            code, status = http("GET", f"{self.url}/connectors/{name}/status")
            if code != 200:
                return set()
            out |= {status["connector"]["worker_id"]} | {t["worker_id"] for t in status["tasks"]
                                                            if t["state"] == "RUNNING"}
        return out


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_two_java_workers_copy_a_file_through_samsa_once_and_in_order(bootstrap, tmp_path):
    group, topic = f"jc-{uuid.uuid4().hex[:6]}", f"jc-lines-{uuid.uuid4().hex[:6]}"
    source, sink = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_text("".join(f"line {i}\n" for i in range(100)))
    w1 = JavaWorker(tmp_path / "w1", bootstrap, group).start()
    w2 = JavaWorker(tmp_path / "w2", bootstrap, group).start()
    try:
        code, body = http("POST", w1.url + "/connectors", {"name": "lines-in", "config": {
            "connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector", "tasks.max": "1",
            "file": str(source), "topic": topic}})
        assert code == 201, body
        code, body = http("POST", w2.url + "/connectors", {"name": "lines-out", "config": {
            "connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector", "tasks.max": "1",
            "file": str(sink), "topics": topic}})
        assert code == 201, body
        wait_until(lambda: _lines(sink) == _lines(source), "the first 100 lines copied", WAIT)
        wait_until(lambda: w1.workers_of("lines-in", "lines-out") == {f"127.0.0.1:{w1.port}",
                                                                       f"127.0.0.1:{w2.port}"},
                   "the connectors and tasks spread over both workers", WAIT)
        w1.stop()          # its work goes to the other worker
        with source.open("a") as f:
            f.write("".join(f"line {i}\n" for i in range(100, 200)))
        wait_until(lambda: _lines(sink) == _lines(source), "lines 100-199 copied by the remaining worker", WAIT)
        assert w2.workers_of("lines-in", "lines-out") == {f"127.0.0.1:{w2.port}"}
        w1 = JavaWorker(tmp_path / "w1", bootstrap, group).start()     # a worker restart
        with source.open("a") as f:
            f.write("".join(f"line {i}\n" for i in range(200, 300)))
        wait_until(lambda: _lines(sink) == _lines(source), "lines 200-299 copied", WAIT)
        w2.stop()          # and the other way: everything to the restarted worker
        with source.open("a") as f:
            f.write("".join(f"line {i}\n" for i in range(300, 400)))
        wait_until(lambda: _lines(sink) == _lines(source), "lines 300-399 copied after the second handover", WAIT)
        assert _lines(sink) == [f"line {i}" for i in range(400)]     # every line once, in order
    finally:
        w1.stop()
        w2.stop()
