"""API keys, request/response headers and frames: bytes in, typed messages out, and back.

Sans-I/O: nothing here touches a socket. A frame is an int32 size followed by that many
bytes; a request frame starts with a request header, a response frame with a response
header. Which header version goes with which message version follows Kafka's rule: the
flexible versions of a message use the flexible header (request v2 / response v1), except
that ApiVersions responses always use response header v0 so that a client can read the
answer whatever version it asked for.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import lru_cache

from samsa.protocol import codec
from samsa.protocol.api_keys import ApiKey
from samsa.protocol.errors import InvalidRequestError
from samsa.protocol.varint import decode_uvarint

_SIZE = struct.Struct(">i")
_REQ_HEADER = struct.Struct(">hhi")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


@dataclass(frozen=True)
class Api:
    key: int
    name: str            # e.g. "Produce"
    min_version: int     # lowest version in the schema
    max_version: int
    flexible_from: int   # first flexible version (32767 if none)

    def flexible(self, version: int) -> bool:
        return version >= self.flexible_from

    def request_header_version(self, version: int) -> int:
        if self.key == ApiKey.CONTROLLED_SHUTDOWN and version == 0:  # ControlledShutdown v0 predates client ids
            return 0
        return 2 if self.flexible(version) else 1

    def response_header_version(self, version: int) -> int:
        if self.key == ApiKey.API_VERSIONS:
            return 0
        return 1 if self.flexible(version) else 0


@lru_cache(maxsize=None)
def apis() -> dict[int, Api]:
    out = {}
    for name, m in codec.schemas().items():
        if m["type"] != "request":
            continue
        lo, hi = codec.parse_versions(m["validVersions"])
        flex_lo, _ = codec.parse_versions(m.get("flexibleVersions"))
        if m.get("flexibleVersions", "none") == "none":
            flex_lo = 32767
        out[m["apiKey"]] = Api(m["apiKey"], name.removesuffix("Request"), lo, hi, flex_lo)
    return out


def api(key: int) -> Api:
    return apis()[key]


def api_by_name(name: str) -> Api:
    for a in apis().values():
        if a.name == name:
            return a
    raise KeyError(name)


@dataclass
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    header_version: int


def peek_request_header(frame) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id): the first 8 bytes of every request."""
    if len(frame) < 8:
        raise InvalidRequestError("request shorter than its header")
    return _REQ_HEADER.unpack_from(frame, 0)


def decode_request_header(frame, header_version: int) -> tuple[RequestHeader, int]:
    api_key, api_version, correlation_id = peek_request_header(frame)
    pos = 8
    client_id = None
    if header_version >= 1:
        (n,) = _I16.unpack_from(frame, pos)
        pos += 2
        if n >= 0:
            if pos + n > len(frame):
                raise InvalidRequestError("client id runs past the end of the request")
            client_id = str(frame[pos:pos + n], "utf-8", "replace")
            pos += n
    if header_version >= 2:
        pos = skip_tagged_fields(frame, pos)
    return RequestHeader(api_key, api_version, correlation_id, client_id, header_version), pos


def skip_tagged_fields(buf, pos: int) -> int:
    n, pos = decode_uvarint(buf, pos)
    for _ in range(n):
        _tag, pos = decode_uvarint(buf, pos)
        size, pos = decode_uvarint(buf, pos)
        pos += size
    return pos


def decode_request(frame) -> tuple[RequestHeader, dict]:
    """Decode a whole request frame (without its size prefix).

    Raises UnsupportedVersionError-free KeyError/ValueError for unknown keys/versions:
    the server checks those with :func:`peek_request_header` first.
    """
    api_key, version, _ = peek_request_header(frame)
    a = api(api_key)
    try:
        header, pos = decode_request_header(frame, a.request_header_version(version))
    except (struct.error, IndexError, ValueError) as e:
        raise InvalidRequestError(f"malformed {a.name} v{version} request header: {e}") from None
    body, end = codec.decode(a.name + "Request", version, frame, pos)
    return header, body


def encode_response(api_key: int, version: int, correlation_id: int, body: dict) -> list:
    """A size-prefixed response frame as a list of chunks for ``writelines``."""
    a = api(api_key)
    head = bytearray(4)
    head += _I32.pack(correlation_id)
    if a.response_header_version(version) >= 1:
        head.append(0)  # no tagged fields
    chunks = codec.encode(a.name + "Response", version, body, head)
    size = sum(len(c) for c in chunks) - 4
    _SIZE.pack_into(chunks[0], 0, size)
    return chunks


def encode_request(api_key: int, version: int, correlation_id: int, client_id: str | None, body: dict) -> list:
    """A size-prefixed request frame as a list of chunks (client side)."""
    a = api(api_key)
    head = bytearray(4)
    head += _REQ_HEADER.pack(api_key, version, correlation_id)
    hv = a.request_header_version(version)
    if hv >= 1:
        if client_id is None:
            head += b"\xff\xff"
        else:
            cid = client_id.encode()
            head += _I16.pack(len(cid)) + cid
    if hv >= 2:
        head.append(0)
    chunks = codec.encode(a.name + "Request", version, body, head)
    size = sum(len(c) for c in chunks) - 4
    _SIZE.pack_into(chunks[0], 0, size)
    return chunks


def decode_response(api_key: int, version: int, frame) -> tuple[int, dict]:
    """(correlation_id, body) of a response frame without its size prefix (client side)."""
    a = api(api_key)
    (correlation_id,) = _I32.unpack_from(frame, 0)
    pos = 4
    if a.response_header_version(version) >= 1:
        pos = skip_tagged_fields(frame, pos)
    body, _ = codec.decode(a.name + "Response", version, frame, pos)
    return correlation_id, body


def api_versions_v0_fallback(correlation_id: int, ranges: list[tuple[int, int, int]]) -> list:
    """The answer to an ApiVersions request in a version we don't know.

    Kafka answers in the v0 layout (error UNSUPPORTED_VERSION + the supported ranges) so
    that the client can retry with a version both sides speak.
    """
    body = {
        "error_code": 35,
        "api_keys": [{"api_key": k, "min_version": lo, "max_version": hi} for k, lo, hi in ranges],
    }
    return encode_response(ApiKey.API_VERSIONS, 0, correlation_id, body)
