"""Bad input on raw sockets: the broker answers as Kafka does, or closes that one connection,
and never loses what it acknowledged or stops serving everyone else.

Every test ends with ``healthy()``: a well-behaved client on its own connection (confluent-kafka)
produces and consumes, every record acknowledged so far in this module is still there, and
the broker logged no internal error (traceback) for the bad input.
"""

from __future__ import annotations

import os
import random
import socket
import struct

import pytest

from samsa.protocol.api import apis, decode_response, encode_request
from samsa.protocol.batch import compute_crc
from samsa.protocol.records import build_batch

from compat_helpers import (BASE_TS, WAIT, BrokerProcess, consume, create_topic, produce_values, start,
                            wait_until, watermarks)

MAX_REQUEST = 1048576
CANARY = "canary"

# Kafka error codes
NONE, CORRUPT_MESSAGE, UNKNOWN_TOPIC_OR_PARTITION, MESSAGE_TOO_LARGE = 0, 2, 3, 10
INVALID_TOPIC_EXCEPTION, INVALID_REQUIRED_ACKS, UNSUPPORTED_VERSION = 17, 21, 35
INVALID_PARTITIONS, INVALID_REPLICATION_FACTOR, OUT_OF_ORDER_SEQUENCE_NUMBER = 37, 38, 45
OFFSET_OUT_OF_RANGE, NOT_ENOUGH_REPLICAS, INVALID_CONFIG, TOPIC_ALREADY_EXISTS = 1, 19, 40, 36
INVALID_RECORD = 87

PRODUCE_V = 9   # a flexible version, as current clients send
METADATA_V = 12


class Closed(Exception):
    pass


class Raw:
    """One plain TCP connection speaking the wire protocol by hand."""

    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
        self.correlation_id = 0

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, api_key: int, version: int, body: dict) -> int:
        self.correlation_id += 1
        self.sock.sendall(b"".join(bytes(c) for c in
                                   encode_request(api_key, version, self.correlation_id, "bad-input", body)))
        return self.correlation_id

    def _read(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            try:
                chunk = self.sock.recv(n - len(buf))
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                raise Closed()
            buf += chunk
        return bytes(buf)

    def recv_frame(self) -> bytes:
        (size,) = struct.unpack(">i", self._read(4))
        return self._read(size)

    def call(self, api_key: int, version: int, body: dict) -> dict:
        cid = self.send(api_key, version, body)
        got_cid, response = decode_response(api_key, version, self.recv_frame())
        assert got_cid == cid
        return response

    def assert_closed(self) -> None:
        """The broker closes this connection (EOF or reset) without answering."""
        try:
            data = self.sock.recv(65536)
        except ConnectionResetError:
            return
        except socket.timeout:
            raise AssertionError(f"the broker kept the connection open for {WAIT}s") from None
        assert data == b"", f"expected the connection to be closed, got {data[:64]!r}"

    def close(self) -> None:
        self.sock.close()


def raw_header(api_key: int, version: int, correlation_id: int = 7, client_id: bytes = b"bad") -> bytes:
    """A request header v1 (no tagged fields), for requests the codec cannot build."""
    return struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def produce_body(topic: str, parts: dict[int, bytes], acks: int = -1) -> dict:
    return {"transactional_id": None, "acks": acks, "timeout_ms": int(WAIT * 1000),
            "topic_data": [{"name": topic, "partition_data": [{"index": i, "records": r}
                                                              for i, r in parts.items()]}]}


def partition_results(response: dict) -> dict[int, dict]:
    return {p["index"]: p for t in response["responses"] for p in t["partition_responses"]}


# ------------------------------------------------------------------ the broker under test


@pytest.fixture(scope="module")
def small_broker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("bad-input"), **{"socket.request.max.bytes": MAX_REQUEST,
                                                               "auto.create.topics.enable": "true"})
    start(b)
    create_topic(b.bootstrap, CANARY)
    b.acked = []          # canary values acknowledged so far
    yield b
    b.stop()


@pytest.fixture
def bk(small_broker):
    """The module's broker; after the test, check it still serves well-behaved clients."""
    log_before = len(small_broker.log_text())
    yield small_broker
    healthy(small_broker, log_before)


def healthy(b, log_before: int) -> None:
    assert b.proc.poll() is None, "the broker process died"
    value = b"canary-%d" % len(b.acked)
    assert produce_values(b.bootstrap, CANARY, [value], acks="all") == [(0, len(b.acked))]
    b.acked.append(value)
    assert [r.value for r in consume(b.bootstrap, CANARY)] == b.acked
    new_log = b.log_text()[log_before:]
    assert "Traceback" not in new_log, f"internal error in the broker:\n{new_log}"


# ------------------------------------------------------------------ framing


@pytest.mark.parametrize("seed", range(4))
def test_random_bytes(bk, seed):
    rnd = random.Random(seed)
    c = Raw(bk.port)
    c.send_bytes(rnd.randbytes(4096))
    c.sock.shutdown(socket.SHUT_WR)   # nothing more is coming: whatever the size prefix said
    try:
        while True:  # a random frame could, by chance, be an answerable request
            c.recv_frame()
    except Closed:
        pass
    c.close()


def test_random_frame_body_is_closed(bk):
    """A frame of the right size whose body does not decode: Metadata v1 announcing 1000 topics."""
    c = Raw(bk.port)
    c.send_bytes(frame(raw_header(3, 1) + struct.pack(">i", 1000) + b"\x00\x05ab"))
    c.assert_closed()
    c.close()


def test_truncated_frame_then_close(bk):
    c = Raw(bk.port)
    payload = raw_header(18, 0)
    c.send_bytes(struct.pack(">i", 100) + payload)       # promises 100 bytes, sends fewer
    c.close()
    c = Raw(bk.port)
    body = b"".join(bytes(x) for x in encode_request(3, METADATA_V, 1, "x", {
        "topics": None, "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}))
    c.send_bytes(body[:len(body) // 2])
    c.close()


def test_truncated_body_in_complete_frame_is_closed(bk):
    chunks = b"".join(bytes(x) for x in encode_request(19, 4, 1, "x", {
        "topics": [{"name": "never-created", "num_partitions": 1, "replication_factor": 1,
                    "assignments": [], "configs": []}], "timeout_ms": 1000, "validate_only": False}))
    payload = chunks[4:-10]
    c = Raw(bk.port)
    c.send_bytes(frame(payload))
    c.assert_closed()
    c.close()
    assert "never-created" not in {t for t in wait_until(lambda: _topics(bk), what="metadata")}


def _topics(b) -> set[str]:
    c = Raw(b.port)
    try:
        r = c.call(3, METADATA_V, {"topics": None, "allow_auto_topic_creation": False,
                                   "include_topic_authorized_operations": False})
        return {t["name"] for t in r["topics"]} or {"<none>"}
    finally:
        c.close()


def test_size_over_socket_request_max_bytes(bk):
    c = Raw(bk.port)
    c.send_bytes(struct.pack(">i", MAX_REQUEST + 1) + raw_header(18, 0) + b"\0" * 1000)
    c.assert_closed()
    c.close()
    log = wait_until(lambda: str(MAX_REQUEST + 1) in bk.log_text() and bk.log_text(), what="a log line")
    line = next(l for l in log.splitlines() if str(MAX_REQUEST + 1) in l)
    assert str(MAX_REQUEST) in line or "socket.request.max.bytes" in line


def test_negative_size(bk):
    c = Raw(bk.port)
    c.send_bytes(struct.pack(">i", -5) + b"\0" * 16)
    c.assert_closed()
    c.close()


def test_request_shorter_than_its_header(bk):
    c = Raw(bk.port)
    c.send_bytes(frame(b"\x00\x03\x00"))
    c.assert_closed()
    c.close()


# ------------------------------------------------------------------ API keys and versions


def test_unknown_api_key_is_closed(bk):
    c = Raw(bk.port)
    c.send_bytes(frame(raw_header(999, 0)))
    c.assert_closed()
    c.close()


def test_unsupported_metadata_version_is_closed(bk):
    c = Raw(bk.port)
    c.send_bytes(frame(raw_header(3, 99) + b"\x00"))
    c.assert_closed()
    c.close()


def test_unadvertised_api_is_closed(bk):
    """An API Kafka has but this broker does not advertise: the connection is closed."""
    advertised = {k["api_key"] for k in Raw(bk.port).call(18, 3, {"client_software_name": "t",
                                                                   "client_software_version": "1"})["api_keys"]}
    missing = sorted(set(apis()) - advertised)
    assert missing, "every API of the schema is advertised"
    c = Raw(bk.port)
    c.send_bytes(frame(raw_header(missing[0], apis()[missing[0]].min_version) + b"\x00" * 40))
    c.assert_closed()
    c.close()


def test_api_versions_unknown_version_gets_v0_answer(bk):
    c = Raw(bk.port)
    c.send_bytes(frame(raw_header(18, 99) + b"\x00"))  # body of an unknown layout
    cid, r = decode_response(18, 0, c.recv_frame())
    assert cid == 7
    assert r["error_code"] == UNSUPPORTED_VERSION
    ranges = {k["api_key"]: (k["min_version"], k["max_version"]) for k in r["api_keys"]}
    assert ranges[18][0] == 0 and ranges[18][1] >= 3
    # the connection stays usable: retry in a version both sides speak
    r = c.call(18, 3, {"client_software_name": "bad-input", "client_software_version": "1"})
    assert r["error_code"] == NONE
    supported = {k["api_key"]: (k["min_version"], k["max_version"]) for k in r["api_keys"]}
    assert {0, 1, 2, 3, 18, 19, 20} <= set(supported)
    for key, rng in ranges.items():
        assert supported.get(key) == rng
    c.close()


# ------------------------------------------------------------------ produce


def test_produce_bad_crc_is_corrupt_message(bk, topic_name):
    create_topic(bk.bootstrap, topic_name, partitions=2)
    good = build_batch([(b"k", b"good", BASE_TS, [])])
    bad = bytearray(build_batch([(b"k", b"bad", BASE_TS, [])]))
    bad[-1] ^= 0xFF                       # a record byte covered by the CRC32C
    c = Raw(bk.port)
    r = partition_results(c.call(0, PRODUCE_V, produce_body(topic_name, {0: bytes(bad), 1: good})))
    assert r[0]["error_code"] == CORRUPT_MESSAGE
    assert (r[1]["error_code"], r[1]["base_offset"]) == (NONE, 0)
    # the connection is still good (Kafka answers, it does not close)
    r = partition_results(c.call(0, PRODUCE_V, produce_body(topic_name, {0: good})))
    assert (r[0]["error_code"], r[0]["base_offset"]) == (NONE, 0)
    c.close()
    assert [x.value for x in consume(bk.bootstrap, topic_name, 0)] == [b"good"]
    assert [x.value for x in consume(bk.bootstrap, topic_name, 1)] == [b"good"]


def test_produce_garbage_records_is_corrupt_message(bk, topic_name):
    create_topic(bk.bootstrap, topic_name)
    batch = build_batch([(None, b"v", BASE_TS, [])])
    cases = [os.urandom(200), batch[:30], batch[:-3], batch + b"\x01\x02"]
    c = Raw(bk.port)
    for records in cases:
        r = partition_results(c.call(0, PRODUCE_V, produce_body(topic_name, {0: records})))
        assert r[0]["error_code"] == CORRUPT_MESSAGE, records[:40]
    c.close()
    assert consume(bk.bootstrap, topic_name) == []


def with_crc(batch: bytearray) -> bytes:
    """A batch whose CRC32C is right again after it was edited: only the content is wrong."""
    struct.pack_into(">I", batch, 17, compute_crc(batch, 0, len(batch)))
    return bytes(batch)


def _edited(edit, records=((None, b"v"),), **kw) -> bytes:
    batch = bytearray(build_batch([(k, v, BASE_TS, []) for k, v in records], **kw))
    edit(batch)
    return with_crc(batch)


HEADER_CASES = {
    # Kafka's LogValidator.validateBatch for client batches, each an InvalidRecordException (87)
    "offset-delta-beyond-count": lambda: _edited(lambda b: struct.pack_into(">i", b, 23, 999)),
    "count-below-records": lambda: _edited(lambda b: struct.pack_into(">i", b, 57, 1),
                                           records=((None, b"v"), (None, b"w"))),
    "count-zero": lambda: _edited(lambda b: struct.pack_into(">i", b, 57, 0)),
    "control-batch": lambda: build_batch([(None, b"v", BASE_TS, [])], is_control=True),
    "producer-id-without-sequence": lambda: build_batch([(None, b"v", BASE_TS, [])], producer_id=1,
                                                        producer_epoch=0, base_sequence=-1),
}


@pytest.mark.parametrize("case", sorted(HEADER_CASES))
def test_batch_header_checks(bk, topic_name, case):
    """A batch with a good CRC whose header contradicts itself, or that a client may not write:
    Kafka refuses it with INVALID_RECORD and writes nothing. Accepting it corrupts the log
    (an offset-delta of 999 over one record moves the log end by 1000 for a single record)."""
    create_topic(bk.bootstrap, topic_name)
    c = Raw(bk.port)
    r = partition_results(c.call(0, PRODUCE_V, produce_body(topic_name, {0: HEADER_CASES[case]()})))
    c.close()
    hw = consume_watermark(bk, topic_name)
    assert (r[0]["error_code"], hw) == (INVALID_RECORD, 0), \
        f"Kafka answers INVALID_RECORD (87) and writes nothing; got error {r[0]['error_code']}, log end {hw}"


def test_garbage_records_inside_a_good_crc(bk, topic_name):
    """Kafka reads every record of a produced batch (decompressing it) before appending it, so
    a batch whose records do not parse is refused (CORRUPT_MESSAGE / INVALID_RECORD / the
    decompression's error) instead of being stored for every consumer to choke on."""
    create_topic(bk.bootstrap, topic_name, partitions=2)
    garbage = _edited(lambda b: b.__setitem__(slice(61, None), b"\x7f" * (len(b) - 61)),
                      records=((None, b"v" * 50),))
    bad_gzip = _edited(lambda b: b.__setitem__(slice(61, None), b"\x00" * (len(b) - 61)),
                       records=((None, b"v" * 50),), compression="gzip")
    c = Raw(bk.port)
    r = partition_results(c.call(0, PRODUCE_V, produce_body(topic_name, {0: garbage, 1: bad_gzip})))
    c.close()
    got = {p: (r[p]["error_code"], consume_watermark(bk, topic_name, p)) for p in (0, 1)}
    assert all(code != NONE and hw == 0 for code, hw in got.values()), \
        f"stored undecodable batches: (error code, log end) per partition = {got}"


def consume_watermark(b, topic: str, partition: int = 0) -> int:
    return watermarks(b.bootstrap, topic, partition)[1]


def test_batch_larger_than_max_message_bytes(bk, topic_name):
    create_topic(bk.bootstrap, topic_name, config={"max.message.bytes": "1000"})
    big = build_batch([(None, os.urandom(2000), BASE_TS, [])])
    small = build_batch([(None, b"fits", BASE_TS, [])])
    c = Raw(bk.port)
    r = partition_results(c.call(0, PRODUCE_V, produce_body(topic_name, {0: big})))
    assert r[0]["error_code"] == MESSAGE_TOO_LARGE
    r = partition_results(c.call(0, PRODUCE_V, produce_body(topic_name, {0: small})))
    assert (r[0]["error_code"], r[0]["base_offset"]) == (NONE, 0)
    c.close()
    assert [x.value for x in consume(bk.bootstrap, topic_name)] == [b"fits"]


def test_produce_to_unknown_partition(bk, topic_name):
    create_topic(bk.bootstrap, topic_name, partitions=2)
    c = Raw(bk.port)
    r = partition_results(c.call(0, PRODUCE_V, produce_body(
        topic_name, {99: build_batch([(None, b"x", BASE_TS, [])])})))
    assert r[99]["error_code"] == UNKNOWN_TOPIC_OR_PARTITION
    c.close()


def test_produce_invalid_acks(bk, topic_name):
    create_topic(bk.bootstrap, topic_name)
    c = Raw(bk.port)
    r = partition_results(c.call(0, PRODUCE_V, produce_body(
        topic_name, {0: build_batch([(None, b"x", BASE_TS, [])])}, acks=2)))
    assert r[0]["error_code"] == INVALID_REQUIRED_ACKS
    c.close()
    assert consume(bk.bootstrap, topic_name) == []


def _init_producer_id(c: Raw) -> tuple[int, int]:
    r = c.call(22, 4, {"transactional_id": None, "transaction_timeout_ms": 60000,
                       "producer_id": -1, "producer_epoch": -1})
    assert r["error_code"] == NONE
    return r["producer_id"], r["producer_epoch"]


def test_idempotent_retry_is_deduplicated(bk, topic_name):
    """A retried batch (same producer id, epoch, sequence) is written once, and the retry is
    answered like the original: Kafka returns NONE with the original base offset for a batch
    among the producer's last five (UnifiedLog.append, maybeDuplicate)."""
    create_topic(bk.bootstrap, topic_name)
    c = Raw(bk.port)
    pid, epoch = _init_producer_id(c)
    batches = [build_batch([(None, b"seq%d-%d" % (s, i), BASE_TS, []) for i in range(3)],
                           producer_id=pid, producer_epoch=epoch, base_sequence=s)
               for s in (0, 3)]
    for i, batch in enumerate(batches):
        r = partition_results(c.call(0, PRODUCE_V, produce_body(topic_name, {0: batch})))
        assert (r[0]["error_code"], r[0]["base_offset"]) == (NONE, 3 * i)
    retry = partition_results(c.call(0, PRODUCE_V, produce_body(topic_name, {0: batches[0]})))
    assert [x.value for x in consume(bk.bootstrap, topic_name)] == \
        [b"seq0-0", b"seq0-1", b"seq0-2", b"seq3-0", b"seq3-1", b"seq3-2"], "the retry was written again"
    assert retry[0]["base_offset"] == 0
    assert retry[0]["error_code"] == NONE, (
        f"a retry of a batch the broker still remembers must be answered NONE with its original offset, "
        f"got error {retry[0]['error_code']}")
    c.close()


def test_idempotent_sequence_gap_is_out_of_order(bk, topic_name):
    create_topic(bk.bootstrap, topic_name)
    c = Raw(bk.port)
    pid, epoch = _init_producer_id(c)
    first = build_batch([(None, b"a", BASE_TS, [])], producer_id=pid, producer_epoch=epoch,
                        base_sequence=0)
    gap = build_batch([(None, b"c", BASE_TS, [])], producer_id=pid, producer_epoch=epoch,
                      base_sequence=2)
    assert partition_results(c.call(0, PRODUCE_V, produce_body(topic_name, {0: first})))[0]["error_code"] == NONE
    r = partition_results(c.call(0, PRODUCE_V, produce_body(topic_name, {0: gap})))
    assert r[0]["error_code"] == OUT_OF_ORDER_SEQUENCE_NUMBER
    c.close()
    assert [x.value for x in consume(bk.bootstrap, topic_name)] == [b"a"]


# ------------------------------------------------------------------ topics


def _create(c: Raw, name: str, partitions: int = 1, rf: int = 1, configs: dict | None = None) -> dict:
    r = c.call(19, 7, {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": rf,
                                   "assignments": [],
                                   "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}],
                       "timeout_ms": 10000, "validate_only": False})
    (t,) = r["topics"]
    return t


@pytest.mark.parametrize("name", ["bad/name", "", ".", "..", "a" * 250, "spaces in name", "ümlaut"])
def test_invalid_topic_name(bk, name):
    c = Raw(bk.port)
    assert _create(c, name)["error_code"] == INVALID_TOPIC_EXCEPTION
    r = c.call(3, METADATA_V, {"topics": [{"topic_id": bytes(16), "name": name}],
                               "allow_auto_topic_creation": True, "include_topic_authorized_operations": False})
    (t,) = r["topics"]
    assert t["error_code"] == INVALID_TOPIC_EXCEPTION
    c.close()
    assert name not in _topics(bk)


def test_replication_factor_above_brokers(bk, topic_name):
    c = Raw(bk.port)
    assert _create(c, topic_name, rf=2)["error_code"] == INVALID_REPLICATION_FACTOR
    c.close()
    assert topic_name not in _topics(bk)


def test_decreasing_partitions(bk, topic_name):
    c = Raw(bk.port)
    assert _create(c, topic_name, partitions=3)["error_code"] == NONE
    for count in (2, 3):
        r = c.call(37, 3, {"topics": [{"name": topic_name, "count": count, "assignments": None}],
                           "timeout_ms": 10000, "validate_only": False})
        assert r["results"][0]["error_code"] == INVALID_PARTITIONS
    c.close()
    r = Raw(bk.port).call(3, METADATA_V, {"topics": [{"topic_id": bytes(16), "name": topic_name}],
                                          "allow_auto_topic_creation": False,
                                          "include_topic_authorized_operations": False})
    assert len(r["topics"][0]["partitions"]) == 3


def test_many_connections_with_bad_input_at_once(bk, topic_name):
    """Bad clients in parallel with a good one: only the bad connections are closed."""
    create_topic(bk.bootstrap, topic_name)
    bad = [Raw(bk.port) for _ in range(20)]
    good = Raw(bk.port)
    for i, c in enumerate(bad):
        c.send_bytes(frame(raw_header(999 - i, 0)))
    for i in range(10):
        r = partition_results(good.call(0, PRODUCE_V, produce_body(
            topic_name, {0: build_batch([(None, b"g%d" % i, BASE_TS, [])])})))
        assert (r[0]["error_code"], r[0]["base_offset"]) == (NONE, i)
    for c in bad:
        c.assert_closed()
        c.close()
    good.close()
    assert [x.value for x in consume(bk.bootstrap, topic_name)] == [b"g%d" % i for i in range(10)]


def test_create_topic_bad_arguments(bk, topic_name):
    c = Raw(bk.port)
    assert _create(c, topic_name, partitions=0)["error_code"] == INVALID_PARTITIONS
    assert _create(c, topic_name, partitions=-5)["error_code"] == INVALID_PARTITIONS
    assert _create(c, topic_name, rf=0)["error_code"] == INVALID_REPLICATION_FACTOR
    assert _create(c, topic_name, configs={"retention.ms": "soon"})["error_code"] == INVALID_CONFIG
    assert _create(c, topic_name, configs={"no.such.config": "1"})["error_code"] == INVALID_CONFIG
    assert _create(c, topic_name, configs={"cleanup.policy": "shred"})["error_code"] == INVALID_CONFIG
    assert topic_name not in _topics(bk)
    assert _create(c, topic_name)["error_code"] == NONE
    assert _create(c, topic_name)["error_code"] == TOPIC_ALREADY_EXISTS
    c.close()


def test_min_insync_replicas_above_isr(bk, topic_name):
    """RF 1 with min.insync.replicas=2: acks=all is refused with NOT_ENOUGH_REPLICAS, acks=1 works."""
    c = Raw(bk.port)
    assert _create(c, topic_name, configs={"min.insync.replicas": "2"})["error_code"] == NONE
    batch = build_batch([(None, b"x", BASE_TS, [])])
    r = partition_results(c.call(0, PRODUCE_V, produce_body(topic_name, {0: batch}, acks=-1)))
    assert r[0]["error_code"] == NOT_ENOUGH_REPLICAS
    r = partition_results(c.call(0, PRODUCE_V, produce_body(topic_name, {0: batch}, acks=1)))
    assert (r[0]["error_code"], r[0]["base_offset"]) == (NONE, 0)
    c.close()
    assert [x.value for x in consume(bk.bootstrap, topic_name)] == [b"x"]


def test_fetch_and_delete_records_out_of_range(bk, topic_name):
    create_topic(bk.bootstrap, topic_name)
    produce_values(bk.bootstrap, topic_name, [b"a", b"b", b"c"])
    c = Raw(bk.port)
    r = c.call(1, 11, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
                       "isolation_level": 0, "session_id": 0, "session_epoch": -1, "rack_id": "",
                       "forgotten_topics_data": [],
                       "topics": [{"topic": topic_name, "partitions": [
                           {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 99,
                            "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]})
    (part,) = r["responses"][0]["partitions"]
    assert (part["error_code"], part["high_watermark"]) == (OFFSET_OUT_OF_RANGE, -1)  # no watermarks, as Kafka
    r = c.call(21, 2, {"topics": [{"name": topic_name, "partitions": [{"partition_index": 0, "offset": 4}]}],
                       "timeout_ms": 10000})
    assert r["topics"][0]["partitions"][0]["error_code"] == OFFSET_OUT_OF_RANGE
    # the same connection still answers
    r = c.call(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [{"name": topic_name, "partitions": [
        {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
    assert r["topics"][0]["partitions"][0]["offset"] == 3
    c.close()
    assert [x.value for x in consume(bk.bootstrap, topic_name)] == [b"a", b"b", b"c"]


def test_acks0_produce(bk, topic_name):
    """acks=0 gets no answer. When it fails, Kafka closes the connection so that the producer,
    which expects no response, notices and refreshes its metadata (KafkaApis.handleProduceRequest)."""
    create_topic(bk.bootstrap, topic_name)
    batch = build_batch([(None, b"fire-and-forget", BASE_TS, [])])
    c = Raw(bk.port)
    c.send(0, PRODUCE_V, produce_body(topic_name, {0: batch}, acks=0))   # no response to this one
    cid = c.send(3, METADATA_V, {"topics": [{"topic_id": bytes(16), "name": topic_name}],
                                 "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
    got_cid, r = decode_response(3, METADATA_V, c.recv_frame())
    assert got_cid == cid and r["topics"][0]["error_code"] == NONE
    # a failing acks=0 produce: the connection goes, before the request behind it is answered
    c.send(0, PRODUCE_V, produce_body(topic_name, {99: batch}, acks=0))
    c.send(3, METADATA_V, {"topics": [{"topic_id": bytes(16), "name": topic_name}],
                           "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
    try:
        c.recv_frame()
        kept_open = True
    except Closed:
        kept_open = False
    c.close()
    assert not kept_open, "the connection stayed open after an acks=0 produce failed (Kafka closes it)"
    assert [x.value for x in consume(bk.bootstrap, topic_name)] == [b"fire-and-forget"]


# ------------------------------------------------------------------ requests cut short


@pytest.mark.parametrize("hexframe", [
    "00000008000d000200000309",          # LeaveGroup v2 cut inside its client id
    "0000000a00120003000000010000",      # ApiVersions v3 without its tagged-fields byte
])
def test_truncated_request_header_is_closed(bk, hexframe):
    c = Raw(bk.port)
    c.send_bytes(bytes.fromhex(hexframe))
    c.assert_closed()
    c.close()
    assert "Fatal error" not in bk.log_text()


def test_bad_frame_behind_an_async_answer_closes(bk, topic_name):
    """An OffsetCommit (answered once written to __consumer_offsets), then a frame whose header
    ends early, then a Metadata request: the commit is answered, then the connection closes."""
    create_topic(bk.bootstrap, topic_name)
    commit = b"".join(bytes(x) for x in encode_request(8, 2, 1, "x", {
        "group_id": f"g-{topic_name}", "generation_id_or_member_epoch": -1, "member_id": "",
        "retention_time_ms": -1, "topics": [{"name": topic_name, "partitions": [
            {"partition_index": 0, "committed_offset": 0, "committed_metadata": ""}]}]}))
    metadata = b"".join(bytes(x) for x in encode_request(3, METADATA_V, 3, "x", {
        "topics": None, "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}))
    c = Raw(bk.port)
    c.send_bytes(commit + bytes.fromhex("00000008000d000200000309") + metadata)
    got_cid, response = decode_response(8, 2, c.recv_frame())
    assert got_cid == 1 and response["topics"][0]["partitions"][0]["error_code"] == NONE
    c.assert_closed()
    c.close()


# ------------------------------------------------------------------ bounds per connection


def _metadata_frame(correlation_id: int, padding: int) -> bytes:
    """A Metadata v1 request whose client id is ``padding`` bytes long."""
    body = raw_header(3, 1, correlation_id, b"p" * padding) + struct.pack(">i", 0)
    return frame(body)


def test_parked_connection_stops_reading(tmp_path, topic_name):
    """With a long-poll fetch parked, a client streaming requests behind it is held back by
    queued.max.requests: its send cannot complete until the fetch is answered."""
    b = BrokerProcess(tmp_path, **{"queued.max.requests": "2"})
    start(b)
    try:
        create_topic(b.bootstrap, topic_name)
        c = Raw(b.port)
        fetch_id = c.send(1, 11, {
            "replica_id": -1, "max_wait_ms": 15000, "min_bytes": 1, "max_bytes": 1 << 20,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1, "rack_id": "",
            "forgotten_topics_data": [], "topics": [{"topic": topic_name, "partitions": [
                {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                 "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]})
        flood = b"".join(_metadata_frame(100 + i, 30000) for i in range(2000))  # 60 MB
        c.sock.settimeout(3)
        with pytest.raises(socket.timeout):
            c.sock.sendall(flood)
        c.sock.settimeout(WAIT)
        got_cid, _ = decode_response(1, 11, c.recv_frame())
        assert got_cid == fetch_id
        c.close()
        assert b.proc.poll() is None
        assert produce_values(b.bootstrap, topic_name, [b"after"]) == [(0, 0)]
    finally:
        b.stop()


def test_half_sent_frame_is_closed_when_idle(tmp_path):
    """A size prefix promising more than ever arrives: closed after connections.max.idle.ms."""
    b = BrokerProcess(tmp_path, **{"connections.max.idle.ms": "500"})
    start(b)
    try:
        c = Raw(b.port)
        c.send_bytes(struct.pack(">i", 100) + raw_header(18, 0))
        c.assert_closed()
        c.close()
        wait_until(lambda: "connections.max.idle.ms" in b.log_text(), what="the idle close logged")
    finally:
        b.stop()


# ------------------------------------------------------------------ requests too big for the broker


def test_partitions_beyond_the_open_file_limit_are_refused(tmp_path, topic_name):
    """With `ulimit -n` 512, CreateTopics of 2,000 partitions and a CreatePartitions to 9,000 are
    refused with INVALID_PARTITIONS and a message, before a directory is made; the broker serves on."""
    b = BrokerProcess(tmp_path, nofile=512)
    start(b)
    try:
        c = Raw(b.port)
        r = _create(c, topic_name, partitions=2000)
        assert r["error_code"] == INVALID_PARTITIONS and "open file limit 512" in r["error_message"]
        assert _create(c, topic_name, partitions=2)["error_code"] == NONE
        r = c.call(37, 3, {"topics": [{"name": topic_name, "count": 9000, "assignments": None}],
                           "timeout_ms": 10000, "validate_only": False})
        assert r["results"][0]["error_code"] == INVALID_PARTITIONS
        dirs = [p.name for p in (tmp_path / "logs").iterdir() if p.name.startswith(topic_name)]
        assert sorted(dirs) == [f"{topic_name}-0", f"{topic_name}-1"]
        [(_, offset)] = produce_values(b.bootstrap, topic_name, [b"still-serving"])
        assert offset == 0
        c.close()
        assert "open file limit (ulimit -n): 512" in b.log_text()
    finally:
        b.stop()


def test_creating_many_partitions_does_not_stall_other_clients(bk, topic_name):
    """The partitions' files are made off the event loop: while a CreateTopics of 600 partitions
    is being carried out, another connection's request is answered first."""
    creator, other = Raw(bk.port), Raw(bk.port)
    create_id = creator.send(19, 4, {"topics": [{"name": topic_name, "num_partitions": 600,
                                                 "replication_factor": 1, "assignments": [], "configs": []}],
                                     "timeout_ms": 60000, "validate_only": False})
    r = other.call(18, 3, {"client_software_name": "t", "client_software_version": "1"})
    assert r["error_code"] == NONE
    creator.sock.setblocking(False)
    try:
        early = creator.sock.recv(1, socket.MSG_PEEK)
    except BlockingIOError:
        early = b""
    creator.sock.setblocking(True)
    creator.sock.settimeout(120)
    got_cid, response = decode_response(19, 4, creator.recv_frame())
    assert got_cid == create_id and response["topics"][0]["error_code"] == NONE
    assert early == b"", "the CreateTopics answer came before another client's ApiVersions"
    r = other.call(20, 4, {"topic_names": [topic_name], "timeout_ms": 60000})
    assert r["responses"][0]["error_code"] == NONE
    creator.close()
    other.close()


def test_create_topics_finishes_when_the_client_leaves(bk, topic_name):
    """A client that sends CreateTopics and disconnects at once: the topic is still created whole
    (stored and served), not left stored but unapplied."""
    c = Raw(bk.port)
    c.send(19, 4, {"topics": [{"name": topic_name, "num_partitions": 200, "replication_factor": 1,
                               "assignments": [], "configs": []}], "timeout_ms": 60000, "validate_only": False})
    c.close()

    def served() -> bool:
        r = Raw(bk.port).call(3, METADATA_V, {"topics": [{"topic_id": bytes(16), "name": topic_name}],
                                              "allow_auto_topic_creation": False,
                                              "include_topic_authorized_operations": False})
        return r["topics"][0]["error_code"] == NONE and len(r["topics"][0]["partitions"]) == 200
    wait_until(served, what="the topic served with its 200 partitions")
    [(partition, offset)] = produce_values(bk.bootstrap, topic_name, [b"x"])
    assert offset == 0
