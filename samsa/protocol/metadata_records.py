"""Records of KRaft's metadata log ``__cluster_metadata``, in Kafka's own format.

Pure encoding and decoding from Kafka's JSON schemas (``schema/messages.json``, the entries
of type ``metadata`` taken from the kafka-metadata 4.4.0 jar, and the KRaft control records
of kafka-clients): the storage tool writes the bootstrap snapshot with them, ``samsa
dump-log --cluster-metadata-decoder`` prints them.

- a metadata record's value is a frame: unsigned varints frame version (1), api key and
  record version, then the record's body (flexible, tagged fields); its key is null;
- a KRaft control record (in a control batch) has key ``version int16 (0) | type int16`` and
  its message as value: LeaderChange (2), SnapshotHeader (3), SnapshotFooter (4),
  KRaftVersion (5), KRaftVoters (6).
"""

from __future__ import annotations

import base64
import json
import struct
from functools import lru_cache
from typing import Any

from samsa.protocol import codec
from samsa.protocol.varint import decode_uvarint, encode_uvarint

FRAME_VERSION = 1
METADATA_TOPIC = "__cluster_metadata"

# control record type -> (the name Kafka's dump-log prints, the schema)
LEADER_CHANGE, SNAPSHOT_HEADER, SNAPSHOT_FOOTER, KRAFT_VERSION, KRAFT_VOTERS = 2, 3, 4, 5, 6
CONTROL_RECORDS = {
    LEADER_CHANGE: ("LeaderChange", "LeaderChangeMessage"),
    SNAPSHOT_HEADER: ("SnapshotHeader", "SnapshotHeaderRecord"),
    SNAPSHOT_FOOTER: ("SnapshotFooter", "SnapshotFooterRecord"),
    KRAFT_VERSION: ("KRaftVersion", "KRaftVersionRecord"),
    KRAFT_VOTERS: ("KRaftVoters", "VotersRecord"),
}
_CONTROL_KEY = struct.Struct(">hh")


class MetadataRecordError(ValueError):
    """Bytes that are not a metadata record (Kafka: MetadataParseException)."""


@lru_cache(maxsize=None)
def by_api_key() -> dict[int, str]:
    return {m["apiKey"]: name for name, m in codec.schemas().items() if m["type"] == "metadata"}


def api_key(name: str) -> int:
    return codec.schemas()[name]["apiKey"]


def highest_version(name: str) -> int:
    return codec.parse_versions(codec.schemas()[name]["validVersions"])[1]


def encode(name: str, version: int, data: dict) -> bytes:
    """A metadata record's value: the frame and the body of ``name`` at ``version``."""
    return (encode_uvarint(FRAME_VERSION) + encode_uvarint(api_key(name)) + encode_uvarint(version)
            + codec.encode_bytes(name, version, data))


def decode(value: bytes) -> tuple[str, int, dict]:
    """``(schema name, version, data)`` of a metadata record's value."""
    try:
        frame, p = decode_uvarint(value, 0)
        if frame != FRAME_VERSION:
            raise MetadataRecordError(f"Could not deserialize metadata record due to unknown frame version {frame}")
        key, p = decode_uvarint(value, p)
        version, p = decode_uvarint(value, p)
    except IndexError:
        raise MetadataRecordError("Failed to read variable-length integer of a metadata record") from None
    name = by_api_key().get(key)
    if name is None:
        raise MetadataRecordError(f"Unknown metadata id {key}")
    data, _ = codec.decode(name, version, value, p)
    return name, version, data


def control_key(kind: int) -> bytes:
    return _CONTROL_KEY.pack(0, kind)


def control_kind(key: bytes) -> int:
    return _CONTROL_KEY.unpack_from(key)[1]


def encode_control(kind: int, data: dict) -> tuple[bytes, bytes]:
    """``(key, value)`` of a KRaft control record (its message at version 0)."""
    return control_key(kind), codec.encode_bytes(CONTROL_RECORDS[kind][1], 0, {"version": 0, **data})


def decode_control(key: bytes, value: bytes) -> tuple[int, dict]:
    kind = control_kind(key)
    if kind not in CONTROL_RECORDS:
        raise MetadataRecordError(f"Unknown control record type {kind}")
    data, _ = codec.decode(CONTROL_RECORDS[kind][1], 0, value)
    return kind, data


# ---------------------------------------------------------------------------- JSON as Kafka prints it

def type_name(name: str) -> str:
    """FeatureLevelRecord -> FEATURE_LEVEL_RECORD (Kafka's MetadataRecordType)."""
    return codec.snake(name).upper()


def _uuid(b: bytes | None) -> str:
    return base64.urlsafe_b64encode(b or bytes(16)).decode().rstrip("=")


def _json_fields(fields: list, data: dict, version: int, structs: dict) -> dict:
    out: dict[str, Any] = {}
    for f in fields:
        if not codec._in(f.get("versions"), version):
            continue
        key = codec.snake(f["name"])
        value = data.get(key)
        t = f["type"]
        if "taggedVersions" in f and (value is None or value == _default(f)):
            continue  # a tagged field at its default is not written, nor printed
        out[f["name"][0].lower() + f["name"][1:]] = _json_value(t, value, f, version, structs)
    return out


def _default(f: dict) -> Any:
    t, d = f["type"], f.get("default")
    if d == "null":
        return None
    if t.startswith("[]"):
        return []
    if t in ("int8", "int16", "int32", "int64", "uint16", "uint32"):
        return int(d, 0) if d else 0
    if t == "float64":
        return float(d) if d else 0.0
    if t == "bool":
        return d == "true"
    if t == "string":
        return d or ""
    if t == "uuid":
        return bytes(16)
    return d


def _json_value(t: str, value: Any, f: dict, version: int, structs: dict) -> Any:
    if value is None:
        return None
    if t.startswith("[]"):
        elem = t[2:]
        return [_json_value(elem, v, f, version, structs) for v in value]
    if t == "uuid":
        return _uuid(value)
    if t in ("bytes", "records"):
        return base64.b64encode(bytes(value)).decode()
    if t in ("int8", "int16", "int32", "int64", "uint16", "uint32", "float64", "bool", "string"):
        return value
    sub = f.get("fields") or structs[t]["fields"]
    return _json_fields(sub, value, version, structs)


def to_json(name: str, version: int, data: dict) -> dict:
    """The record's fields as Kafka's generated JSON converters write them (camelCase names)."""
    schema = codec.schemas()[name]
    structs = {c["name"]: c for c in schema.get("commonStructs", [])}
    return _json_fields(schema["fields"], data, version, structs)


def payload_json(value: bytes) -> str:
    """What ``kafka-dump-log --cluster-metadata-decoder`` prints after ``payload: ``."""
    name, version, data = decode(value)
    return json.dumps({"type": type_name(name), "version": version, "data": to_json(name, version, data)},
                      separators=(",", ":"), ensure_ascii=False)


def control_json(key: bytes, value: bytes) -> str:
    """What it prints for a KRaft control record: ``SnapshotHeader {"version":0,...}``."""
    kind, data = decode_control(key, value)
    label, schema = CONTROL_RECORDS[kind]
    if kind == LEADER_CHANGE:
        label += ":"  # as Kafka's dump-log prints it (the snapshot's control records have no colon)
    return f"{label} {json.dumps(to_json(schema, 0, data), separators=(',', ':'), ensure_ascii=False)}"
