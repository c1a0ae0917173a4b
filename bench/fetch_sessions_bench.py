"""Fetch sessions (KIP-227): one consumer of 1,000 partitions with little traffic, against a
fresh ``samsa server start`` process, with fetch sessions off and on (not a test).

    .venv/bin/python bench/fetch_sessions_bench.py [--partitions 1000] [--seconds 20] [--rate 20]
                                                   [--client samsa,kafka-python] [--tree .]
    .venv/bin/python bench/fetch_sessions_bench.py --handler   # the broker's cost per Fetch, in process

"off" is the broker with ``max.incremental.fetch.session.cache.slots=0``: every fetch is a
full one, as before sessions. A producer trickles ``--rate`` records/s over random partitions
while the consumer (``fetch.max.wait.ms`` 500, its default) reads them. The consumer talks to
the broker through a counting TCP proxy (the broker advertises the proxy's port), which gives
the request and response bytes per second; the broker's CPU is its process's user+system time
over the window (``/proc/<pid>/stat``), as a share of one core.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import random
import socket
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TICK = os.sysconf("SC_CLK_TCK")


def _broker_process_class():
    spec = importlib.util.spec_from_file_location("samsa_tests_broker_process", ROOT / "tests" / "broker_process.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.BrokerProcess, mod.free_port


BrokerProcess, free_port = _broker_process_class()


class Proxy(threading.Thread):
    """127.0.0.1:listen -> 127.0.0.1:target, counting bytes each way."""

    def __init__(self, listen: int, target: int):
        super().__init__(daemon=True)
        self.listen, self.target = listen, target
        self.up = 0    # client -> broker (requests)
        self.down = 0  # broker -> client (responses)
        self.fetches = 0  # Fetch requests (api key 1) among the requests
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()

    def run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self._serve())
        except (RuntimeError, asyncio.CancelledError):
            pass  # stopped

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)

    async def _serve(self) -> None:
        server = await asyncio.start_server(self._client, "127.0.0.1", self.listen)
        self.ready.set()
        async with server:
            await server.serve_forever()

    async def _client(self, creader, cwriter) -> None:
        breader, bwriter = await asyncio.open_connection("127.0.0.1", self.target)

        pending = bytearray()

        async def pipe(r, w, up: bool):
            try:
                while True:
                    data = await r.read(65536)
                    if not data:
                        break
                    if up:
                        self.up += len(data)
                        pending.extend(data)
                        while len(pending) >= 6:
                            size = int.from_bytes(pending[:4], "big")
                            if len(pending) < 4 + size:
                                break
                            if int.from_bytes(pending[4:6], "big") == 1:
                                self.fetches += 1
                            del pending[:4 + size]
                    else:
                        self.down += len(data)
                    w.write(data)
                    await w.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                w.close()
        await asyncio.gather(pipe(creader, bwriter, True), pipe(breader, cwriter, False))


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def run_one(tree: str, sessions: bool, client: str, partitions: int, seconds: float, rate: float) -> dict:
    import tempfile
    proxy_port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        broker_port = free_port()
        b = BrokerProcess(Path(tmp), port=broker_port, **{
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy_port}",
            "max.incremental.fetch.session.cache.slots": 1000 if sessions else 0})
        env_before = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = tree
        try:
            b.start()
        finally:
            if env_before is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = env_before
        proxy = Proxy(proxy_port, broker_port)
        proxy.start()
        proxy.ready.wait()
        bootstrap = f"127.0.0.1:{proxy_port}"
        try:
            from samsa import Admin, Producer
            from samsa.client.types import NewTopic
            topic = "sessions-bench"
            with Admin({"bootstrap.servers": bootstrap}) as admin:
                admin.create_topics([NewTopic(topic, partitions, 1)])
            stop = threading.Event()
            consumed = [0]

            def consume():
                if client == "samsa":
                    from samsa import Consumer, TopicPartition
                    c = Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest"})
                    c.assign([TopicPartition(topic, p) for p in range(partitions)])
                    while not stop.is_set():
                        consumed[0] += len(c.poll(0.2))
                    c.close()
                else:
                    from kafka import KafkaConsumer
                    from kafka import TopicPartition as KTP
                    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                                      auto_offset_reset="earliest")
                    c.assign([KTP(topic, p) for p in range(partitions)])
                    while not stop.is_set():
                        consumed[0] += sum(len(r) for r in c.poll(timeout_ms=200).values())
                    c.close()

            t = threading.Thread(target=consume, daemon=True)
            t.start()
            rnd = random.Random(1)
            with Producer({"bootstrap.servers": bootstrap, "linger.ms": 0}) as producer:
                warm_end = time.monotonic() + 5  # the consumer's first full fetches and its session
                while time.monotonic() < warm_end:
                    producer.send(topic, b"x" * 100, partition=rnd.randrange(partitions))
                    time.sleep(1 / rate)
                producer.flush()
                cpu0, up0, down0, n0, t0 = cpu_seconds(b.proc.pid), proxy.up, proxy.down, consumed[0], time.monotonic()
                f0 = proxy.fetches
                produced = 0
                while time.monotonic() - t0 < seconds:
                    producer.send(topic, b"x" * 100, partition=rnd.randrange(partitions))
                    produced += 1
                    time.sleep(1 / rate)
                producer.flush()
                elapsed = time.monotonic() - t0
                cpu1, up1, down1, n1 = cpu_seconds(b.proc.pid), proxy.up, proxy.down, consumed[0]
                f1 = proxy.fetches
            stop.set()
            t.join(30)
            return {"cpu": (cpu1 - cpu0) / elapsed, "up": (up1 - up0) / elapsed, "down": (down1 - down0) / elapsed,
                    "consumed": (n1 - n0) / elapsed, "produced": produced / elapsed, "fetches": (f1 - f0) / elapsed}
        finally:
            b.stop()
            proxy.stop()


def handler_cost(partitions: int, rounds: int = 20, requests: int = 50) -> dict[str, float]:
    """The broker's own cost (µs) of one Fetch of ``partitions`` quiet partitions, frames handed
    straight to an in-process broker's dispatcher (as bench/handler_bench.py): a sessionless
    full fetch beside an incremental one of a session holding them all; best of ``rounds``."""
    import tempfile

    from samsa.broker_config import BrokerConfig
    from samsa.protocol import api
    from samsa.server.broker import BrokerServer

    class Conn:
        peer, closed, task, auth, listener, arrived_at = "bench:0", False, None, None, "PLAINTEXT", 0.0

        def close(self, why: str = "") -> None:
            raise RuntimeError(why)

    def frame(session_id: int, epoch: int, topics: list) -> bytearray:
        return bytearray(b"".join(api.encode_request(1, 12, 2, "bench", {
            "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": session_id, "session_epoch": epoch, "topics": topics}))[4:])

    async def run(tmp: str) -> dict[str, float]:
        server = BrokerServer(BrokerConfig({"log.dirs": tmp, "listeners": "PLAINTEXT://127.0.0.1:0",
                                            "offsets.topic.replication.factor": 1}, warn_unknown=False))
        await server.start()
        try:
            server.admin.create_topic("bench", partitions, 1)
            conn = Conn()
            topics = [{"topic": "bench", "partitions": [{"partition": i, "fetch_offset": 0, "partition_max_bytes": 1 << 20}
                                                        for i in range(partitions)]}]
            full = frame(0, -1, topics)
            server.dispatcher.dispatch(conn, frame(0, 0, topics))
            session_id = next(iter(server.fetch_sessions.sessions))
            incremental = [frame(session_id, e, []) for e in range(1, rounds * requests + 1)]
            best_full = best_incremental = float("inf")
            for r in range(rounds):
                t0 = time.perf_counter()
                for _ in range(requests):
                    server.dispatcher.dispatch(conn, bytearray(full))
                best_full = min(best_full, (time.perf_counter() - t0) / requests * 1e6)
                t0 = time.perf_counter()
                for f in incremental[r * requests:(r + 1) * requests]:
                    server.dispatcher.dispatch(conn, f)
                best_incremental = min(best_incremental, (time.perf_counter() - t0) / requests * 1e6)
            return {"full_us": best_full, "incremental_us": best_incremental}
        finally:
            await server.stop()

    with tempfile.TemporaryDirectory() as tmp:
        return asyncio.run(run(tmp))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--rate", type=float, default=20, help="records per second produced")
    ap.add_argument("--client", default="samsa", help="samsa, kafka-python, or both comma-separated")
    ap.add_argument("--tree", default=str(ROOT), help="the Samsa source tree the broker runs")
    ap.add_argument("--handler", action="store_true",
                    help="only the broker's cost per Fetch of the quiet partitions, in process")
    args = ap.parse_args()
    if args.handler:
        r = handler_cost(args.partitions)
        print(f"Fetch of {args.partitions} quiet partitions, best of 20 x 50: sessionless full "
              f"{r['full_us']:,.0f} µs, incremental (session) {r['incremental_us']:,.0f} µs")
        return 0
    print(f"{args.partitions} partitions, {args.rate:g} records/s produced, {args.seconds:g} s measured "
          f"after a 5 s warm-up; broker tree {Path(args.tree).resolve().name}")
    print(f"{'client':<13} {'sessions':>8} {'broker CPU':>11} {'fetches/s':>10} {'CPU ms/fetch':>13} "
          f"{'requests B/s':>13} {'responses B/s':>14} {'records/s':>10}")
    for client in args.client.split(","):
        for sessions in (False, True):
            r = run_one(str(Path(args.tree).resolve()), sessions, client, args.partitions, args.seconds, args.rate)
            print(f"{client:<13} {'on' if sessions else 'off':>8} {r['cpu'] * 100:>10.1f}% {r['fetches']:>10.1f} "
                  f"{r['cpu'] * 1000 / max(r['fetches'], 1e-9):>13.2f} {r['up']:>13,.0f} {r['down']:>14,.0f} "
                  f"{r['consumed']:>10.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
