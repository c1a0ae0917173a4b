"""Issue 33: three fuzzed frames neither answered nor closed within 30 s, and requests that held
the event loop for everyone; each frame replayed byte for byte over TCP against a real broker.

What the frames showed:

- The EndTxn v0 frame the fuzzer sent before ShareGroupDescribe and LeaveGroup is one byte longer
  than its size prefix says (51 bytes behind a prefix of 50). Its last byte (01) starts the next
  frame, so the next size prefix reads 01 00 00 00: 16 MiB, under ``socket.request.max.bytes``.
  The broker answers the EndTxn (INVALID_REQUEST: empty transactional id) and waits for the rest
  of a 16 MiB request that never comes. Apache Kafka 4.4 does exactly the same (checked: it
  answers the EndTxn and closes the connection only when ``connections.max.idle.ms`` passes);
  so does Samsa: a request never received in full is bounded by ``connections.max.idle.ms``
  since the client's last byte (10 minutes by default; 3 s here).
- Alone, the ShareGroupDescribe v1 with a null group-id array closes its connection with one
  log line (Kafka's parser refuses the null too), and the LeaveGroup v1 whose member id is not
  valid UTF-8 is answered: Kafka decodes strings as Java does, malformed bytes becoming U+FFFD,
  and so does Samsa's codec now (it used to close the connection).
- The CreatePartitions v3 to 2,000 partitions was slow because each new log's placement counted
  every log of the broker (quadratic in partitions) and each partition's leader-epoch checkpoint
  was written, with an fsync, on the event loop. Now the files are made on a worker thread, the
  partitions applied in slices of the loop, and ``timeout_ms`` is honoured: REQUEST_TIMED_OUT
  when the work is not done by then, the work finishing in the background.
"""

from __future__ import annotations

import select
import socket
import struct
import time

import pytest

from samsa.protocol.api import decode_response, encode_request
from samsa.protocol.records import build_batch

from compat_helpers import WAIT, BrokerProcess, consume, create_topic, produce_values, raw_call, start, wait_until

IDLE_MS = 3000  # connections.max.idle.ms of this module's broker: the bound of a request never received whole

F = bytes.fromhex
END_TXN_V0_ONE_BYTE_LONG = F(
    "00000032001a00007bd8e487001361696f6b61666b612d70726f64756365722d320000667a2d61696f2d74780000000000000008000001")
SHARE_GROUP_DESCRIBE_V1_NULL_IDS = F("00000016004d00010f36e7f9000a73616d73612d66757a7a0000")
LEAVE_GROUP_V1_MANGLED_MEMBER = F(
    "0000004b000d00013a2a5aff000772646b61666b61000a667a2d636c6173736963002c72646b61666b612d34333333636436612d3164"
    "38382d7ffffffe2d613937612d313130646630386433346234")
CREATE_PARTITIONS_V3_TO_2000 = F(
    "00000033002500034d9b347400136b61666b612d707974686f6e2d332e302e3132000208667a2d6b702d74000007d0000000003a980000")

INVALID_REQUEST, REQUEST_TIMED_OUT, UNKNOWN_TOPIC_OR_PARTITION = 42, 7, 3


class Closed(Exception):
    pass


def _read(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        try:
            chunk = s.recv(n - len(buf))
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            raise Closed()
        buf += chunk
    return buf


def _read_frame(s: socket.socket) -> bytes:
    (size,) = struct.unpack(">i", _read(s, 4))
    return _read(s, size)


def _frame(api_key: int, version: int, body: dict, correlation_id: int = 1) -> bytes:
    return b"".join(bytes(c) for c in encode_request(api_key, version, correlation_id, "loop-test", body))


def _call(s: socket.socket, api_key: int, version: int, body: dict, correlation_id: int = 1) -> dict:
    s.sendall(_frame(api_key, version, body, correlation_id))
    return decode_response(api_key, version, _read_frame(s))[1]


def _partitions(port: int, topic: str) -> int | None:
    r = raw_call(port, 3, 12, {"topics": [{"name": topic, "topic_id": bytes(16)}],
                               "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
    t = r["topics"][0]
    return None if t["error_code"] else len(t["partitions"])


@pytest.fixture(scope="module")
def looped(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("fuzz-loop"), **{
        "auto.create.topics.enable": "false", "connections.max.idle.ms": str(IDLE_MS)})
    start(b)
    create_topic(b.bootstrap, "canary")
    b.acked = []
    yield b
    b.stop()


@pytest.fixture
def bk(looped):
    log_before = len(looped.log_text())
    yield looped
    assert looped.proc.poll() is None, "the broker process died"
    value = b"canary-%d" % len(looped.acked)
    assert produce_values(looped.bootstrap, "canary", [value], acks="all") == [(0, len(looped.acked))]
    looped.acked.append(value)
    assert [r.value for r in consume(looped.bootstrap, "canary")] == looped.acked
    new_log = looped.log_text()[log_before:]
    assert "Traceback" not in new_log, f"internal error in the broker:\n{new_log}"


# ------------------------------------------------------------------ the frames as the fuzzer sent them


@pytest.mark.parametrize("then", [SHARE_GROUP_DESCRIBE_V1_NULL_IDS, LEAVE_GROUP_V1_MANGLED_MEMBER],
                         ids=["share-group-describe", "leave-group"])
def test_after_the_long_end_txn_the_next_request_is_never_received_and_the_connection_closes_idle(bk, then):
    log_before = len(bk.log_text())
    with socket.create_connection(("127.0.0.1", bk.port), timeout=WAIT) as s:
        s.sendall(END_TXN_V0_ONE_BYTE_LONG)
        answer = decode_response(26, 0, _read_frame(s))[1]
        assert answer["error_code"] == INVALID_REQUEST  # an empty transactional id; Kafka 4.4 answers the same
        s.sendall(then)  # with the stray byte before it: a 16 MiB request, begun
        with pytest.raises(Closed):
            _read_frame(s)
    lines = [ln for ln in bk.log_text()[log_before:].splitlines()
             if "closing connection" in ln and f"connections.max.idle.ms = {IDLE_MS}" in ln]
    assert len(lines) == 1, lines


def test_share_group_describe_null_group_ids_alone_closes_that_connection(bk):
    log_before = len(bk.log_text())
    with socket.create_connection(("127.0.0.1", bk.port), timeout=WAIT) as s:
        s.sendall(SHARE_GROUP_DESCRIBE_V1_NULL_IDS)
        with pytest.raises(Closed):
            _read_frame(s)
    lines = [ln for ln in bk.log_text()[log_before:].splitlines()
             if "non-nullable field groupIds was serialized as null" in ln]
    assert len(lines) == 1, lines


def test_leave_group_member_id_not_utf8_alone_is_answered_as_any_unknown_member(bk):
    """Kafka 4.4 answers this frame (its strings decode malformed bytes as U+FFFD); so does Samsa,
    as it answers the same request with a well-formed member id nobody has."""
    with socket.create_connection(("127.0.0.1", bk.port), timeout=WAIT) as s:
        s.sendall(LEAVE_GROUP_V1_MANGLED_MEMBER)
        mangled = decode_response(13, 1, _read_frame(s))[1]
        clean = _call(s, 13, 1, {"group_id": "fz-classic", "member_id": "rdkafka-4333cd6a-1d88-0000-a97a-110df08d34b4"})
    assert mangled == clean


def test_create_partitions_to_2000_is_answered_within_its_timeout_and_completes(bk):
    create_topic(bk.bootstrap, "fz-kp-t")
    with socket.create_connection(("127.0.0.1", bk.port), timeout=WAIT) as s:
        s.sendall(CREATE_PARTITIONS_V3_TO_2000)
        (result,) = decode_response(37, 3, _read_frame(s))[1]["results"]
    assert result["name"] == "fz-kp-t" and result["error_code"] in (0, REQUEST_TIMED_OUT), result
    wait_until(lambda: _partitions(bk.port, "fz-kp-t") == 2000, "fz-kp-t with 2,000 partitions", timeout=120)
    assert produce_values(bk.bootstrap, "fz-kp-t", [b"last"], partition=1999) == [(1999, 0)]
    with socket.create_connection(("127.0.0.1", bk.port), timeout=WAIT) as s:
        r = _call(s, 20, 4, {"topic_names": ["fz-kp-t"], "timeout_ms": 30000})
    assert r["responses"][0]["error_code"] in (0, REQUEST_TIMED_OUT)
    wait_until(lambda: _partitions(bk.port, "fz-kp-t") is None, "fz-kp-t deleted")


# ------------------------------------------------------------------ timeout_ms, as Kafka honours it


def test_timeout_not_positive_is_request_timed_out_and_nothing_done(bk):
    """Kafka 4.4's controller answers every topic REQUEST_TIMED_OUT (no message) when the request's
    deadline is already past, and does nothing: checked for CreateTopics v5, CreatePartitions v3 and
    DeleteTopics v4 and v6 with timeout_ms 0 and -1."""
    create_topic(bk.bootstrap, "stays", partitions=1)
    with socket.create_connection(("127.0.0.1", bk.port), timeout=WAIT) as s:
        for timeout_ms in (0, -1):
            r = _call(s, 19, 5, {"topics": [{"name": "never", "num_partitions": 3, "replication_factor": 1,
                                             "assignments": [], "configs": []}],
                                 "timeout_ms": timeout_ms, "validate_only": False})
            assert [(t["name"], t["error_code"], t["error_message"]) for t in r["topics"]] == [
                ("never", REQUEST_TIMED_OUT, None)]
            r = _call(s, 37, 3, {"topics": [{"name": "stays", "count": 4, "assignments": None},
                                            {"name": "nonexistent", "count": 4, "assignments": None}],
                                 "timeout_ms": timeout_ms, "validate_only": False})
            assert [(t["error_code"], t["error_message"]) for t in r["results"]] == [(REQUEST_TIMED_OUT, None)] * 2
            r = _call(s, 20, 4, {"topic_names": ["stays", "nonexistent"], "timeout_ms": timeout_ms})
            assert [t["error_code"] for t in r["responses"]] == [REQUEST_TIMED_OUT] * 2
            r = _call(s, 20, 6, {"topics": [{"name": "stays", "topic_id": bytes(16)}], "timeout_ms": timeout_ms})
            assert [(t["error_code"], t["error_message"]) for t in r["responses"]] == [(REQUEST_TIMED_OUT, None)]
    assert _partitions(bk.port, "never") is None
    assert _partitions(bk.port, "stays") == 1


def test_create_topics_not_done_in_time_is_request_timed_out_then_appears(bk):
    """8,000 partitions cannot be laid out in 1 ms: the answer is REQUEST_TIMED_OUT, the topic
    (stored already) appears once its partitions are made, and a retry is TOPIC_ALREADY_EXISTS,
    as with Kafka's controller."""
    with socket.create_connection(("127.0.0.1", bk.port), timeout=WAIT) as s:
        r = _call(s, 19, 5, {"topics": [{"name": "late", "num_partitions": 8000, "replication_factor": 1,
                                         "assignments": [], "configs": []}], "timeout_ms": 1,
                             "validate_only": False})
        assert [(t["name"], t["error_code"]) for t in r["topics"]] == [("late", REQUEST_TIMED_OUT)]
        r = _call(s, 19, 5, {"topics": [{"name": "late", "num_partitions": 8000, "replication_factor": 1,
                                         "assignments": [], "configs": []}], "timeout_ms": 30000,
                             "validate_only": False})
        assert [(t["name"], t["error_code"]) for t in r["topics"]] == [("late", 36)]  # TOPIC_ALREADY_EXISTS
    wait_until(lambda: _partitions(bk.port, "late") == 8000, "the topic, once made", timeout=180)
    assert produce_values(bk.bootstrap, "late", [b"x"], partition=7999) == [(7999, 0)]
    _delete(bk, "late")


def test_delete_while_the_creation_goes_on_waits_for_it(bk):
    """A DeleteTopics (or CreatePartitions) of a topic whose creation outlived its request waits for
    that creation, within its own timeout, then applies; the name is free again at once after."""
    with socket.create_connection(("127.0.0.1", bk.port), timeout=180) as s:
        topic = {"name": "brief", "num_partitions": 2000, "replication_factor": 1, "assignments": [], "configs": []}
        r = _call(s, 19, 5, {"topics": [topic], "timeout_ms": 1, "validate_only": False})
        assert r["topics"][0]["error_code"] == REQUEST_TIMED_OUT
        r = _call(s, 20, 4, {"topic_names": ["brief"], "timeout_ms": 120000})
        assert r["responses"] == [{"name": "brief", "error_code": 0}]
        assert _partitions(bk.port, "brief") is None
        r = _call(s, 19, 5, {"topics": [dict(topic, num_partitions=1)], "timeout_ms": 30000, "validate_only": False})
        assert r["topics"][0]["error_code"] == 0
    assert _partitions(bk.port, "brief") == 1
    assert produce_values(bk.bootstrap, "brief", [b"again"]) == [(0, 0)]
    _delete(bk, "brief")


def _delete(bk, topic: str) -> None:
    with socket.create_connection(("127.0.0.1", bk.port), timeout=WAIT) as s:
        r = _call(s, 20, 4, {"topic_names": [topic], "timeout_ms": 60000})
    assert r["responses"][0]["error_code"] == 0
    assert _partitions(bk.port, topic) is None


# ------------------------------------------------------------------ nothing holds the loop


def _pending(s: socket.socket) -> bool:
    """Nothing to read on ``s`` yet (its request not answered)."""
    return not select.select([s], [], [], 0)[0]


def test_others_are_served_while_8000_partitions_are_created(bk):
    """While one client's CreateTopics of 8,000 partitions is under way (its answer not come yet),
    another client's ApiVersions and Produce are answered; then the topic is complete."""
    create_topic(bk.bootstrap, "others")
    with socket.create_connection(("127.0.0.1", bk.port), timeout=180) as creator, \
            socket.create_connection(("127.0.0.1", bk.port), timeout=WAIT) as other:
        started = time.perf_counter()
        creator.sendall(_frame(19, 5, {"topics": [{"name": "wide", "num_partitions": 8000, "replication_factor": 1,
                                                   "assignments": [], "configs": []}],
                                       "timeout_ms": 120000, "validate_only": False}))
        served, rounds, latencies = 0, 0, []
        while _pending(creator):
            batch = build_batch([(b"k", b"during-creation", int(time.time() * 1000))])
            produce = {"transactional_id": None, "acks": 1, "timeout_ms": 30000, "topic_data": [
                {"name": "others", "partition_data": [{"index": 0, "records": batch}]}]}
            t = time.perf_counter()
            versions = _call(other, 18, 3, {"client_software_name": "loop-test", "client_software_version": "1"},
                             correlation_id=2 * rounds + 1)
            latencies.append(time.perf_counter() - t)
            assert versions["error_code"] == 0
            t = time.perf_counter()
            r = _call(other, 0, 9, produce, correlation_id=2 * rounds + 2)
            latencies.append(time.perf_counter() - t)
            (p,) = r["responses"][0]["partition_responses"]
            assert (p["index"], p["error_code"], p["base_offset"]) == (0, 0, rounds)
            rounds += 1
            if _pending(creator):
                served += 1
            if served >= 20:
                break
        assert served >= 1, "no other request was answered while the topic was being created"
        print(f"\n{served} ApiVersions+Produce rounds answered during the creation; longest "
              f"{max(latencies) * 1000:.1f} ms, after {time.perf_counter() - started:.1f} s")
        (topic,) = decode_response(19, 5, _read_frame(creator))[1]["topics"]
        print(f"CreateTopics of 8,000 partitions answered after {time.perf_counter() - started:.1f} s")
    assert (topic["name"], topic["error_code"], topic["num_partitions"]) == ("wide", 0, 8000)
    assert _partitions(bk.port, "wide") == 8000
    _delete(bk, "wide")
