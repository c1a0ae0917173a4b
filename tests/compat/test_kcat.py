"""kcat (librdkafka's command-line client, from Debian) against a real Samsa broker process."""

from __future__ import annotations

import json
import select
import shutil
import subprocess
import time

import pytest

from compat_helpers import BASE_TS, WAIT, consume, create_topic, producer

KCAT = shutil.which("kcat") or shutil.which("kafkacat")


def test_kcat_is_installed():
    assert KCAT, "kcat is not installed (apt-get install kcat; ./test installs it)"


def kcat(broker, *args, input: bytes | None = None, check: bool = True) -> subprocess.CompletedProcess:
    assert KCAT, "kcat is not installed"
    r = subprocess.run([KCAT, "-b", broker.bootstrap, "-X", "socket.timeout.ms=20000", *args],
                       input=input, capture_output=True, timeout=WAIT * 2)
    if check:
        assert r.returncode == 0, f"kcat {args} exited {r.returncode}: {r.stderr.decode(errors='replace')}"
    return r


LINES = [b"k%d:value number %d" % (i, i) for i in range(50)] + [b"k-last:a:value:with:colons", b":no key"]


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_produce_from_file_with_keys_and_read_back(broker, topic_name, tmp_path, codec):
    create_topic(broker.bootstrap, topic_name)
    f = tmp_path / "in.txt"
    f.write_bytes(b"\n".join(LINES) + b"\n")
    kcat(broker, "-P", "-t", topic_name, "-p", "0", "-K:", "-z", codec, "-H", "origin=kcat", "-l", str(f))

    out = kcat(broker, "-C", "-t", topic_name, "-p", "0", "-o", "beginning", "-e", "-f", "%o|%k|%s|%h\n").stdout
    rows = [line.split(b"|") for line in out.splitlines()]
    expected = [line.split(b":", 1) for line in LINES]
    assert [int(r[0]) for r in rows] == list(range(len(LINES)))
    assert [(r[1], r[2]) for r in rows] == [(k, v) for k, v in expected]
    assert all(r[3] == b"origin=kcat" for r in rows)

    # another client reads the same
    got = consume(broker.bootstrap, topic_name)
    assert [(r.key or b"", r.value) for r in got] == [(k, v) for k, v in expected]
    assert all(r.headers == (("origin", b"kcat"),) for r in got)


def test_consume_offsets_beginning_relative_and_absolute(broker, topic_name):
    create_topic(broker.bootstrap, topic_name)
    kcat(broker, "-P", "-t", topic_name, "-p", "0", input=b"".join(b"m%d\n" % i for i in range(20)))
    fmt = ("-f", "%o:%s\n")
    out = kcat(broker, "-C", "-t", topic_name, "-o", "beginning", "-e", *fmt).stdout
    assert out.splitlines() == [b"%d:m%d" % (i, i) for i in range(20)]
    out = kcat(broker, "-C", "-t", topic_name, "-o", "-5", "-e", *fmt).stdout
    assert out.splitlines() == [b"%d:m%d" % (i, i) for i in range(15, 20)]
    out = kcat(broker, "-C", "-t", topic_name, "-o", "12", "-e", *fmt).stdout
    assert out.splitlines() == [b"%d:m%d" % (i, i) for i in range(12, 20)]
    out = kcat(broker, "-C", "-t", topic_name, "-o", "beginning", "-c", "3", *fmt).stdout
    assert out.splitlines() == [b"%d:m%d" % (i, i) for i in range(3)]
    out = kcat(broker, "-C", "-t", topic_name, "-o", "end", "-e", *fmt).stdout
    assert out == b""


def test_consume_from_end_sees_only_new_records(broker, topic_name):
    create_topic(broker.bootstrap, topic_name)
    kcat(broker, "-P", "-t", topic_name, "-p", "0", input=b"old0\nold1\nold2\n")
    proc = subprocess.Popen([KCAT, "-b", broker.bootstrap, "-C", "-t", topic_name, "-p", "0", "-o", "end",
                             "-u", "-f", "%o:%s\n"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p = producer(broker.bootstrap, linger_ms=0)
    lines: list[bytes] = []
    buf = b""
    try:
        # when kcat has resolved "end" is not observable: produce until something arrives
        deadline = time.monotonic() + WAIT
        i = 0
        while not lines and time.monotonic() < deadline:
            p.produce(topic_name, value=b"new%d" % i, partition=0)
            p.flush(WAIT)
            i += 1
            ready, _, _ = select.select([proc.stdout], [], [], 0.5)
            if ready:
                buf += proc.stdout.read1(65536)
                *lines, buf = buf.split(b"\n")
        assert lines, "kcat -o end printed nothing"
        assert all(not line.split(b":", 1)[1].startswith(b"old") for line in lines)
        first = int(lines[0].split(b":")[0])
        assert first >= 3
        # and then everything after it, in order
        for j in range(3):
            p.produce(topic_name, value=b"after%d" % j, partition=0)
        p.flush(WAIT)
        while not any(line.endswith(b"after2") for line in lines) and time.monotonic() < deadline:
            ready, _, _ = select.select([proc.stdout], [], [], 0.5)
            if ready:
                buf += proc.stdout.read1(65536)
                *more, buf = buf.split(b"\n")
                lines += more
        offsets = [int(line.split(b":")[0]) for line in lines]
        assert offsets == list(range(first, first + len(lines)))
        assert lines[-3:] == [b"%d:after%d" % (offsets[-3] + j, j) for j in range(3)]
    finally:
        proc.kill()
        proc.wait(10)


def test_metadata_listing(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=3)
    out = kcat(broker, "-L", "-t", topic_name).stdout.decode()
    assert f"broker 0 at 127.0.0.1:{broker.port}" in out
    assert f'topic "{topic_name}" with 3 partitions:' in out
    for p in range(3):
        assert f"partition {p}, leader 0, replicas: 0, isrs: 0" in out

    md = json.loads(kcat(broker, "-L", "-J").stdout)
    assert md["brokers"] == [{"id": 0, "name": f"127.0.0.1:{broker.port}"}]
    assert md["controllerid"] == 0
    (t,) = [t for t in md["topics"] if t["topic"] == topic_name]
    assert sorted(p["partition"] for p in t["partitions"]) == [0, 1, 2]
    assert all(p["leader"] == 0 and p["replicas"] == [{"id": 0}] for p in t["partitions"])
    assert "error" not in t


def test_query_offset_by_timestamp(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=2)
    p = producer(broker.bootstrap)
    for i in range(10):
        p.produce(topic_name, value=b"q%d" % i, partition=1, timestamp=BASE_TS + 1000 * i)
    assert p.flush(WAIT) == 0
    for ts, want in [(BASE_TS, 0), (BASE_TS + 4000, 4), (BASE_TS + 4001, 5), (0, 0)]:
        out = kcat(broker, "-Q", "-t", f"{topic_name}:1:{ts}").stdout.decode()
        assert f"{topic_name} [1] offset {want}" in out, out


def test_json_envelope(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=2)
    p = producer(broker.bootstrap)
    for i in range(6):
        p.produce(topic_name, key=b"key%d" % i, value=b"payload %d" % i, partition=i % 2,
                  timestamp=BASE_TS + i, headers=[("h", b"v%d" % i)])
    assert p.flush(WAIT) == 0
    out = kcat(broker, "-C", "-t", topic_name, "-p", "1", "-o", "beginning", "-e", "-J").stdout
    msgs = [json.loads(line) for line in out.splitlines()]
    assert [(m["topic"], m["partition"], m["offset"], m["key"], m["payload"]) for m in msgs] == \
        [(topic_name, 1, j, "key%d" % i, "payload %d" % i) for j, i in enumerate((1, 3, 5))]
    assert [(m["tstype"], m["ts"]) for m in msgs] == [("create", BASE_TS + i) for i in (1, 3, 5)]
    assert [m["headers"] for m in msgs] == [["h", "v%d" % i] for i in (1, 3, 5)]
    assert all(m["broker"] == 0 for m in msgs)


def test_kcat_auto_creates_topic(broker, topic_name):
    kcat(broker, "-P", "-t", topic_name, input=b"hello\n")
    out = kcat(broker, "-C", "-t", topic_name, "-o", "beginning", "-e", "-f", "%p:%o:%s\n").stdout
    assert out == b"0:0:hello\n"
