"""Kafka's quickstart file pipeline with Kafka's own property files, on a real broker and worker."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker_process import BrokerProcess
from connect_helpers import WorkerProcess
from waiting import wait_until

# Kafka's config/connect-standalone.properties, connect-file-source.properties and
# connect-file-sink.properties (3.9), with only the broker address and file paths changed.
STANDALONE = """\
# These are defaults. This file just demonstrates how to override some settings.
bootstrap.servers={bootstrap}

# The converters specify the format of data in Kafka and how to translate it into Connect data. Every Connect user will
# need to configure these based on the format they want their data in when loaded from or stored into Kafka
key.converter=org.apache.kafka.connect.json.JsonConverter
value.converter=org.apache.kafka.connect.json.JsonConverter
# Converter-specific settings can be passed in by prefixing the Converter's setting with the converter you want to apply
# it to
key.converter.schemas.enable=true
value.converter.schemas.enable=true

offset.storage.file.filename={offsets}
# Flush much faster than normal, which is useful for testing/debugging
offset.flush.interval.ms=10000

# Set to a list of filesystem paths separated by commas (,) to enable class loading isolation for plugins
#plugin.path=
"""
SOURCE = """\
name=local-file-source
connector.class=FileStreamSource
tasks.max=1
file={file}
topic=connect-test
"""
SINK = """\
name=local-file-sink
connector.class=FileStreamSink
tasks.max=1
file={file}
topics=connect-test
"""


@pytest.fixture
def broker(tmp_path):
    b = BrokerProcess(tmp_path / "broker").start()
    yield b
    b.stop()


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_quickstart_file_pipeline_and_restart_without_duplicates(broker, tmp_path):
    source_file, sink_file = tmp_path / "test.txt", tmp_path / "test.sink.txt"
    (tmp_path / "connect-standalone.properties").write_text(
        STANDALONE.format(bootstrap=broker.bootstrap, offsets=tmp_path / "connect.offsets"))
    (tmp_path / "connect-file-source.properties").write_text(SOURCE.format(file=source_file))
    (tmp_path / "connect-file-sink.properties").write_text(SINK.format(file=sink_file))
    source_file.write_text("foo\nbar\n")
    from samsa.configdef import parse_properties
    worker_props = parse_properties((tmp_path / "connect-standalone.properties").read_text())
    files = [tmp_path / "connect-file-source.properties", tmp_path / "connect-file-sink.properties"]

    worker = WorkerProcess("standalone", tmp_path / "w1", worker_props, files).start()
    try:
        wait_until(lambda: _lines(sink_file) == ["foo", "bar"], "the quickstart lines in the sink file", 90)
        with open(source_file, "a") as f:
            f.write("Another line\n")
        wait_until(lambda: _lines(sink_file) == ["foo", "bar", "Another line"], "the appended line", 60)
        code, status = worker.request("GET", "/connectors/local-file-source/status")
        assert code == 200 and status["connector"]["state"] == "RUNNING"
        assert status["tasks"][0]["state"] == "RUNNING" and status["type"] == "source"
    finally:
        worker.stop()
    assert worker.proc.returncode == 0, worker.log_text()[-3000:]

    # The topic holds JsonConverter's envelope, as Kafka's quickstart shows with the console consumer.
    from samsa.client.consumer import Consumer
    with Consumer({"bootstrap.servers": broker.bootstrap, "auto.offset.reset": "earliest",
                   "group.id": "check"}) as c:
        c.subscribe(["connect-test"])
        seen: list[bytes] = []
        wait_until(lambda: seen.extend(r.value for r in c.poll(0.5)) or len(seen) >= 3, "records", 30)
    assert seen[0] == b'{"schema":{"type":"string","optional":false},"payload":"foo"}'

    with open(source_file, "a") as f:
        f.write("written while stopped\n")
    worker = WorkerProcess("standalone", tmp_path / "w2", worker_props, files).start()
    try:
        with open(source_file, "a") as f:
            f.write("after restart\n")
        expected = ["foo", "bar", "Another line", "written while stopped", "after restart"]
        wait_until(lambda: _lines(sink_file) == expected, "the lines after a restart, each once", 90)
    finally:
        worker.stop()
    assert _lines(sink_file) == expected
