"""Fetch answers sent with sendfile (zero copy) on a PLAINTEXT listener, read by real clients:
confluent-kafka (librdkafka), kcat and kafka-python, against a real broker (in this process, so
the test can count the bytes that went through ``os.sendfile``; the real call still runs)."""

from __future__ import annotations

import os
import shutil
import socket
import struct
import subprocess
import threading
import time
import uuid
from pathlib import Path

import kafka
import pytest
from confluent_kafka import OFFSET_BEGINNING, KafkaException, TopicPartition

from compat_helpers import WAIT, BrokerProcess, consumer, create_topic, producer, start
from samsa.embedded import Broker
from samsa.protocol.api import decode_response, encode_request
from samsa.protocol.api_keys import ApiKey
from samsa.protocol.batch import iter_headers
from samsa.protocol.records import decode_batch
from waiting import wait_until

KCAT = shutil.which("kcat") or shutil.which("kafkacat")


class SendfileCount:
    """Bytes ``os.sendfile`` sent in this process (the broker's fetch answers)."""

    def __init__(self, monkeypatch):
        self.bytes = 0
        real = os.sendfile
        lock = threading.Lock()

        def counted(out_fd, in_fd, offset, count, *a, **kw):
            n = real(out_fd, in_fd, offset, count, *a, **kw)
            with lock:
                self.bytes += n
            return n
        monkeypatch.setattr(os, "sendfile", counted)


@pytest.fixture(scope="module")
def zbroker():
    b = Broker({"log.retention.check.interval.ms": 200, "log.segment.delete.delay.ms": 0}).start()
    yield b
    b.stop()


@pytest.fixture
def sent(monkeypatch):
    return SendfileCount(monkeypatch)


def value(p: int, i: int, size: int) -> bytes:
    head = b"p%d-i%d-" % (p, i)
    return head + bytes((p * 31 + i + j) % 26 + 97 for j in range(size - len(head)))


def produce(bootstrap: str, topic: str, per_partition: dict[int, list[bytes]], **conf) -> None:
    prod = producer(bootstrap, **conf)
    failed: list = []
    for p, values in per_partition.items():
        for v in values:
            while True:
                try:
                    prod.produce(topic, v, partition=p, on_delivery=lambda e, m: e and failed.append(e))
                    break
                except BufferError:
                    prod.poll(0.1)
    assert prod.flush(WAIT) == 0 and not failed, failed


def consume_all(bootstrap: str, topic: str, partitions: int, want: int, **conf) -> dict[int, list[bytes]]:
    c = consumer(bootstrap, **conf)
    out: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        deadline = time.monotonic() + WAIT
        got = 0
        while got < want:
            assert time.monotonic() < deadline, f"consumed {got} of {want} records of {topic}"
            for m in c.consume(500, 0.5):
                if m.error():
                    raise KafkaException(m.error())
                out[m.partition()].append(m.value())
                got += 1
    finally:
        c.close()
    return out


MIXED_SIZES = [100] * 20 + [1000] * 10 + [10_000] * 5 + [100_000] * 3 + [100] * 5


def mixed(partitions: int) -> dict[int, list[bytes]]:
    return {p: [value(p, i, s) for i, s in enumerate(MIXED_SIZES)] for p in range(partitions)}


def test_confluent_reads_large_and_small_records_of_many_partitions(zbroker, sent):
    topic = f"zc-mixed-{uuid.uuid4().hex[:6]}"
    create_topic(zbroker.bootstrap_servers, topic, partitions=8)
    want = mixed(8)
    produce(zbroker.bootstrap_servers, topic, want)
    got = consume_all(zbroker.bootstrap_servers, topic, 8, sum(map(len, want.values())))
    assert got == want
    assert sent.bytes >= 8 * 3 * 100_000  # the 100 KB records, at least, left by sendfile


def test_kcat_and_kafka_python_read_by_sendfile(zbroker, sent):
    topic = f"zc-kcat-{uuid.uuid4().hex[:6]}"
    create_topic(zbroker.bootstrap_servers, topic, partitions=3)
    want = mixed(3)
    produce(zbroker.bootstrap_servers, topic, want)
    total = sum(map(len, want.values()))

    assert KCAT, "kcat is not installed"
    r = subprocess.run([KCAT, "-b", zbroker.bootstrap_servers, "-C", "-e", "-t", topic, "-o", "beginning",
                        "-f", "%p %o %S\n"], capture_output=True, timeout=WAIT * 2)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    rows = [tuple(map(int, line.split())) for line in r.stdout.decode().splitlines()]
    assert sorted(rows) == sorted((p, i, len(v)) for p, vs in want.items() for i, v in enumerate(vs))
    after_kcat = sent.bytes
    assert after_kcat >= 3 * 3 * 100_000

    c = kafka.KafkaConsumer(bootstrap_servers=zbroker.bootstrap_servers, auto_offset_reset="earliest",
                            enable_auto_commit=False, consumer_timeout_ms=int(WAIT * 1000),
                            fetch_max_bytes=1 << 20, max_partition_fetch_bytes=300_000)
    try:
        c.assign([kafka.TopicPartition(topic, p) for p in range(3)])
        got: dict[int, list[bytes]] = {p: [] for p in range(3)}
        for n, m in enumerate(c, 1):
            got[m.partition].append(m.value)
            if n == total:
                break
    finally:
        c.close()
    assert got == want
    assert sent.bytes - after_kcat >= 3 * 3 * 100_000


def _fetch_request(topic: str, partition: int, offset: int, correlation_id: int) -> bytes:
    body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 24, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic, "partitions": [{"partition": partition, "fetch_offset": offset,
                                                         "log_start_offset": -1, "partition_max_bytes": 1 << 22}]}],
            "forgotten_topics_data": [], "rack_id": ""}
    return b"".join(bytes(c) for c in encode_request(ApiKey.FETCH, 12, correlation_id, "zc-test", body))


def test_pipelined_fetches_are_answered_in_order_with_the_right_bytes(zbroker, sent):
    pipelined(zbroker.bootstrap_servers, zbroker.port)
    assert sent.bytes >= 4 * 3 * 100_000


def pipelined(bootstrap: str, port: int) -> None:
    topic = f"zc-pipe-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, topic, partitions=4)
    want = mixed(4)
    produce(bootstrap, topic, want, linger_ms=0, batch_num_messages=1)
    # 40 requests in one write: every partition from several offsets, small answers and big ones mixed
    asks = [(p, off) for off in (0, 19, 20, 30, 35, 36, 37, 38, 40, 42) for p in range(4)]
    frames = b"".join(_fetch_request(topic, p, off, 1000 + i) for i, (p, off) in enumerate(asks))
    with socket.socket() as s:
        # a small receive window: the broker's sendfile meets a full socket and has to wait for it
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.settimeout(WAIT)
        s.connect(("127.0.0.1", port))
        s.sendall(frames)
        buf = bytearray()
        for i, (p, off) in enumerate(asks):
            while len(buf) < 4 or len(buf) < 4 + struct.unpack_from(">i", buf)[0]:
                chunk = s.recv(1 << 20)
                assert chunk, f"the broker closed the connection before answer {i}"
                buf += chunk
            size = struct.unpack_from(">i", buf)[0]
            frame, buf = bytes(buf[4:4 + size]), buf[4 + size:]
            correlation_id, body = decode_response(ApiKey.FETCH, 12, frame)
            assert correlation_id == 1000 + i
            part = body["responses"][0]["partitions"][0]
            assert part["error_code"] == 0 and part["partition_index"] == p
            records = bytes(part["records"])
            values = []
            pos = 0
            for _, h in iter_headers(records):
                hdr, recs = decode_batch(records, pos)
                values += [(r.offset, r.value) for r in recs]
                pos += h.size
            assert values and values[0][0] == off
            assert [v for _, v in values] == want[p][off:off + len(values)]


def _fetch_all_request(topic: str, partitions: int, offset: int, correlation_id: int) -> bytes:
    body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 24, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic": topic, "partitions": [
                {"partition": p, "fetch_offset": offset, "log_start_offset": -1, "partition_max_bytes": 1 << 22}
                for p in range(partitions)]}]}
    return b"".join(bytes(c) for c in encode_request(ApiKey.FETCH, 12, correlation_id, "zc-test", body))


def _values_of(records) -> list[tuple[int, bytes]]:
    records = bytes(records or b"")
    out, pos = [], 0
    for _, h in iter_headers(records):
        _, recs = decode_batch(records, pos)
        out += [(r.offset, r.value) for r in recs]
        pos += h.size
    return out


def test_answers_of_many_partitions_through_a_full_socket_arrive_whole_and_in_order(zbroker, sent):
    """Answers of four partitions each (header bytes, small record sets inline and big ones by
    sendfile, interleaved), pipelined twelve deep to a client with a 4 KiB receive window that
    reads 1,000 bytes at a time: the broker meets a full socket inside slices and inside the
    byte runs between them, and every answer still arrives whole and in order."""
    topic = f"zc-many-{uuid.uuid4().hex[:6]}"
    create_topic(zbroker.bootstrap_servers, topic, partitions=4)
    want = mixed(4)
    produce(zbroker.bootstrap_servers, topic, want, linger_ms=0, batch_num_messages=1)
    offsets = (0, 20, 30, 35, 36, 37, 38, 40, 42, 19, 0, 41)
    frames = b"".join(_fetch_all_request(topic, 4, off, 2000 + i) for i, off in enumerate(offsets))
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.settimeout(WAIT)
        s.connect(("127.0.0.1", zbroker.port))
        s.sendall(frames)
        buf = bytearray()
        for i, off in enumerate(offsets):
            while len(buf) < 4 or len(buf) < 4 + struct.unpack_from(">i", buf)[0]:
                chunk = s.recv(1000)
                assert chunk, f"the broker closed the connection before answer {i}"
                buf += chunk
            size = struct.unpack_from(">i", buf)[0]
            frame, buf = bytes(buf[4:4 + size]), buf[4 + size:]
            correlation_id, body = decode_response(ApiKey.FETCH, 12, frame)
            assert correlation_id == 2000 + i
            parts = body["responses"][0]["partitions"]
            assert [p["partition_index"] for p in parts] == [0, 1, 2, 3]
            for p in parts:
                assert p["error_code"] == 0
                values = _values_of(p["records"])
                assert values and values[0][0] == off
                assert [v for _, v in values] == want[p["partition_index"]][off:off + len(values)]
    assert sent.bytes >= 3 * 100_000


def test_clients_gone_in_the_middle_of_an_answer_cost_only_their_connections(zbroker, sent):
    """Twenty clients ask for megabytes, read 100 bytes and go (half of them with a reset): the
    broker lets go of each connection (its half-sent answer and the socket's writable callback
    with it), and the connections that come next, on the same descriptor numbers, are answered
    whole."""
    topic = f"zc-gone-{uuid.uuid4().hex[:6]}"
    create_topic(zbroker.bootstrap_servers, topic, partitions=4)
    produce(zbroker.bootstrap_servers, topic, mixed(4))
    connections = zbroker.server.dispatcher.connections
    before = len(connections)
    for i in range(20):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.settimeout(WAIT)
        s.connect(("127.0.0.1", zbroker.port))
        s.sendall(_fetch_all_request(topic, 4, 0, i))
        assert s.recv(100)
        if i % 2:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
    wait_until(lambda: len(connections) <= before, "the broker let go of the clients that went", WAIT)
    pipelined(zbroker.bootstrap_servers, zbroker.port)
    assert consume_all(zbroker.bootstrap_servers, topic, 4, 4 * len(MIXED_SIZES)) == mixed(4)


def _server_side_buffers(broker) -> tuple[int, int]:
    """SO_SNDBUF and SO_RCVBUF of the broker's end of a new connection."""
    connections = broker.server.dispatcher.connections
    with socket.create_connection(("127.0.0.1", broker.port), timeout=WAIT) as s:
        me = "%s:%d" % s.getsockname()[:2]
        wait_until(lambda: any(c.peer == me for c in list(connections)), "the broker accepted the connection", WAIT)
        conn = next(c for c in list(connections) if c.peer == me)
        sock = conn.transport.get_extra_info("socket")
        return sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF), sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)


def test_connections_have_the_configured_socket_buffers(zbroker):
    """socket.send.buffer.bytes (Samsa's default 262144; Kafka's is 102400) is the accepted connections' SO_SNDBUF
    (Linux reports twice the size set); socket.receive.buffer.bytes their SO_RCVBUF when it is
    configured, else the OS's default stays."""
    with socket.socket() as fresh:
        default_rcvbuf = fresh.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
    # Linux caps a size set at net.core.wmem_max (212992 on a stock kernel)
    cap = int(Path("/proc/sys/net/core/wmem_max").read_text())
    assert _server_side_buffers(zbroker) == (2 * min(262144, cap), default_rcvbuf)
    with Broker({"socket.send.buffer.bytes": 65536, "socket.receive.buffer.bytes": 50000}) as b:
        assert _server_side_buffers(b) == (2 * 65536, 2 * 50000)


def test_read_committed_over_sendfile_skips_aborted_transactions(zbroker, sent):
    topic = f"zc-txn-{uuid.uuid4().hex[:6]}"
    create_topic(zbroker.bootstrap_servers, topic, partitions=2)
    prod = producer(zbroker.bootstrap_servers, transactional_id=f"zc-{uuid.uuid4().hex[:8]}")
    prod.init_transactions(WAIT)
    committed: dict[int, list[bytes]] = {0: [], 1: []}
    everything: dict[int, list[bytes]] = {0: [], 1: []}
    for n, commit in enumerate([True, False, True, False, True]):
        prod.begin_transaction()
        for p in (0, 1):
            for i in range(6):
                v = value(p, n * 100 + i, 20_000)
                prod.produce(topic, v, partition=p)
                everything[p].append(v)
                if commit:
                    committed[p].append(v)
        prod.flush(WAIT)
        (prod.commit_transaction if commit else prod.abort_transaction)(WAIT)
    before = sent.bytes
    got = consume_all(zbroker.bootstrap_servers, topic, 2, sum(map(len, committed.values())),
                      isolation_level="read_committed")
    assert got == committed
    assert sent.bytes - before >= sum(map(len, (v for vs in committed.values() for v in vs)))
    got = consume_all(zbroker.bootstrap_servers, topic, 2, sum(map(len, everything.values())),
                      isolation_level="read_uncommitted")
    assert got == everything


def test_segments_roll_and_retention_deletes_them_while_a_consumer_reads(zbroker, sent):
    topic = f"zc-roll-{uuid.uuid4().hex[:6]}"
    create_topic(zbroker.bootstrap_servers, topic, partitions=1,
                 config={"segment.bytes": str(1 << 20), "retention.bytes": str(3 << 20)})
    values = [value(0, i, 10_000) for i in range(800)]  # ~8 MB: eight segments, most of them deleted
    c = consumer(zbroker.bootstrap_servers, auto_offset_reset="earliest")
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got: list[tuple[int, bytes]] = []
    producing = threading.Thread(target=produce, args=(zbroker.bootstrap_servers, topic, {0: values}),
                                 kwargs={"linger_ms": 2})
    producing.start()
    try:
        deadline = time.monotonic() + WAIT * 2
        while not got or got[-1][0] < len(values) - 1:
            assert time.monotonic() < deadline, f"consumed up to {got[-1][0] if got else None} of {len(values)}"
            for m in c.consume(100, 0.2):
                if m.error():
                    raise KafkaException(m.error())
                got.append((m.offset(), m.value()))
    finally:
        producing.join(WAIT * 2)
        c.close()
    offsets = [o for o, _ in got]
    assert offsets == sorted(set(offsets))  # never a record twice or out of order
    assert all(v == values[o] for o, v in got)  # every record read is the one written there
    wait_until(lambda: watermarks_of(zbroker, topic)[0] > 0, "retention to delete a segment", WAIT)
    assert sent.bytes > 0


def watermarks_of(b, topic: str) -> tuple[int, int]:
    c = consumer(b.bootstrap_servers)
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=WAIT, cached=False)
    finally:
        c.close()


def test_a_broker_on_uvloop_serves_fetches_by_sendfile(tmp_path, monkeypatch):
    """SAMSA_EVENT_LOOP=uvloop: the same answers (uvloop has no loop.sendfile: a slice the socket
    could not take at once goes through the transport, copied)."""
    import uvloop  # noqa: F401  (a test dependency)
    monkeypatch.setenv("SAMSA_EVENT_LOOP", "uvloop")
    b = start(BrokerProcess(tmp_path / "uv"))
    try:
        topic = "zc-uvloop"
        create_topic(b.bootstrap, topic, partitions=8)
        want = mixed(8)
        produce(b.bootstrap, topic, want)
        assert consume_all(b.bootstrap, topic, 8, sum(map(len, want.values()))) == want
        pipelined(b.bootstrap, b.port)
        assert "running on uvloop" in b.log_text()
    finally:
        b.stop()
