"""Fuzzing a real broker over TCP: mutated request frames, slow clients and a connection burst.

The corpus is one sample request (every field set, from the schema) per API key and version
the broker advertises. Each mutation (bit flips, truncation, a lying size prefix, a corrupted
varint, a random header, bytes inserted or removed) goes on its own connection, which is then
half-closed; the broker may answer or close it. Every 1,000 frames a canary record is produced
with acks=all and all canaries are read back. At the end: slowloris (clients trickling a frame
one byte at a time) and a burst of connections each asking ApiVersions, then the totals:
frames, answers, closes, canaries lost, the broker's RSS, tracebacks in its log.

    .venv/bin/python bench/fuzz_bench.py [--frames 50000] [--seed 1] [--burst 2000]
"""

from __future__ import annotations

import argparse
import random
import socket
import struct
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402

from broker_process import BrokerProcess  # noqa: E402
from samsa.protocol import codec  # noqa: E402
from samsa.protocol.api import api, encode_request  # noqa: E402
from samsa.server.dispatcher import Dispatcher  # noqa: E402
from schema_samples import sample  # noqa: E402

CANARY = "canary"


def corpus(rng: random.Random) -> list[bytes]:
    """One encoded sample request per (API key, version) the broker handles."""
    frames = []
    for key, lo, hi in Dispatcher.supported_versions():
        name = api(key).name + "Request"
        m = codec.schemas()[name]
        structs = {c["name"]: c for c in m.get("commonStructs", [])}
        for version in range(lo, hi + 1):
            flexible = codec._in(m.get("flexibleVersions"), version)
            body = sample(m["fields"], structs, version, flexible, rng)
            try:
                frames.append(b"".join(bytes(c) for c in encode_request(key, version, 1, "fuzz", body)))
            except Exception:
                continue
    return frames


def mutate(frame: bytes, rng: random.Random) -> tuple[str, bytes]:
    body = bytearray(frame[4:])
    kind = rng.choice(["bitflip", "truncate", "lying-size", "varint", "header", "insert", "delete"])
    if kind == "bitflip":
        for _ in range(rng.randint(1, 8)):
            i = rng.randrange(len(body))
            body[i] ^= 1 << rng.randrange(8)
    elif kind == "truncate":
        del body[rng.randrange(len(body)):]
    elif kind == "lying-size":
        return kind, struct.pack(">i", len(body) + rng.choice([-3, -1, 1, 7, 1000, 2 ** 20])) + bytes(body)
    elif kind == "varint":
        i = rng.randrange(8, len(body)) if len(body) > 8 else 0
        body[i:i + 5] = b"\xff\xff\xff\xff\x0f"[:rng.randint(1, 5)]
    elif kind == "header":
        struct.pack_into(">hh", body, 0, rng.choice([rng.randrange(-5, 80), 18, 3, 0]), rng.randrange(-2, 20))
    elif kind == "insert":
        i = rng.randrange(len(body) + 1)
        body[i:i] = rng.randbytes(rng.randint(1, 64))
    else:
        i = rng.randrange(len(body))
        del body[i:i + rng.randint(1, 16)]
    return kind, struct.pack(">i", len(body)) + bytes(body)


def send_one(port: int, data: bytes) -> str:
    """'answered' (a whole frame came back), 'closed' (EOF or reset first) or 'timeout'."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
            got = b""
            while chunk := s.recv(65536):
                got += chunk
            return "answered" if len(got) >= 4 else "closed"
    except socket.timeout:
        return "timeout"
    except OSError:
        return "closed"


def rss_kb(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


class Canary:
    def __init__(self, bootstrap: str):
        self.bootstrap = bootstrap
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "log_level": 0})
        self.acked: list[bytes] = []

    def produce(self) -> None:
        value = b"canary-%d" % len(self.acked)
        errors: list = []
        self.producer.produce(CANARY, value, on_delivery=lambda e, m: errors.append(e))
        self.producer.flush(30)
        if len(errors) == 1 and errors[0] is None:  # (KafkaError.__eq__ cannot take None)
            self.acked.append(value)

    def lost(self) -> int:
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "fuzz-canary", "log_level": 0})
        c.assign([TopicPartition(CANARY, 0, 0)])
        seen: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(seen) < len(self.acked) and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                seen.append(m.value())
        c.close()
        return len(set(self.acked) - set(seen))


def slowloris(port: int, clients: int, seconds: float) -> int:
    """Clients sending a valid ApiVersions frame one byte at a time; how many were answered."""
    frame = b"".join(bytes(c) for c in encode_request(18, 3, 1, "slow", {
        "client_software_name": "slow", "client_software_version": "1"}))
    answered = 0
    lock = threading.Lock()

    def one() -> None:
        nonlocal answered
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
                for b in frame:
                    s.sendall(bytes([b]))
                    time.sleep(seconds / len(frame))
                if len(s.recv(4)) == 4:
                    with lock:
                        answered += 1
        except OSError:
            pass
    threads = [threading.Thread(target=one) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return answered


def burst(port: int, n: int) -> int:
    """n connections opened at once, then each sends ApiVersions; how many were answered."""
    frame = b"".join(bytes(c) for c in encode_request(18, 0, 1, "burst", {}))
    socks = []
    for _ in range(n):
        try:
            socks.append(socket.create_connection(("127.0.0.1", port), timeout=30))
        except OSError:
            pass
    answered = 0
    for s in socks:
        try:
            s.sendall(frame)
        except OSError:
            pass
    for s in socks:
        try:
            if len(s.recv(4)) == 4:
                answered += 1
        except OSError:
            pass
        s.close()
    return answered


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=50000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--burst", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=16)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    frames = corpus(rng)
    keys = {struct.unpack_from(">h", f, 4)[0] for f in frames}
    with tempfile.TemporaryDirectory(prefix="samsa-fuzz-") as tmp:
        b = BrokerProcess(Path(tmp), **{"socket.request.max.bytes": 1048576, "auto.create.topics.enable": "false"})
        b.start()
        t0 = time.monotonic()
        try:
            admin_frame = encode_request(19, 4, 1, "fuzz", {
                "topics": [{"name": CANARY, "num_partitions": 1, "replication_factor": 1, "assignments": [],
                            "configs": []}], "timeout_ms": 10000, "validate_only": False})
            send_one(b.port, b"".join(bytes(c) for c in admin_frame))
            canary = Canary(b.bootstrap)
            canary.produce()
            rss = [rss_kb(b.proc.pid)]
            outcomes: dict[str, int] = {}
            kinds: dict[str, int] = {}
            with ThreadPoolExecutor(args.threads) as pool:
                for start in range(0, args.frames, 1000):
                    batch = [mutate(rng.choice(frames), rng) for _ in range(min(1000, args.frames - start))]
                    for kind, _ in batch:
                        kinds[kind] = kinds.get(kind, 0) + 1
                    for result in pool.map(lambda m: send_one(b.port, m[1]), batch):
                        outcomes[result] = outcomes.get(result, 0) + 1
                    if b.proc.poll() is not None:
                        raise SystemExit(f"the broker died after {start} frames")
                    canary.produce()
                    rss.append(rss_kb(b.proc.pid))
            slow = slowloris(b.port, 50, 10.0)
            burst_answered = burst(b.port, args.burst)
            canary.produce()
            lost = canary.lost()
            alive = b.proc.poll() is None
            rss.append(rss_kb(b.proc.pid))
            log = b.log_text()
        finally:
            b.stop()
    print(f"fuzz: {args.frames} mutated frames from a corpus of {len(frames)} requests over {len(keys)} API keys, "
          f"seed {args.seed}, {time.monotonic() - t0:.0f} s")
    print("  mutations: " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())))
    print("  outcomes: " + ", ".join(f"{k} {n}" for k, n in sorted(outcomes.items())))
    print(f"  slowloris: {slow} of 50 byte-at-a-time clients answered; burst: {burst_answered} of {args.burst} "
          "connections answered")
    print(f"  broker alive: {alive}; canaries acknowledged {len(canary.acked)}, lost {lost}")
    print(f"  RSS: {rss[0] // 1024} MB at start, {max(rss) // 1024} MB at most, {rss[-1] // 1024} MB at the end")
    print(f"  log: {log.count('Traceback')} tracebacks, {log.count('Fatal error')} fatal protocol errors, "
          f"{log.count('closing connection')} connections closed for bad input")


if __name__ == "__main__":
    main()
