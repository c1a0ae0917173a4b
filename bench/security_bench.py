"""Produce and consume throughput over PLAINTEXT, SSL and SASL_SSL (SCRAM-SHA-512): one Samsa
broker with the three listeners, the same load on each, in alternating rounds of one run.

    .venv/bin/python bench/security_bench.py [--records 200000] [--rounds 3]

Each round and protocol: a fresh one-partition topic; kcat (librdkafka) produces N records
of 100 bytes (acks=all) and consumes them from the beginning; confluent-kafka's Python
Producer and Consumer do the same on another topic. The certificates are a throw-away test
CA (tests/sec_certs.py). Not a test: on a shared machine read the ratios between the
protocols of one run, not the absolute numbers.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from sec_certs import PASSWORD, make_certs  # noqa: E402
from samsa import Admin  # noqa: E402
from samsa.client.types import NewTopic  # noqa: E402

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_SSL")
VALUE = b"x" * 100


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_broker(work: Path, certs) -> tuple[subprocess.Popen, dict[str, int]]:
    ports = {p: free_port() for p in PROTOCOLS}
    props = work / "server.properties"
    props.write_text("\n".join([
        "broker.id=0", f"log.dirs={work / 'data'}", "offsets.topic.replication.factor=1",
        "listeners=" + ",".join(f"{p}://127.0.0.1:{port}" for p, port in ports.items()),
        "ssl.keystore.type=PKCS12", f"ssl.keystore.location={certs.p12('broker')}", f"ssl.keystore.password={PASSWORD}",
        "sasl.enabled.mechanisms=SCRAM-SHA-512", ""]))
    log = open(work / "broker.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "samsa.cli.main", "server", "start", str(props)], cwd=ROOT,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)), stdout=log, stderr=log,
                            start_new_session=True)
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            with Admin({"bootstrap.servers": f"127.0.0.1:{ports['PLAINTEXT']}", "default.api.timeout.ms": 2000}) as a:
                a.alter_user_scram_credentials([("bench", "SCRAM-SHA-512", 4096, "bench-secret")])
            return proc, ports
        except Exception:  # noqa: BLE001 - not up yet
            if proc.poll() is not None:
                raise SystemExit(f"broker exited: {(work / 'broker.log').read_text()[-500:]}")
            time.sleep(0.3)
    raise SystemExit("broker not up after 30 s")


def client_conf(protocol: str, ports: dict[str, int], certs) -> dict[str, str]:
    """librdkafka's keys (kcat -X and confluent-kafka)."""
    conf = {"bootstrap.servers": f"127.0.0.1:{ports[protocol]}", "security.protocol": protocol}
    if protocol != "PLAINTEXT":
        conf["ssl.ca.location"] = str(certs.ca)
    if protocol == "SASL_SSL":
        conf.update({"sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "bench", "sasl.password": "bench-secret"})
    return conf


def kcat(conf: dict[str, str], args: list[str], **kw) -> float:
    cmd = ["kcat", "-b", conf["bootstrap.servers"], *args]
    for k, v in conf.items():
        if k != "bootstrap.servers":
            cmd += ["-X", f"{k}={v}"]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, timeout=600, **kw)
    return time.perf_counter() - t0


def kcat_produce(conf: dict[str, str], topic: str, data: Path) -> float:
    return kcat(conf, ["-t", topic, "-P", "-l", str(data), "-X", "acks=all", "-X", "linger.ms=5",
                       "-X", "batch.num.messages=10000", "-X", "queue.buffering.max.messages=1000000"])


def kcat_consume(conf: dict[str, str], topic: str, n: int, out: Path) -> float:
    with open(out, "wb") as f:
        secs = kcat(conf, ["-t", topic, "-C", "-o", "beginning", "-e", "-c", str(n), "-q", "-f", "."], stdout=f)
    assert out.stat().st_size == n, f"kcat consumed {out.stat().st_size} of {n}"
    return secs


def py_produce(conf: dict[str, str], topic: str, n: int) -> float:
    from confluent_kafka import Producer
    p = Producer({**conf, "acks": "all", "linger.ms": 5, "queue.buffering.max.messages": 1_000_000})
    t0 = time.perf_counter()
    for i in range(n):
        while True:
            try:
                p.produce(topic, VALUE)
                break
            except BufferError:
                p.poll(0.01)
        if i % 10_000 == 0:
            p.poll(0)
    assert p.flush(120) == 0
    return time.perf_counter() - t0


def py_consume(conf: dict[str, str], topic: str, n: int) -> float:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    c = Consumer({**conf, "group.id": f"bench-{topic}", "enable.auto.commit": False, "fetch.queue.backoff.ms": 5})
    got = 0
    t0 = time.perf_counter()  # from the first connection, as kcat's time (TLS and SASL handshakes included)
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    while got < n and time.perf_counter() - t0 < 300:
        for m in c.consume(10_000, 1.0):
            if not m.error():
                got += 1
    secs = time.perf_counter() - t0
    c.close()
    assert got == n, f"consumed {got} of {n}"
    return secs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    n = args.records
    work = Path(tempfile.mkdtemp(prefix="samsa-secbench-"))
    certs = make_certs(work / "certs", clients=())
    data = work / "records.txt"
    data.write_bytes((VALUE + b"\n") * n)
    proc, ports = start_broker(work, certs)
    times: dict[tuple[str, str], list[float]] = {}
    try:
        admin = Admin({"bootstrap.servers": f"127.0.0.1:{ports['PLAINTEXT']}"})
        for r in range(args.rounds):
            for protocol in (PROTOCOLS if r % 2 == 0 else PROTOCOLS[::-1]):
                conf = client_conf(protocol, ports, certs)
                t_kcat, t_py = f"k-{protocol}-{r}".lower(), f"p-{protocol}-{r}".lower()
                admin.create_topics([NewTopic(t_kcat, 1, 1), NewTopic(t_py, 1, 1)])
                for load, run in (("kcat produce", lambda: kcat_produce(conf, t_kcat, data)),
                                  ("kcat consume", lambda: kcat_consume(conf, t_kcat, n, work / "out")),
                                  ("python produce", lambda: py_produce(conf, t_py, n)),
                                  ("python consume", lambda: py_consume(conf, t_py, n))):
                    secs = run()
                    times.setdefault((load, protocol), []).append(secs)
                    print(f"round {r} {protocol:<10} {load:<15} {n / secs:>10,.0f} rec/s", file=sys.stderr)
        admin.close()
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)
        shutil.rmtree(work, ignore_errors=True)
    loads = ("kcat produce", "kcat consume", "python produce", "python consume")
    print(f"\n{n:,} records of {len(VALUE)} bytes, median of {args.rounds} rounds (records/s; vs PLAINTEXT)\n")
    print("| load | " + " | ".join(PROTOCOLS) + " |")
    print("|---|" + "---:|" * len(PROTOCOLS))
    for load in loads:
        base = n / statistics.median(times[(load, "PLAINTEXT")])
        cells = []
        for p in PROTOCOLS:
            rate = n / statistics.median(times[(load, p)])
            cells.append(f"{rate:,.0f}" + ("" if p == "PLAINTEXT" else f" ({rate / base:.0%})"))
        print(f"| {load} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
