"""One big CreateTopics (and its DeleteTopics) against a fresh Samsa broker process, while another
connection sends ApiVersions every 50 ms: when the big request is answered, and how long the
other client waited for each answer (issue 33). The broker's own loop-lag gauge
(samsa_event_loop_lag_max_ms) is scraped beside it.

    .venv/bin/python bench/loop_stall.py --partitions 8321 --timeout-ms 15000
"""

from __future__ import annotations

import argparse
import os
import socket
import struct
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from broker_process import BrokerProcess, free_port  # noqa: E402

from samsa.protocol.api import decode_response, encode_request  # noqa: E402


def rpc(s: socket.socket, key: int, version: int, body: dict, correlation_id: int = 1) -> dict:
    s.sendall(b"".join(bytes(c) for c in encode_request(key, version, correlation_id, "loop-stall", body)))

    def read(n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = s.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed by the broker")
            buf += chunk
        return buf
    (size,) = struct.unpack(">i", read(4))
    return decode_response(key, version, read(size))[1]


def lag_max(url: str) -> float:
    with urllib.request.urlopen(url, timeout=30) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("samsa_event_loop_lag_max_ms "):
                return float(line.split()[1])
    return float("nan")


def measure(port: int, metrics_url: str, what: str, key: int, version: int, body: dict, timeout: float) -> None:
    latencies: list[float] = []
    lags: list[float] = []
    done = threading.Event()

    def ping() -> None:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            i = 0
            while not done.is_set():
                t = time.perf_counter()
                rpc(s, 18, 0, {}, i)
                latencies.append(time.perf_counter() - t)
                i += 1
                time.sleep(0.05)

    def scrape() -> None:
        while not done.is_set():
            lags.append(lag_max(metrics_url))
            time.sleep(1)

    threads = [threading.Thread(target=ping), threading.Thread(target=scrape)]
    for t in threads:
        t.start()
    time.sleep(0.5)
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        started = time.perf_counter()
        answer = rpc(s, key, version, body)
        took = time.perf_counter() - started
    time.sleep(1)
    done.set()
    for t in threads:
        t.join()
    items = answer.get("topics") or answer.get("responses")
    ordered = sorted(latencies)
    print(f"{what}: answered error_code {items[0]['error_code']} after {took:.2f} s; other client's ApiVersions: "
          f"{len(ordered)} answered, p50 {ordered[len(ordered) // 2] * 1000:.1f} ms, max {ordered[-1] * 1000:.0f} ms; "
          f"samsa_event_loop_lag_max_ms max {max(lags, default=float('nan')):.0f}; "
          f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", type=int, default=8321)
    ap.add_argument("--timeout-ms", type=int, default=15000)
    args = ap.parse_args()
    metrics_port = free_port()
    b = BrokerProcess(Path(tempfile.mkdtemp(prefix="loop-stall-")), nofile=20000,
                      **{"prometheus.listener": f"http://127.0.0.1:{metrics_port}"})
    b.start()
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    try:
        topic = {"name": "wide", "num_partitions": args.partitions, "replication_factor": 1, "assignments": [],
                 "configs": []}
        measure(b.port, url, f"CreateTopics v5, {args.partitions} partitions, timeout_ms {args.timeout_ms}", 19, 5,
                {"topics": [topic], "timeout_ms": args.timeout_ms, "validate_only": False}, 300)
        with socket.create_connection(("127.0.0.1", b.port), timeout=30) as s:
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline:  # the topic, finished in the background
                r = rpc(s, 3, 12, {"topics": [{"name": "wide", "topic_id": bytes(16)}],
                                   "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
                if r["topics"][0]["error_code"] == 0 and len(r["topics"][0]["partitions"]) == args.partitions:
                    break
                time.sleep(0.5)
        measure(b.port, url, "DeleteTopics v4 of it", 20, 4, {"topic_names": ["wide"], "timeout_ms": args.timeout_ms},
                300)
    finally:
        b.stop()


if __name__ == "__main__":
    main()
