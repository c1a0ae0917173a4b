"""What an independent fuzzing run found (issue 24), each frame replayed byte for byte over TCP.

The frames are the fuzzer's own (hex, size prefix included). Before the fixes one of them
(CreateTopics or CreatePartitions asking for ~2^30 partitions) made the broker build a
replica list per partition on its event loop until the kernel killed it, and eight others
ended in a traceback and a dropped connection. Now each gets Kafka's answer: an error code
in the response, or, where Kafka's own request parser refuses the bytes (a null where the
schema allows none), that one connection closed with one log line. Every test ends with the
broker serving a well-behaved client, every acknowledged canary still there, and no
traceback in the broker's log.
"""

from __future__ import annotations

import socket
import struct

import pytest

from samsa.protocol.api import decode_response, encode_request

from compat_helpers import WAIT, BrokerProcess, consume, create_topic, produce_values, raw_call, start

CANARY = "canary"
SMALL = "small"  # the fuzzer's topic: CreatePartitions and Produce frames name it

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'user_admin="admin-secret";')

CORRUPT_MESSAGE, INVALID_REQUEST, POLICY_VIOLATION = 2, 42, 44

F = bytes.fromhex
CREATE_TOPICS_V0_BIG = F("000000260013000000000001000178000000010003626967400000010001000000000000000000002710")
CREATE_PARTITIONS_V0_BIG = F("000000230025000000000002000178000000010005736d616c6c40000000ffffffff0000271000")
PRODUCE_V3_LONG_VARINT = F(
    "000000720000000300000001000178ffff000100001388000000010005736d616c6c00000001000000000000004800000000000000"
    "000000003c00000000021d29ad8a00000000000000000000000000000000000000000000ffffffffffffffffffffffffffff000000"
    "01ffffffffffffffffffffff")
SASL_HANDSHAKE_V1_NULL = F("0000000d0011000100000001000178ffff")
SASL_HANDSHAKE_V1_PLAIN = F("000000180011000100000002000772646b61666b610005504c41494e")
SASL_AUTHENTICATE_V1_MINUS_2 = F(
    "000000280024000100000003000772646b61666b61fffffffe0061646d696e0001646d006e2d736563726574")
ADD_OFFSETS_TO_TXN_V0_NULL_GROUP = F("000000190019000000000001ffff00017400000000000000010000ffff")
DESCRIBE_CONFIGS_V1_NULL_BROKER = F(
    "0000002c0020000100000009000772646b61666b6100000002020007736500012d6232ffffffff048000000000000000")
ALTER_CLIENT_QUOTAS_V1_NAN = F(
    "0000004a0031000100000005000b73616d73612d61646d696e0002020a636c69656e742d69640666757a7a710002137072"
    "6f64756365725f627974655f726174657fffffffffffffff0000000000")
CREATE_ACLS_V2_OPERATION_35 = F(
    "0000002e001e000208000015000772646b61666b6100020208736565642d6232030b557365723a616c696365022a23030000")
# ListGroups v4 (flexible): header v2 (api key 16, version 4, correlation id 1, client id "x", no tags),
# then StatesFilter as a null compact array (0) and no tags.
LIST_GROUPS_V4_NULL_STATES = struct.pack(">i", 14) + F("001000040000000100017800") + b"\x00\x00"


class Closed(Exception):
    pass


def exchange(port: int, *frames: bytes) -> list[bytes]:
    """Send each frame on one connection and read its answer; Closed when the broker closes it."""
    answers = []
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT) as s:
        for f in frames:
            s.sendall(f)
            answers.append(_read_frame(s))
    return answers


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


def answer(api_key: int, version: int, frame: bytes, port: int) -> dict:
    (raw,) = exchange(port, frame)
    return decode_response(api_key, version, raw)[1]


def call(port: int, api_key: int, version: int, body: dict) -> dict:
    return answer(api_key, version, b"".join(bytes(c) for c in encode_request(api_key, version, 1, "fuzz", body)),
                  port)


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory):
    """A PLAINTEXT and a SASL_PLAINTEXT listener, an authorizer on (as the fuzzing run had)."""
    plain, sasl = (BrokerProcess(tmp_path_factory.mktemp("ports")).port for _ in range(2))
    b = BrokerProcess(tmp_path_factory.mktemp("fuzz-findings"), port=plain, **{
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:ANONYMOUS;User:admin",
        "auto.create.topics.enable": "false",
    })
    b.sasl_port = sasl
    start(b)
    create_topic(b.bootstrap, CANARY)
    create_topic(b.bootstrap, SMALL)
    b.acked = []
    yield b
    b.stop()


@pytest.fixture
def bk(fuzzed):
    log_before = len(fuzzed.log_text())
    yield fuzzed
    assert fuzzed.proc.poll() is None, "the broker process died"
    value = b"canary-%d" % len(fuzzed.acked)
    assert produce_values(fuzzed.bootstrap, CANARY, [value], acks="all") == [(0, len(fuzzed.acked))]
    fuzzed.acked.append(value)
    assert [r.value for r in consume(fuzzed.bootstrap, CANARY)] == fuzzed.acked
    new_log = fuzzed.log_text()[log_before:]
    assert "Traceback" not in new_log, f"internal error in the broker:\n{new_log}"


def _partitions(b, topic: str) -> int | None:
    r = raw_call(b.port, 3, 12, {"topics": [{"name": topic, "topic_id": bytes(16)}],
                                 "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
    t = r["topics"][0]
    return None if t["error_code"] else len(t["partitions"])


def _closed_with_one_line(b, port: int, frames: tuple[bytes, ...], answered: int, why: str) -> None:
    log_before = len(b.log_text())
    got: list = []
    with pytest.raises(Closed):
        with socket.create_connection(("127.0.0.1", port), timeout=WAIT) as s:
            for f in frames:
                s.sendall(f)
                got.append(_read_frame(s))
    assert len(got) == answered
    lines = [ln for ln in b.log_text()[log_before:].splitlines() if why in ln]
    assert len(lines) == 1, lines


# ------------------------------------------------------------------ a partition count near 2^30


def test_create_topics_near_2_to_30_partitions_is_refused_before_any_work(bk):
    r = answer(19, 0, CREATE_TOPICS_V0_BIG, bk.port)
    assert [(t["name"], t["error_code"]) for t in r["topics"]] == [("big", POLICY_VIOLATION)]
    assert _partitions(bk, "big") is None


@pytest.mark.parametrize("validate_only", [False, True])
def test_create_topics_budget_is_per_request(bk, validate_only):
    """Kafka's controller counts the partitions of the whole request: two topics of 6,000 are refused
    together, with its message; a request within the bound still creates its topics."""
    topics = [{"name": f"budget-{i}-{validate_only}", "num_partitions": 6000, "replication_factor": 1,
               "assignments": [], "configs": []} for i in range(2)]
    r = call(bk.port, 19, 7, {"topics": topics, "timeout_ms": 10000, "validate_only": validate_only})
    assert [(t["error_code"], t["error_message"]) for t in r["topics"]] == \
        [(POLICY_VIOLATION, "Excessively large number of partitions per request.")] * 2
    r = call(bk.port, 19, 7, {"topics": [dict(topics[0], num_partitions=0x40000001)], "timeout_ms": 10000,
                              "validate_only": validate_only})
    assert r["topics"][0]["error_code"] == POLICY_VIOLATION
    r = call(bk.port, 19, 7, {"topics": [dict(topics[0], num_partitions=2)], "timeout_ms": 10000,
                              "validate_only": validate_only})
    assert r["topics"][0]["error_code"] == 0
    assert _partitions(bk, topics[0]["name"]) == (None if validate_only else 2)


def test_create_partitions_near_2_to_30_is_refused_before_any_work(bk):
    r = answer(37, 0, CREATE_PARTITIONS_V0_BIG, bk.port)
    assert [(t["name"], t["error_code"], t["error_message"]) for t in r["results"]] == [
        (SMALL, POLICY_VIOLATION, "Excessively large number of additional partitions per request.")]
    r = call(bk.port, 37, 3, {"topics": [{"name": SMALL, "count": 0x40000000, "assignments": None}],
                              "timeout_ms": 10000, "validate_only": True})
    assert r["results"][0]["error_code"] == POLICY_VIOLATION
    assert _partitions(bk, SMALL) == 1


# ------------------------------------------------------------------ tracebacks, now error codes


def test_produce_record_length_varint_over_10_bytes_is_corrupt_message(bk):
    """Kafka 4.4 answers UNKNOWN_SERVER_ERROR here (its varint reader's IllegalArgumentException escapes
    the record validation, with a stack trace in its log); Samsa answers what it answers for every other
    malformed record in a batch (GAPS.md)."""
    r = answer(0, 3, PRODUCE_V3_LONG_VARINT, bk.port)
    [p] = [p for t in r["responses"] for p in t["partition_responses"]]
    assert p["error_code"] == CORRUPT_MESSAGE


def test_alter_client_quotas_nan_is_invalid_request(bk):
    r = answer(49, 1, ALTER_CLIENT_QUOTAS_V1_NAN, bk.port)
    assert [(e["error_code"], e["error_message"]) for e in r["entries"]] == [
        (INVALID_REQUEST, "Quota producer_byte_rate must be a finite number")]  # Kafka 4.4's answer
    for value in (float("inf"), float("-inf"), 2.0 ** 64):
        r = call(bk.port, 49, 1, {"entries": [{"entity": [{"entity_type": "client-id", "entity_name": "fuzzq"}],
                                              "ops": [{"key": "producer_byte_rate", "value": value,
                                                       "remove": False}]}], "validate_only": False})
        assert r["entries"][0]["error_code"] == INVALID_REQUEST, value
    r = call(bk.port, 48, 1, {"components": [], "strict": False})
    assert r["error_code"] == 0 and r["entries"] == []  # nothing stored


@pytest.mark.parametrize("operation", [35, -2])
def test_create_acls_unknown_operation_is_invalid_request(bk, operation):
    frame = CREATE_ACLS_V2_OPERATION_35
    if operation != 35:
        frame = frame.replace(b"\x02\x2a\x23\x03\x00\x00", b"\x02\x2a" + struct.pack(">b", operation) + b"\x03\x00\x00")
    r = answer(30, 2, frame, bk.port)
    assert [(x["error_code"], x["error_message"]) for x in r["results"]] == [(INVALID_REQUEST,
                                                                              "Invalid operation UNKNOWN")]
    r = call(bk.port, 29, 2, {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
                              "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1})
    assert r["error_code"] == 0 and r["resources"] == []  # nothing stored


# ------------------------------------------------------------------ nulls Kafka never allows: one line, closed


@pytest.mark.parametrize("sasl, frames, answered, field", [
    (True, (SASL_HANDSHAKE_V1_NULL,), 0, "mechanism"),
    (True, (SASL_HANDSHAKE_V1_PLAIN, SASL_AUTHENTICATE_V1_MINUS_2), 1, "authBytes"),
    (False, (ADD_OFFSETS_TO_TXN_V0_NULL_GROUP,), 0, "groupId"),
    (False, (DESCRIBE_CONFIGS_V1_NULL_BROKER,), 0, "resourceName"),
    (False, (LIST_GROUPS_V4_NULL_STATES,), 0, "statesFilter"),
], ids=["sasl-handshake-null-mechanism", "sasl-authenticate-bytes-length-minus-2", "add-offsets-null-group",
        "describe-configs-null-broker-name", "list-groups-null-states-filter"])
def test_null_in_non_nullable_field_closes_that_connection(bk, sasl, frames, answered, field):
    """Before authentication too (the first two, on the SASL listener): no traceback to flood the log.
    Kafka 4.4 closes these connections too, naming the field as here."""
    _closed_with_one_line(bk, bk.sasl_port if sasl else bk.port, frames, answered,
                          f"non-nullable field {field} was serialized as null")


def test_acl_codes_kafka_does_not_know(bk):
    """Kafka's parser refuses a CreateAcls, DeleteAcls or DescribeAcls holding the code 0 (UNKNOWN)
    and closes the connection; an unknown non-zero code in a DeleteAcls filter is INVALID_REQUEST for
    that filter ("Unknown entryFilter.")."""
    zero_op = CREATE_ACLS_V2_OPERATION_35.replace(b"\x02\x2a\x23\x03\x00\x00", b"\x02\x2a\x00\x03\x00\x00")
    _closed_with_one_line(bk, bk.port, (zero_op,), 0, "CreatableAcls contain unknown elements")
    delete = {"filters": [{"resource_type_filter": 2, "resource_name_filter": "t", "pattern_type_filter": 3,
                           "principal_filter": None, "host_filter": None, "operation": 35, "permission_type": 3}]}
    r = call(bk.port, 31, 2, delete)
    assert [(f["error_code"], f["error_message"]) for f in r["filter_results"]] == [
        (INVALID_REQUEST, "Unknown entryFilter.")]
    delete["filters"][0]["operation"] = 0
    frame = b"".join(bytes(c) for c in encode_request(31, 2, 1, "fuzz", delete))
    _closed_with_one_line(bk, bk.port, (frame,), 0, "Filters contain UNKNOWN elements")


@pytest.mark.parametrize("version", [10, 11])
def test_metadata_topic_id_before_v12_is_invalid_request(bk, version):
    """Found by the seeded fuzzer (seed 5): a null topic name in Metadata v10/v11 made the broker build
    a response it could not encode. Kafka 4.4 answers each topic INVALID_REQUEST, with no brokers."""
    for topic in ({"name": None, "topic_id": b"\x01" * 16}, {"name": SMALL, "topic_id": b"\x01" * 16}):
        r = call(bk.port, 3, version, {"topics": [topic], "allow_auto_topic_creation": False,
                                       "include_topic_authorized_operations": False})
        assert r["brokers"] == [] and [(t["error_code"], t["name"]) for t in r["topics"]] == [
            (INVALID_REQUEST, topic["name"] or "")]


def test_tagged_field_size_near_2_to_63_closes_that_connection(bk):
    """Found by the seeded fuzzer (seed 7): CreateTopics v5 whose topic carries a tagged field of
    size 2^63-1 ended in an OverflowError traceback; now the frame is refused as malformed."""
    body = bytes.fromhex("02027400000001000101010100ffffffffffffffff7f000003e80000")
    header = struct.pack(">hhih", 19, 5, 1, 1) + b"x" + b"\x00"
    frame = struct.pack(">i", len(header) + len(body)) + header + body
    _closed_with_one_line(bk, bk.port, (frame,), 0, "a tagged field runs past the end of the message")
