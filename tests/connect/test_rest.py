"""Kafka Connect's REST API on a standalone worker: every path, and the bad-input answers."""

from __future__ import annotations

import pytest

from broker_process import BrokerProcess
from connect_helpers import WorkerProcess
from waiting import wait_until

COUNTING = "connect_test_plugins.CountingSourceConnector"


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("broker")).start()
    yield b
    b.stop()


@pytest.fixture(scope="module")
def worker(broker, tmp_path_factory):
    d = tmp_path_factory.mktemp("worker")
    w = WorkerProcess("standalone", d, {"bootstrap.servers": broker.bootstrap,
                                        "offset.storage.file.filename": str(d / "offsets"),
                                        "offset.flush.interval.ms": "500"}).start()
    yield w
    w.stop()


def state(worker, name):
    code, body = worker.request("GET", f"/connectors/{name}/status")
    return body["connector"]["state"], [t["state"] for t in body["tasks"]]


def test_root_and_plugins(worker):
    code, body = worker.request("GET", "/")
    assert code == 200 and body["version"].startswith("3.") and body["kafka_cluster_id"]
    code, body = worker.request("GET", "/connector-plugins")
    classes = {p["class"]: p["type"] for p in body}
    assert classes["org.apache.kafka.connect.file.FileStreamSourceConnector"] == "source"
    assert classes["org.apache.kafka.connect.file.FileStreamSinkConnector"] == "sink"


def test_bad_input_is_400_with_kafka_error_json(worker, tmp_path):
    code, body = worker.request("POST", "/connectors", {"name": "bad", "config": {
        "connector.class": "FileStreamSource", "file": str(tmp_path / "x")}})
    assert code == 400 and body["error_code"] == 400
    assert 'Missing required configuration "topic" which has no default value.' in body["message"]
    code, body = worker.request("POST", "/connectors", {"name": "bad", "config": {
        "connector.class": "com.example.NoSuchConnector", "topic": "t"}})
    assert code == 400 and body["error_code"] == 400
    assert "Failed to find any class that implements Connector and which name matches com.example.NoSuchConnector" \
        in body["message"]
    code, body = worker.request("POST", "/connectors", {"name": "bad", "config": {
        "connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector"}})
    assert code == 400 and "Must configure one of topics or topics.regex" in body["message"]
    code, body = worker.request("GET", "/connectors/nope")
    assert (code, body) == (404, {"error_code": 404, "message": "Connector nope not found"})
    code, body = worker.request("PUT", "/connector-plugins/FileStreamSource/config/validate",
                                {"connector.class": "FileStreamSource", "name": "v"})
    assert code == 200 and body["error_count"] == 1
    topic = next(c for c in body["configs"] if c["definition"]["name"] == "topic")
    assert topic["value"]["errors"] == ['Missing required configuration "topic" which has no default value.']
    code, _ = worker.request("GET", "/connectors")
    assert code == 200


def test_connector_lifecycle_over_rest(worker, tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("a\nb\n")
    config = {"connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector", "file": str(src),
              "topic": "rest-topic", "tasks.max": "1"}
    code, body = worker.request("POST", "/connectors", {"name": "src", "config": config})
    assert code == 201 and body["name"] == "src" and body["type"] == "source" and body["config"]["topic"] == "rest-topic"
    code, body = worker.request("POST", "/connectors", {"name": "src", "config": config})
    assert code == 409 and body == {"error_code": 409, "message": "Connector src already exists"}
    wait_until(lambda: state(worker, "src") == ("RUNNING", ["RUNNING"]), "src running")
    assert "src" in worker.request("GET", "/connectors")[1]
    expanded = worker.request("GET", "/connectors?expand=status&expand=info")[1]
    assert expanded["src"]["status"]["connector"]["state"] == "RUNNING"
    assert expanded["src"]["info"]["tasks"] == [{"connector": "src", "task": 0}]
    assert worker.request("GET", "/connectors/src/config")[1]["file"] == str(src)
    code, tasks = worker.request("GET", "/connectors/src/tasks")
    assert tasks[0]["id"] == {"connector": "src", "task": 0} and tasks[0]["config"]["topic"] == "rest-topic"
    assert worker.request("GET", "/connectors/src/tasks/0/status")[1]["state"] == "RUNNING"
    assert worker.request("GET", "/connectors/src/tasks/7/status")[0] == 404

    assert worker.request("PUT", "/connectors/src/pause")[0] == 202
    wait_until(lambda: state(worker, "src") == ("PAUSED", ["PAUSED"]), "src paused")
    assert worker.request("PUT", "/connectors/src/resume")[0] == 202
    wait_until(lambda: state(worker, "src") == ("RUNNING", ["RUNNING"]), "src resumed")

    code, body = worker.request("PATCH", "/connectors/src/offsets", {"offsets": []})
    assert code == 400 and "STOPPED" in body["message"]
    assert worker.request("PUT", "/connectors/src/stop")[0] == 204
    wait_until(lambda: state(worker, "src")[0] == "STOPPED", "src stopped")
    offsets = wait_until(lambda: worker.request("GET", "/connectors/src/offsets")[1]["offsets"], "offsets stored")
    assert offsets == [{"partition": {"filename": str(src)}, "offset": {"position": 4}}]
    code, body = worker.request("PATCH", "/connectors/src/offsets", {"offsets": [
        {"partition": {"filename": str(src)}, "offset": {"position": 2}}]})
    assert code == 200 and body["message"] == "The offsets for this connector have been altered successfully"
    assert worker.request("GET", "/connectors/src/offsets")[1]["offsets"][0]["offset"] == {"position": 2}
    code, body = worker.request("DELETE", "/connectors/src/offsets")
    assert code == 200 and body["message"] == "The offsets for this connector have been reset successfully"
    assert worker.request("GET", "/connectors/src/offsets")[1] == {"offsets": []}

    code, body = worker.request("PUT", "/connectors/src/config", {**config, "topic": "rest-topic-2"})
    assert code == 200 and body["config"]["topic"] == "rest-topic-2"
    assert worker.request("PUT", "/connectors/src/resume")[0] == 202
    wait_until(lambda: state(worker, "src") == ("RUNNING", ["RUNNING"]), "src running again")
    assert worker.request("POST", "/connectors/src/restart")[0] == 204
    code, body = worker.request("POST", "/connectors/src/restart?includeTasks=true")
    assert code == 202 and body["name"] == "src"
    assert worker.request("POST", "/connectors/src/tasks/0/restart")[0] == 204
    code, body = worker.request("PUT", "/connectors/other/config", {**config, "name": "other"})
    assert code == 201
    assert worker.request("DELETE", "/connectors/src")[0] == 204
    assert worker.request("DELETE", "/connectors/other")[0] == 204
    assert worker.request("GET", "/connectors/src")[0] == 404


def test_a_failing_task_is_failed_with_its_trace_and_the_others_run(worker):
    code, _ = worker.request("POST", "/connectors", {"name": "counting", "config": {
        "connector.class": COUNTING, "topic": "counting", "tasks.max": "3", "fail.task": "1"}})
    assert code == 201
    wait_until(lambda: state(worker, "counting") == ("RUNNING", ["RUNNING", "FAILED", "RUNNING"]),
               "task 1 failed, 0 and 2 running")
    task = worker.request("GET", "/connectors/counting/tasks/1/status")[1]
    assert task["state"] == "FAILED" and "this task was told to fail" in task["trace"]
    assert "RuntimeError" in task["trace"]
    status = worker.request("GET", "/connectors/counting/status")[1]
    assert "trace" not in status["tasks"][0]
    # the others still produce
    from samsa.client.consumer import Consumer
    with Consumer({"bootstrap.servers": worker.props["bootstrap.servers"], "auto.offset.reset": "earliest",
                   "group.id": "counting-check"}) as c:
        c.subscribe(["counting"])
        seen: set[str] = set()
        wait_until(lambda: seen.update(r.value.decode() for r in c.poll(0.5)) or
                   {"0-20", "2-20"} <= {v.split('"payload":"')[1].rstrip('"}') for v in seen}, "tasks 0 and 2 write")
    assert worker.request("DELETE", "/connectors/counting")[0] == 204


def test_errors_tolerance_all_sends_bad_records_to_the_dead_letter_queue(worker, tmp_path):
    from samsa.client.consumer import Consumer
    from samsa.client.producer import Producer
    bootstrap = worker.props["bootstrap.servers"]
    with Producer({"bootstrap.servers": bootstrap}) as p:
        for value in (b'{"schema":{"type":"string","optional":false},"payload":"good-1"}', b"not json",
                      b'{"schema":{"type":"string","optional":false},"payload":"good-2"}'):
            p.send("dlq-in", value).result(30)
    out = tmp_path / "sink.txt"
    code, body = worker.request("POST", "/connectors", {"name": "tolerant", "config": {
        "connector.class": "FileStreamSink", "topics": "dlq-in", "file": str(out), "errors.tolerance": "all",
        "errors.log.enable": "true", "errors.deadletterqueue.topic.name": "dlq-out",
        "errors.deadletterqueue.topic.replication.factor": "1",
        "errors.deadletterqueue.context.headers.enable": "true"}})
    assert code == 201, body
    wait_until(lambda: out.exists() and out.read_text().splitlines() == ["good-1", "good-2"], "the good records")
    with Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest", "group.id": "dlq-check"}) as c:
        c.subscribe(["dlq-out"])
        got = wait_until(lambda: c.poll(0.5), "the bad record in the DLQ")
    assert got[0].value == b"not json"
    headers = dict(got[0].headers)
    assert headers["__connect.errors.topic"] == b"dlq-in" and headers["__connect.errors.offset"] == b"1"
    assert headers["__connect.errors.stage"] == b"VALUE_CONVERTER"
    assert state(worker, "tolerant") == ("RUNNING", ["RUNNING"])
    assert worker.request("DELETE", "/connectors/tolerant")[0] == 204
