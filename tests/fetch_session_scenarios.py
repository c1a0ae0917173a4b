"""Fetch-session (KIP-227) scenarios on raw requests through Samsa's codec, runnable against
any broker: ``tests/differential/test_fetch_sessions.py`` runs them against Apache Kafka and
Samsa side by side; ``tests/compat/test_fetch_sessions.py`` against Samsa, compared with what
Kafka answered when they were written (``EXPECTED``); by hand:

    .venv/bin/python tests/fetch_session_scenarios.py localhost:19092

prints one line per step: what was sent and the (error code, session id != 0, partitions in
the answer) that came back. ``EXPECTED`` holds what Kafka 4.4.0 answered.
"""

from __future__ import annotations

import os
import socket
import struct
import sys
import time
import uuid

from samsa.protocol.api import decode_response, encode_request
from samsa.protocol.records import Record, build_batch

FETCH, PRODUCE, METADATA, CREATE_TOPICS = 1, 0, 3, 19


class Raw:
    def __init__(self, host: str, port: int):
        self.sock = socket.create_connection((host, port), timeout=30)
        self.cid = 0

    def call(self, api_key: int, version: int, body: dict) -> dict:
        self.cid += 1
        self.sock.sendall(b"".join(bytes(c) for c in encode_request(api_key, version, self.cid, "fs-scenarios", body)))
        size = struct.unpack(">i", self._read(4))[0]
        cid, resp = decode_response(api_key, version, self._read(size))
        assert cid == self.cid
        return resp

    def _read(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk
        return bytes(buf)

    def close(self) -> None:
        self.sock.close()


def _part(index: int, offset: int = 0) -> dict:
    return {"partition": index, "current_leader_epoch": -1, "fetch_offset": offset, "last_fetched_epoch": -1,
            "log_start_offset": -1, "partition_max_bytes": 1 << 20}


def fetch(raw: Raw, version: int, session_id: int, epoch: int, topics: list, forgotten: list | None = None) -> dict:
    return raw.call(FETCH, version, {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
        "session_id": session_id, "session_epoch": epoch, "topics": topics,
        "forgotten_topics_data": forgotten or [], "rack_id": ""})


def summary(resp: dict) -> tuple[int, bool, list]:
    """(error code, whether a session id came back, [(partition, high watermark, has records)])."""
    parts = sorted((p["partition_index"], p["high_watermark"], bool(p["records"]))
                   for t in resp["responses"] for p in t["partitions"])
    return resp["error_code"], resp["session_id"] != 0, parts


def produce_one(raw: Raw, topic: str, partition: int) -> None:
    batch = bytes(build_batch([Record(0, int(time.time() * 1000), None, b"v", [])]))
    resp = raw.call(PRODUCE, 9, {"acks": -1, "timeout_ms": 10000, "transactional_id": None, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": batch}]}]})
    code = resp["responses"][0]["partition_responses"][0]["error_code"]
    assert code == 0, code


def create_topic(raw: Raw, topic: str, partitions: int) -> uuid.UUID:
    resp = raw.call(CREATE_TOPICS, 7, {"topics": [{"name": topic, "num_partitions": partitions,
                                                    "replication_factor": 1, "assignments": [], "configs": []}],
                                       "timeout_ms": 30000, "validate_only": False})
    assert resp["topics"][0]["error_code"] == 0, resp
    deadline = time.time() + 30
    while True:
        meta = raw.call(METADATA, 12, {"topics": [{"topic_id": None, "name": topic}],
                                       "allow_auto_topic_creation": False,
                                       "include_topic_authorized_operations": False})
        t = meta["topics"][0]
        if t["error_code"] == 0 and len(t["partitions"]) == partitions and all(
                p["leader_id"] >= 0 for p in t["partitions"]):
            # led in the metadata; fetchable once the leader itself has taken over (Kafka: moments later)
            ready = fetch(raw, 12, 0, -1, [{"topic": topic, "partitions": [_part(i) for i in range(partitions)]}])
            if all(p["error_code"] == 0 for r in ready["responses"] for p in r["partitions"]):
                return t["topic_id"]
        assert time.time() < deadline, meta
        time.sleep(0.1)


def run(host: str, port: int, topic: str) -> list[tuple[str, tuple]]:
    """The scenario's steps and what each answered."""
    raw = Raw(host, port)
    out: list[tuple[str, tuple]] = []
    try:
        topic_id = create_topic(raw, topic, 2)
        named = [{"topic": topic, "partitions": [_part(0), _part(1)]}]
        by_id = [{"topic_id": topic_id, "partitions": [_part(0), _part(1)]}]

        r = fetch(raw, 12, 0, 0, named)
        sid = r["session_id"]
        out.append(("v12 full fetch, epoch 0", summary(r)))
        out.append(("v12 incremental, nothing changed", summary(fetch(raw, 12, sid, 1, []))))
        produce_one(raw, topic, 1)
        out.append(("v12 incremental after a record in partition 1", summary(fetch(raw, 12, sid, 2, []))))
        out.append(("v12 incremental, same again (hw unchanged)", summary(fetch(raw, 12, sid, 3, []))))
        out.append(("v12 incremental, wrong epoch 7", summary(fetch(raw, 12, sid, 7, []))))
        out.append(("v12 incremental, right epoch after the error", summary(fetch(raw, 12, sid, 4, []))))
        out.append(("v12 incremental, partition 1 moved to offset 1",
                    summary(fetch(raw, 12, sid, 5, [{"topic": topic, "partitions": [_part(1, 1)]}]))))
        out.append(("v13 incremental on a v12 session", summary(fetch(raw, 13, sid, 6, []))))
        out.append(("v12 incremental forgetting partition 0",
                    summary(fetch(raw, 12, sid, 6, [], [{"topic": topic, "partitions": [0]}]))))
        produce_one(raw, topic, 0)
        out.append(("v12 incremental after a record in forgotten partition 0", summary(fetch(raw, 12, sid, 7, []))))
        out.append(("v12 incremental forgetting the last partition",
                    summary(fetch(raw, 12, sid, 8, [], [{"topic": topic, "partitions": [1]}]))))
        out.append(("v12 incremental on the session that ended", summary(fetch(raw, 12, sid, 9, []))))
        out.append(("v12 unknown session id", summary(fetch(raw, 12, 0x7ffffff0 if sid != 0x7ffffff0 else 1, 1, []))))
        out.append(("v12 session id 0, epoch 1", summary(fetch(raw, 12, 0, 1, []))))

        r = fetch(raw, 13, 0, 0, by_id)
        sid = r["session_id"]
        out.append(("v13 full fetch, epoch 0", summary(r)))
        out.append(("v13 incremental, nothing changed", summary(fetch(raw, 13, sid, 1, []))))
        out.append(("v12 incremental on a v13 session", summary(fetch(raw, 12, sid, 2, []))))
        out.append(("v13 close: epoch -1", summary(fetch(raw, 13, sid, -1, by_id))))
        out.append(("v13 incremental on the closed session", summary(fetch(raw, 13, sid, 2, []))))
        r = fetch(raw, 13, 0, 0, by_id)
        sid2 = r["session_id"]
        out.append(("v13 new session, epoch 0", summary(r)))
        out.append(("v13 (id, 0): reopen replaces the session", summary(fetch(raw, 13, sid2, 0, by_id))))
        out.append(("v13 incremental on the replaced session id", summary(fetch(raw, 13, sid2, 1, []))))
        out.append(("v11 sessionless full fetch, epoch -1",
                    summary(fetch(raw, 11, 0, -1, named))))
    finally:
        raw.close()
    return out


# What Apache Kafka 4.4.0 answered (localhost:19092, 2026-11-26), step by step:
# (error code, session id given, [(partition, high watermark, records?)]). 70 is
# FETCH_SESSION_ID_NOT_FOUND, 71 INVALID_FETCH_SESSION_EPOCH, 106 FETCH_SESSION_TOPIC_ID_ERROR.
EXPECTED = [
    ("v12 full fetch, epoch 0", (0, True, [(0, 0, False), (1, 0, False)])),
    ("v12 incremental, nothing changed", (0, True, [])),
    ("v12 incremental after a record in partition 1", (0, True, [(1, 1, True)])),
    ("v12 incremental, same again (hw unchanged)", (0, True, [(1, 1, True)])),
    ("v12 incremental, wrong epoch 7", (71, False, [])),
    ("v12 incremental, right epoch after the error", (0, True, [(1, 1, True)])),
    ("v12 incremental, partition 1 moved to offset 1", (0, True, [])),
    ("v13 incremental on a v12 session", (106, False, [])),
    ("v12 incremental forgetting partition 0", (0, True, [])),
    ("v12 incremental after a record in forgotten partition 0", (0, True, [])),
    ("v12 incremental forgetting the last partition", (0, False, [])),
    ("v12 incremental on the session that ended", (70, False, [])),
    ("v12 unknown session id", (70, False, [])),
    ("v12 session id 0, epoch 1", (70, False, [])),
    ("v13 full fetch, epoch 0", (0, True, [(0, 1, True), (1, 1, True)])),
    ("v13 incremental, nothing changed", (0, True, [(0, 1, True), (1, 1, True)])),
    ("v12 incremental on a v13 session", (106, False, [])),
    ("v13 close: epoch -1", (0, False, [(0, 1, True), (1, 1, True)])),
    ("v13 incremental on the closed session", (70, False, [])),
    ("v13 new session, epoch 0", (0, True, [(0, 1, True), (1, 1, True)])),
    ("v13 (id, 0): reopen replaces the session", (0, True, [(0, 1, True), (1, 1, True)])),
    ("v13 incremental on the replaced session id", (70, False, [])),
    ("v11 sessionless full fetch, epoch -1", (0, False, [(0, 1, True), (1, 1, True)])),
]


if __name__ == "__main__":
    host, _, port = sys.argv[1].partition(":")
    for step, got in run(host, int(port), f"fs-diff-{os.getpid()}-{int(time.time())}"):
        print(f"{step:<60} {got}")
