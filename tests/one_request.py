"""One Kafka request over a fresh TCP connection and its decoded answer: for tests that ask a
broker something no client exposes (the share-group tests, the KRaft controller tests)."""

from __future__ import annotations

import socket
import struct

from samsa.protocol.api import decode_response, encode_request


def round_trip(bootstrap: str, api_key: int, version: int, body: dict, client_id: str = "tests",
               timeout: float = 10) -> dict:
    """``bootstrap`` is one ``host:port``: that broker answers (a one-broker cluster's is every group's
    coordinator). ``timeout``: seconds for the connection and for each read of the answer."""
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall(b"".join(encode_request(api_key, version, 1, client_id, body)))
        size = struct.unpack(">i", _read(s, 4))[0]
        return decode_response(api_key, version, _read(s, size))[1]


def _read(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return buf
