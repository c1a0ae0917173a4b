"""`samsa console-producer`: the seeds' walkthroughs, run as a user runs them."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from confluent_kafka import Consumer, TopicPartition

from cli_tools import one_error_line
from samsa.client.types import NewTopic


def cp(broker, *args: str, stdin: str = "", timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "samsa.cli.main", "console-producer", "--bootstrap-server",
                           broker.bootstrap_servers, *args], input=stdin, capture_output=True, text=True,
                          timeout=timeout)


def read(broker, topic: str, n: int) -> list:
    c = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": f"r{time.time()}",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    out = []
    deadline = time.time() + 30
    while len(out) < n and time.time() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            out.append(m)
    c.close()
    return out


@pytest.fixture(scope="module")
def topics(broker, admin):
    admin.create_topics([NewTopic(t, 1, 1) for t in ("lines", "keyed", "heads", "codec", "live", "acks1", "nul")])


def test_each_line_is_a_record(broker, topics):
    r = cp(broker, "--topic", "lines", stdin="This is a message\nThis is another message\n")
    assert r.returncode == 0, r.stderr
    assert [m.value() for m in read(broker, "lines", 2)] == [b"This is a message", b"This is another message"]


def test_parse_key_with_separator_and_a_line_without_one(broker, topics):
    r = cp(broker, "--topic", "keyed", "--property", "parse.key=true", "--property", "key.separator=:",
           stdin="k1:v1\nk2:v:2\n")
    assert r.returncode == 0, r.stderr
    assert [(m.key(), m.value()) for m in read(broker, "keyed", 2)] == [(b"k1", b"v1"), (b"k2", b"v:2")]
    r = cp(broker, "--topic", "keyed", "--property", "parse.key=true", "--property", "key.separator=:",
           stdin="no separator here\n")
    assert "No key separator found on line number 1" in one_error_line(r)


def test_headers_null_marker_and_file(broker, topics, tmp_path):
    f = tmp_path / "records.txt"
    f.write_text("h1:a,h2:b\tk\tv\nNULL\tk2\tNULL\n")
    r = cp(broker, "--topic", "heads", "--file", str(f), "--property", "parse.headers=true",
           "--property", "parse.key=true", "--property", "null.marker=NULL")
    assert r.returncode == 0, r.stderr
    first, second = read(broker, "heads", 2)
    assert (first.headers(), first.key(), first.value()) == ([("h1", b"a"), ("h2", b"b")], b"k", b"v")
    assert (second.headers(), second.key(), second.value()) == (None, b"k2", None)


def test_compression_acks_and_sync(broker, topics):
    r = cp(broker, "--topic", "codec", "--compression-codec", "zstd", "--request-required-acks", "1", "--sync",
           stdin="".join(f"z{i}\n" for i in range(50)))
    assert r.returncode == 0, r.stderr
    assert [m.value() for m in read(broker, "codec", 50)] == [f"z{i}".encode() for i in range(50)]
    r = cp(broker, "--topic", "acks1", "--producer-property", "acks=0", "--producer-property", "linger.ms=0",
           stdin="fire and forget\n")
    assert r.returncode == 0, r.stderr
    assert [m.value() for m in read(broker, "acks1", 1)] == [b"fire and forget"]


def test_bad_input_is_one_line(broker, topics, tmp_path):
    assert "topic" in one_error_line(cp(broker, stdin="x\n"))
    assert "compression codec" in one_error_line(cp(broker, "--topic", "nul", "--compression-codec", "brotli"))
    assert "batch.size" in one_error_line(cp(broker, "--topic", "nul", "--producer-property", "batch.size=lots"))
    assert "Cannot read" in one_error_line(cp(broker, "--topic", "nul", "--file", str(tmp_path / "missing")))
    assert "expected key=value" in one_error_line(cp(broker, "--topic", "nul", "--property", "parse.key"))


def test_two_terminal_live_tail(broker, topics):
    """The seeds: a console producer in one terminal, a console consumer in another, lines appear live."""
    consumer = subprocess.Popen([sys.executable, "-m", "samsa.cli.main", "console-consumer", "--bootstrap-server",
                                 broker.bootstrap_servers, "--topic", "live", "--max-messages", "3",
                                 "--from-beginning"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    producer = subprocess.Popen([sys.executable, "-m", "samsa.cli.main", "console-producer", "--bootstrap-server",
                                 broker.bootstrap_servers, "--topic", "live", "--sync"],
                                stdin=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # The consumer runs first; it reads the fresh topic from its beginning, so no line can
        # slip past it however late it finds its position (no head start to sleep out).
        for line in ("hello", "world", "third line"):
            producer.stdin.write(line + "\n")
            producer.stdin.flush()
        out, _ = consumer.communicate(timeout=60)
        assert out.splitlines() == ["hello", "world", "third line"]
    finally:
        producer.stdin.close()
        assert producer.wait(30) == 0
        consumer.kill()
