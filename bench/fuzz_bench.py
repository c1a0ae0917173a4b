"""Fuzzing a real broker over TCP: mutated request frames, slow clients and a connection burst.

The corpus is one sample request (every field set, from the schema) per API key and version
the broker advertises. Each mutation (bit flips, truncation, a lying size prefix, a corrupted
varint, a random header, bytes inserted or removed, an edge value such as -1 or 2^30 written
over a length or count) goes on its own connection, which is then
half-closed; the broker may answer or close it. Every 1,000 frames a canary record is produced
with acks=all and all canaries are read back. At the end: slowloris (clients trickling a frame
one byte at a time) and a burst of connections each asking ApiVersions, then the totals:
frames, answers, closes, canaries lost, the broker's RSS, tracebacks in its log.

    .venv/bin/python bench/fuzz_bench.py [--frames 50000] [--seed 1] [--burst 2000] [--sasl]
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
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402

from broker_process import BrokerProcess, free_port  # noqa: E402
from samsa.protocol import codec  # noqa: E402
from samsa.protocol.api import api, encode_request  # noqa: E402
from samsa.server.dispatcher import Dispatcher  # noqa: E402
from schema_samples import sample  # noqa: E402

CANARY = "canary"
EXTREMES = [struct.pack(">i", v) for v in (-1, -2, 0x40000000, 0x40000001, 0x7FFFFFFF, -0x80000000, 0x10000)] + \
    [struct.pack(">h", v) for v in (-1, -2, 0x7FFF, -0x8000)] + [b"\x7f\xf8\x00\x00\x00\x00\x00\x00"]  # NaN


# Requests as real clients send them (the kind an independent fuzzing run's corpus held, issue 24),
# which a schema sample lacks: a CreateTopics with a partition count and no assignments, say.
def client_frames() -> list[bytes]:
    requests = [
        (19, 0, "x", {"topics": [{"name": "big", "num_partitions": 1, "replication_factor": 1, "assignments": [],
                                  "configs": []}], "timeout_ms": 10000}),
        (19, 5, "x", {"topics": [{"name": "big", "num_partitions": 3, "replication_factor": 1, "assignments": [],
                                  "configs": []}], "timeout_ms": 10000, "validate_only": True}),
        (37, 0, "x", {"topics": [{"name": "small", "count": 2, "assignments": None}], "timeout_ms": 10000,
                      "validate_only": True}),
        (17, 1, "rdkafka", {"mechanism": "PLAIN"}),
        (36, 1, "rdkafka", {"auth_bytes": b"\0admin\0admin-secret"}),
        (25, 0, None, {"transactional_id": "t", "producer_id": 1, "producer_epoch": 0, "group_id": "g"}),
        (32, 1, "rdkafka", {"resources": [{"resource_type": 4, "resource_name": "0", "configuration_keys": None}],
                            "include_synonyms": False}),
        (49, 1, "samsa-admin", {"entries": [{"entity": [{"entity_type": "client-id", "entity_name": "fuzzq"}],
                                             "ops": [{"key": "producer_byte_rate", "value": 1e6, "remove": False}]}],
                                "validate_only": True}),
        (30, 2, "rdkafka", {"creations": [{"resource_type": 2, "resource_name": "seed", "resource_pattern_type": 3,
                                           "principal": "User:alice", "host": "*", "operation": 4,
                                           "permission_type": 3}]}),
        (16, 4, "rdkafka", {"states_filter": ["Stable"]}),
    ]
    return [b"".join(bytes(c) for c in encode_request(k, v, 1, cid, body)) for k, v, cid, body in requests]


def corpus(rng: random.Random) -> list[bytes]:
    """One encoded sample request per (API key, version) the broker handles, and client_frames()."""
    frames = client_frames()
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
    kind = rng.choice(["bitflip", "truncate", "lying-size", "varint", "header", "insert", "delete", "extreme"])
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
    elif kind == "extreme":
        # An edge value over a length or a count past the header: a negative length where Kafka allows
        # no null, a count near 2^30 or 2^31 (what an amplifying request looks like).
        if len(body) > 10:
            i = rng.randrange(8, len(body) - 1)
            value = rng.choice(EXTREMES)
            body[i:i + len(value)] = value
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
        self.producer.produce(CANARY, value, partition=0, on_delivery=lambda e, m: errors.append(e))
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


@dataclass
class FuzzRun:
    """What a run saw: the figures BENCHMARKS.md records and the CI test asserts on."""
    frames: int
    corpus: int
    api_keys: int
    seed: int
    listener: str = "PLAINTEXT"
    seconds: float = 0.0
    kinds: dict = field(default_factory=dict)
    outcomes: dict = field(default_factory=dict)
    slow_answered: int = 0
    slow_clients: int = 0
    burst_answered: int = 0
    burst: int = 0
    alive: bool = False
    acked: int = 0
    lost: int = 0
    rss_kb: list = field(default_factory=list)
    log: str = ""

    @property
    def tracebacks(self) -> int:
        return self.log.count("Traceback")

    def report(self) -> str:
        rss = self.rss_kb or [0]
        return "\n".join([
            f"fuzz: {self.frames} mutated frames from a corpus of {self.corpus} requests over {self.api_keys} API "
            f"keys, seed {self.seed}, {self.listener} listener, {self.seconds:.0f} s",
            "  mutations: " + ", ".join(f"{k} {n}" for k, n in sorted(self.kinds.items())),
            "  outcomes: " + ", ".join(f"{k} {n}" for k, n in sorted(self.outcomes.items())),
            f"  slowloris: {self.slow_answered} of {self.slow_clients} byte-at-a-time clients answered; burst: "
            f"{self.burst_answered} of {self.burst} connections answered",
            f"  broker alive: {self.alive}; canaries acknowledged {self.acked}, lost {self.lost}",
            f"  RSS: {rss[0] // 1024} MB at start, {max(rss) // 1024} MB at most, {rss[-1] // 1024} MB at the end",
            f"  log: {self.tracebacks} tracebacks, {self.log.count('Fatal error')} fatal protocol errors, "
            f"{self.log.count('closing connection')} connections closed for bad input"])


def run(data_dir: Path, frames: int, seed: int = 1, burst_size: int = 2000, threads: int = 16,
        slow_clients: int = 50, slow_seconds: float = 10.0, sasl: bool = False) -> FuzzRun:
    """Start a broker in ``data_dir``, fuzz it, stop it; the figures. With ``sasl``, the frames go
    to a SASL_PLAINTEXT listener (PLAIN), unauthenticated; the canaries use the PLAINTEXT one."""
    rng = random.Random(seed)
    corpus_frames = corpus(rng)
    keys = {struct.unpack_from(">h", f, 4)[0] for f in corpus_frames}
    result = FuzzRun(frames, len(corpus_frames), len(keys), seed, "SASL_PLAINTEXT (unauthenticated)" if sasl
                     else "PLAINTEXT", slow_clients=slow_clients, burst=burst_size)
    settings = {"socket.request.max.bytes": 1048576, "auto.create.topics.enable": "false"}
    target_port = None
    if sasl:
        plain, target_port = free_port(), free_port()
        settings.update({
            "listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{target_port}",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config":
                'org.apache.kafka.common.security.plain.PlainLoginModule required user_admin="admin-secret";'})
        b = BrokerProcess(Path(data_dir), port=plain, **settings)
    else:
        b = BrokerProcess(Path(data_dir), **settings)
    b.start()
    port = target_port or b.port
    t0 = time.monotonic()
    try:
        admin_frame = encode_request(19, 4, 1, "fuzz", {
            "topics": [{"name": CANARY, "num_partitions": 1, "replication_factor": 1, "assignments": [],
                        "configs": []}], "timeout_ms": 10000, "validate_only": False})
        send_one(b.port, b"".join(bytes(c) for c in admin_frame))
        canary = Canary(b.bootstrap)
        canary.produce()
        result.rss_kb.append(rss_kb(b.proc.pid))
        with ThreadPoolExecutor(threads) as pool:
            for start in range(0, frames, 1000):
                batch = [mutate(rng.choice(corpus_frames), rng) for _ in range(min(1000, frames - start))]
                for kind, _ in batch:
                    result.kinds[kind] = result.kinds.get(kind, 0) + 1
                for outcome in pool.map(lambda m: send_one(port, m[1]), batch):
                    result.outcomes[outcome] = result.outcomes.get(outcome, 0) + 1
                if b.proc.poll() is not None:
                    break
                canary.produce()
                result.rss_kb.append(rss_kb(b.proc.pid))
        if b.proc.poll() is None:
            result.slow_answered = slowloris(port, slow_clients, slow_seconds) if slow_clients else 0
            result.burst_answered = burst(port, burst_size) if burst_size else 0
            canary.produce()
            result.lost = canary.lost()
            result.rss_kb.append(rss_kb(b.proc.pid))
        result.alive = b.proc.poll() is None
        result.acked = len(canary.acked)
        result.log = b.log_text()
    finally:
        b.stop()
        result.seconds = time.monotonic() - t0
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=50000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--burst", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--sasl", action="store_true", help="fuzz a SASL_PLAINTEXT listener, unauthenticated")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="samsa-fuzz-") as tmp:
        result = run(Path(tmp), args.frames, args.seed, args.burst, args.threads, sasl=args.sasl)
    print(result.report())
    if not result.alive:
        raise SystemExit("the broker died")


if __name__ == "__main__":
    main()
