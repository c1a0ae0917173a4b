"""The benchmark's ceiling: a Kafka-speaking server that stores nothing.

``python bench/sink.py [--host 127.0.0.1] [--port 0]`` prints ``PORT <n>`` on stdout once it
listens, then serves until SIGTERM/SIGINT or until its standard input closes.

It decodes every request and encodes every answer with Samsa's own codec
(``samsa.protocol.api.decode_request`` / ``encode_response``) over a plain asyncio
protocol, so what a load costs here is the network + framing + codec alone, with no
storage, no validation and no bookkeeping beyond per-partition offset counters:

- ApiVersions: the APIs below, in the version ranges Samsa's own handlers advertise;
- Metadata: this one node; a topic is known once created (CreateTopics) or asked for
  (auto-created; a name ending ``-p<N>`` gets N partitions, otherwise 1);
- CreateTopics: accepted as asked;
- Produce: each partition's offset counter moves by the records of its batches (read from
  the batch headers: nothing is decoded or kept) and the base offset is answered;
  acks=0 gets no answer;
- ListOffsets: earliest 0, latest = the produce counter, or a huge end (2^40) for a topic
  never produced to (so a consume load can read from the sink without producing first);
- Fetch: from a pre-built batch of 100-byte records, copies with their base offset
  patched to the offset asked, up to the byte limits — nothing is read from anywhere;
- FindCoordinator: COORDINATOR_NOT_AVAILABLE (consumers here assign, they don't join);
- InitProducerId: a fresh producer id (idempotent producers).

Anything else closes the connection, as Kafka does for an API it does not speak.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import re
import signal
import socket
import stat
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from samsa.protocol import api  # noqa: E402
from samsa.protocol.api_keys import ApiKey  # noqa: E402
from samsa.protocol.records import build_batch  # noqa: E402

_SIZE = struct.Struct(">i")
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")

SERVED = (ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.LIST_OFFSETS, ApiKey.METADATA, ApiKey.FIND_COORDINATOR,
          ApiKey.API_VERSIONS, ApiKey.CREATE_TOPICS, ApiKey.INIT_PRODUCER_ID)
E_UNKNOWN_TOPIC_OR_PARTITION, E_COORDINATOR_NOT_AVAILABLE, E_UNKNOWN_TOPIC_ID = 3, 15, 100
NO_OPERATIONS = -2147483648
UNBOUNDED_END = 1 << 40  # high watermark of a never-produced topic: fetch is endless
FETCH_BATCH_RECORDS = 100


def version_ranges() -> dict[int, tuple[int, int]]:
    """The version ranges Samsa's broker advertises for the APIs served here (schema's if unknown)."""
    ranges = {}
    try:
        from samsa.server.handlers import HANDLERS
        for key in SERVED:
            h = HANDLERS.get(key)
            if h is not None:
                ranges[key] = (h.min_version, h.max_version)
    except Exception:  # noqa: BLE001 - the sink does not need the broker to import
        pass
    for key in SERVED:
        if key not in ranges:
            a = api.api(key)
            ranges[key] = (a.min_version, a.max_version)
    return ranges


def topic_id_of(name: str) -> bytes:
    return hashlib.md5(name.encode()).digest()


class Sink:
    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self.ranges = version_ranges()
        self.topics: dict[str, int] = {}          # name -> partition count
        self.ids: dict[bytes, str] = {}
        self.ends: dict[tuple[str, int], int] = {}  # produce counters
        self.produced: set[str] = set()             # topics with a produce counter
        self.next_pid = 1000
        # One batch of 100-byte records, offsets 0..99; copies get their base offset patched.
        self.batch = self.batch_of(FETCH_BATCH_RECORDS)
        self.connections: set = set()

    _batches: dict[int, bytes] = {}

    def batch_of(self, n: int) -> bytes:
        b = self._batches.get(n)
        if b is None:
            b = self._batches[n] = bytes(build_batch([(None, b"v" * 100) for _ in range(n)]))
        return b

    # ------------------------------------------------------------------ topics

    def ensure_topic(self, name: str, partitions: int | None = None) -> None:
        if name in self.topics:
            return
        if partitions is None or partitions <= 0:
            m = re.search(r"-p(\d+)$", name)
            partitions = int(m.group(1)) if m else 1
        self.topics[name] = partitions
        self.ids[topic_id_of(name)] = name

    def topic_entry(self, name: str) -> dict:
        n = self.topics[name]
        return {"error_code": 0, "name": name, "topic_id": topic_id_of(name), "is_internal": False,
                "partitions": [{"error_code": 0, "partition_index": i, "leader_id": 0, "leader_epoch": 0,
                                "replica_nodes": [0], "isr_nodes": [0], "offline_replicas": []}
                               for i in range(n)],
                "topic_authorized_operations": NO_OPERATIONS}

    # ------------------------------------------------------------------ handlers

    def handle(self, key: int, version: int, req: dict) -> dict | None:
        if key == ApiKey.API_VERSIONS:
            return {"error_code": 0, "throttle_time_ms": 0,
                    "api_keys": [{"api_key": k, "min_version": lo, "max_version": hi}
                                 for k, (lo, hi) in sorted(self.ranges.items())]}
        if key == ApiKey.METADATA:
            requested = req.get("topics")
            if requested is None or (version == 0 and not requested):
                names = sorted(self.topics)
            else:
                names = []
                for t in requested:
                    name = t.get("name") or self.ids.get(t.get("topic_id") or b"")
                    if name is None:
                        continue
                    self.ensure_topic(name)
                    names.append(name)
            return {"throttle_time_ms": 0,
                    "brokers": [{"node_id": 0, "host": self.host, "port": self.port, "rack": None}],
                    "cluster_id": "samsa-bench-sink", "controller_id": 0,
                    "topics": [self.topic_entry(n) for n in names],
                    "cluster_authorized_operations": NO_OPERATIONS}
        if key == ApiKey.PRODUCE:
            return self.produce(req)
        if key == ApiKey.FETCH:
            return self.fetch(version, req)
        if key == ApiKey.LIST_OFFSETS:
            topics = []
            for t in req["topics"]:
                parts = []
                for p in t["partitions"]:
                    end = self.end_of(t["name"], p["partition_index"])
                    off = 0 if p["timestamp"] == -2 else end
                    parts.append({"partition_index": p["partition_index"], "error_code": 0, "timestamp": -1,
                                  "offset": off, "leader_epoch": 0, "old_style_offsets": [off]})
                topics.append({"name": t["name"], "partitions": parts})
            return {"throttle_time_ms": 0, "topics": topics}
        if key == ApiKey.CREATE_TOPICS:
            out = []
            for t in req["topics"]:
                n = t["num_partitions"] if t["num_partitions"] > 0 else None
                self.ensure_topic(t["name"], n)
                out.append({"name": t["name"], "topic_id": topic_id_of(t["name"]), "error_code": 0,
                            "error_message": None, "num_partitions": self.topics[t["name"]],
                            "replication_factor": 1, "configs": []})
            return {"throttle_time_ms": 0, "topics": out}
        if key == ApiKey.FIND_COORDINATOR:
            keys = req.get("coordinator_keys") or [req.get("key", "")]
            return {"throttle_time_ms": 0, "error_code": E_COORDINATOR_NOT_AVAILABLE, "error_message": None,
                    "node_id": -1, "host": "", "port": -1,
                    "coordinators": [{"key": k, "node_id": -1, "host": "", "port": -1,
                                      "error_code": E_COORDINATOR_NOT_AVAILABLE, "error_message": None}
                                     for k in keys]}
        if key == ApiKey.INIT_PRODUCER_ID:
            self.next_pid += 1
            return {"throttle_time_ms": 0, "error_code": 0, "producer_id": self.next_pid, "producer_epoch": 0}
        raise KeyError(key)

    def end_of(self, topic: str, index: int) -> int:
        if topic in self.produced:
            return self.ends.get((topic, index), 0)
        return UNBOUNDED_END

    def produce(self, req: dict) -> dict | None:
        responses = []
        ends = self.ends
        for t in req["topic_data"]:
            name = t["name"]
            self.produced.add(name)
            entries = []
            for p in t["partition_data"]:
                data = p["records"] or b""
                key = (name, p["index"])
                base = ends.get(key, 0)
                count, pos, n = 0, 0, len(data)
                while pos + 27 <= n:  # v2 batch: length at 8, last offset delta at 23
                    (length,) = _I32.unpack_from(data, pos + 8)
                    (delta,) = _I32.unpack_from(data, pos + 23)
                    count += delta + 1
                    pos += 12 + length
                ends[key] = base + count
                entries.append({"index": p["index"], "error_code": 0, "base_offset": base,
                                "log_append_time_ms": -1, "log_start_offset": 0})
            responses.append({"name": name, "partition_responses": entries})
        if req["acks"] == 0:
            return None
        return {"responses": responses, "throttle_time_ms": 0}

    def fetch(self, version: int, req: dict) -> dict:
        remaining = req.get("max_bytes", 1 << 31) if version >= 3 else 1 << 31
        batch, blen = self.batch, len(self.batch)
        out = []
        for t in req["topics"]:
            name = t.get("topic") if version <= 12 else self.ids.get(t.get("topic_id"))
            parts = []
            for p in t["partitions"]:
                index = p["partition"]
                if name is None or name not in self.topics:
                    parts.append({"partition_index": index, "error_code":
                                  E_UNKNOWN_TOPIC_ID if version > 12 else E_UNKNOWN_TOPIC_OR_PARTITION,
                                  "high_watermark": -1, "last_stable_offset": -1, "log_start_offset": -1,
                                  "records": b""})
                    continue
                end = self.end_of(name, index)
                offset = p["fetch_offset"]
                copies = min(max(p["partition_max_bytes"], blen) // blen, max(remaining, 0) // blen,
                             max(end - offset, 0) // FETCH_BATCH_RECORDS)
                records = b""
                if copies > 0:
                    buf = bytearray(batch * copies)
                    for i in range(copies):
                        _I64.pack_into(buf, i * blen, offset + i * FETCH_BATCH_RECORDS)
                    records = buf
                elif 0 < end - offset < FETCH_BATCH_RECORDS:  # the tail of a produced partition
                    records = bytearray(self.batch_of(end - offset))
                    _I64.pack_into(records, 0, offset)
                remaining -= len(records)
                parts.append({"partition_index": index, "error_code": 0, "high_watermark": end,
                              "last_stable_offset": end, "log_start_offset": 0, "aborted_transactions": None,
                              "preferred_read_replica": -1, "records": records})
            out.append({"topic": name, "topic_id": t.get("topic_id"), "partitions": parts})
        return {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": out}

    # ------------------------------------------------------------------ network

    def respond(self, frame) -> list | None:
        key, version, corr = api.peek_request_header(frame)
        lo_hi = self.ranges.get(key)
        if lo_hi is None:
            raise ValueError(f"API key {key} is not served by the sink")
        if not lo_hi[0] <= version <= lo_hi[1]:
            if key == ApiKey.API_VERSIONS:
                return api.api_versions_v0_fallback(corr, [(k, lo, hi) for k, (lo, hi) in sorted(self.ranges.items())])
            raise ValueError(f"unsupported version {version} of API {key}")
        _, body = api.decode_request(frame)
        answer = self.handle(key, version, body)
        if answer is None:
            return None
        return api.encode_response(key, version, corr, answer)


class Connection(asyncio.Protocol):
    def __init__(self, sink: Sink):
        self.sink = sink
        self.buf = bytearray()
        self.transport = None

    def connection_made(self, transport) -> None:
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sink.connections.add(self)

    def connection_lost(self, exc) -> None:
        self.sink.connections.discard(self)

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        pos, end = 0, len(buf)
        out = []
        while end - pos >= 4:
            (size,) = _SIZE.unpack_from(buf, pos)
            if end - pos - 4 < size:
                break
            frame = buf[pos + 4:pos + 4 + size]
            pos += 4 + size
            try:
                chunks = self.sink.respond(frame)
            except Exception as e:  # noqa: BLE001
                print(f"sink: closing connection: {e!r}", file=sys.stderr, flush=True)
                self.transport.close()
                return
            if chunks:
                out.extend(chunks)
        if pos:
            del buf[:pos]
        if out:
            self.transport.writelines(out)


async def serve(host: str, port: int) -> None:
    loop = asyncio.get_running_loop()
    sink = Sink(host, port)
    server = await loop.create_server(lambda: Connection(sink), host, port, reuse_address=True, backlog=512)
    sink.port = server.sockets[0].getsockname()[1]
    print(f"PORT {sink.port}", flush=True)
    stop = loop.create_future()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, lambda: stop.done() or stop.set_result(None))

    def stdin_closed() -> None:
        if not sys.stdin.buffer.read1(65536) and not stop.done():
            loop.remove_reader(sys.stdin.fileno())
            stop.set_result(None)

    if stat.S_ISFIFO(os.fstat(sys.stdin.fileno()).st_mode):  # a parent's pipe: its end is ours
        try:
            loop.add_reader(sys.stdin.fileno(), stdin_closed)
        except (OSError, ValueError, NotImplementedError):
            pass
    await stop
    server.close()
    for c in list(sink.connections):
        c.transport.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    asyncio.run(serve(args.host, args.port))


if __name__ == "__main__":
    main()
