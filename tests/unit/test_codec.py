"""The schema-compiled codec against an independent implementation (kafka-python 3's).

For every message kafka-python also knows, in every version both know, a sample message
with non-default values is encoded by Samsa, decoded and re-encoded by kafka-python, and
the bytes must be identical; then Samsa decodes them back to the same dict.
"""

from __future__ import annotations

import importlib
import io
import pkgutil
import random

import pytest

from samsa.protocol import api, codec
from schema_samples import sample

kafka_protocol = pytest.importorskip("kafka.protocol")


def _kafka_python_classes() -> dict[str, type]:
    from kafka.protocol.api_message import ApiMessage
    found: dict[str, type] = {}
    for mod in pkgutil.walk_packages(kafka_protocol.__path__, "kafka.protocol."):
        if ".old" in mod.name or "generate" in mod.name:
            continue
        try:
            m = importlib.import_module(mod.name)
        except Exception:
            continue
        for obj in vars(m).values():
            if isinstance(obj, type) and issubclass(obj, ApiMessage) and obj is not ApiMessage:
                try:
                    found[obj.name] = obj
                except Exception:
                    pass
    return found


KP = _kafka_python_classes()


CASES = []
for _name, _m in sorted(codec.schemas().items()):
    if _m["type"] not in ("request", "response") or _name not in KP:
        continue
    _lo, _hi = codec.parse_versions(_m["validVersions"])
    _klo, _khi = KP[_name].min_version, KP[_name].max_version
    for _v in range(max(_lo, _klo), min(_hi, _khi) + 1):
        CASES.append((_name, _v))


def test_oracle_covers_the_broker_apis():
    names = {n for n, _ in CASES}
    for wanted in ("ProduceRequest", "FetchResponse", "MetadataResponse", "ApiVersionsResponse",
                   "CreateTopicsRequest", "DescribeConfigsResponse", "ListOffsetsResponse"):
        assert wanted in names
    assert len(CASES) > 300


@pytest.mark.parametrize("name,version", CASES)
def test_same_bytes_as_kafka_python(name: str, version: int):
    m = codec.schemas()[name]
    structs = {c["name"]: c for c in m.get("commonStructs", [])}
    flexible = codec._in(m.get("flexibleVersions"), version)
    obj = sample(m["fields"], structs, version, flexible, random.Random(hash((name, version)) & 0xFFFF))
    if name == "ApiVersionsResponse":
        obj["error_code"] = 0  # kafka-python reads any error here as the v0 fallback layout
    ours = codec.encode_bytes(name, version, obj)
    theirs_obj = KP[name].decode(io.BytesIO(ours), version=version)
    theirs_obj._header = None
    theirs = bytes(theirs_obj.encode(version=version))
    assert theirs == ours
    back, end = codec.decode(name, version, memoryview(ours))
    assert end == len(ours)
    assert codec.encode_bytes(name, version, back) == ours


def test_unknown_tagged_fields_are_skipped():
    # Metadata v12 request with an extra tagged field (tag 7, 3 bytes) on the top level.
    body = codec.encode_bytes("MetadataRequest", 12, {"topics": None})
    assert body[-1] == 0
    with_tag = body[:-1] + bytes([1, 7, 3, 1, 2, 3])
    decoded, end = codec.decode("MetadataRequest", 12, memoryview(with_tag))
    assert end == len(with_tag) and decoded["topics"] is None


def test_request_frame_round_trip():
    chunks = api.encode_request(3, 12, 42, "me", {"topics": [{"name": "x"}]})
    frame = b"".join(chunks)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    header, body = api.decode_request(bytearray(frame[4:]))
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (3, 12, 42, "me")
    assert body["topics"][0]["name"] == "x"


def test_truncated_message_is_invalid_request():
    full = codec.encode_bytes("CreateTopicsRequest", 7, {"topics": [{"name": "abc", "num_partitions": 3}]})
    from samsa.protocol.errors import InvalidRequestError
    with pytest.raises(InvalidRequestError):
        codec.decode("CreateTopicsRequest", 7, memoryview(full[:10]))


def test_a_null_where_kafka_allows_none_is_refused_in_a_request():
    """As Kafka's generated readers: a negative length for a non-nullable field, or an array longer
    than the bytes left, refuses the request (INVALID_REQUEST) before anything is allocated."""
    import struct as _struct

    from samsa.protocol import codec as _codec
    from samsa.protocol.errors import InvalidRequestError
    with pytest.raises(InvalidRequestError, match="non-nullable field groupId was serialized as null"):
        _codec.decode("AddOffsetsToTxnRequest", 0, b"\x00\x01t" + bytes(8) + b"\x00\x00" + b"\xff\xff")
    with pytest.raises(InvalidRequestError, match="Tried to allocate a collection of size 1073741825"):
        _codec.decode("MetadataRequest", 1, _struct.pack(">i", 0x40000001) + b"\x00\x01a")
    with pytest.raises(InvalidRequestError, match="non-nullable field statesFilter"):
        _codec.decode("ListGroupsRequest", 4, b"\x00\x00")
    assert _codec.decode("ListGroupsRequest", 4, b"\x01\x00")[0]["states_filter"] == []


def test_a_tagged_field_longer_than_the_message_is_refused():
    """Found by the seeded fuzzer (seed 7): a tagged field's size near 2^63 moved the read position
    past what Python can index (OverflowError, a traceback)."""
    from samsa.protocol import codec as _codec
    from samsa.protocol.errors import InvalidRequestError
    frame = bytes.fromhex("02027400000001000101010100ffffffffffffffff7f000003e80000")
    with pytest.raises(InvalidRequestError, match="tagged field runs past the end"):
        _codec.decode("CreateTopicsRequest", 5, frame)
