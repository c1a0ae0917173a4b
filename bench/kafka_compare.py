"""Apache Kafka 4.4.0 and Samsa under the same loads, alternating, in one run; Samsa/Kafka ratios.

    .venv/bin/python bench/kafka_compare.py [--records 200000] [--skip-cluster]

Both brokers run side by side (one Kafka KRaft node started by tests/kafka_process.py with Kafka's
heap; one Samsa broker as the tests start it), each idle while the other is measured; every load
runs on Kafka then on Samsa (the order flipping from load to load) so that the machine's changing
load falls on both. Loads: kcat and the confluent-kafka Python loop producing 100 B and 1 KB
records to 1 and 8 partitions at acks=1 and acks=all; a consumer reading a 1,000-partition topic;
end-to-end latency (delivery report) at a fixed 10,000 records/s, p50 and p99; then three Kafka
nodes against three Samsa brokers (with ZooKeeper), replication factor 3, acks=all.
Prints a Markdown table of throughput (records/s) and the Samsa/Kafka ratio. Not a test.

    .venv/bin/python bench/kafka_compare.py --matrix [--matrix-mb 30] [--matrix-sizes 1024,10240]
        [--matrix-partitions 1] [--matrix-acks all] [--samsa-conf socket.send.buffer.bytes=-1]

The byte-size matrix instead: kcat producing (in) then consuming (out) 100 B, 1 KB, 10 KB and
100 KB records, 1 and 8 partitions, acks=1 and acks=all, about ``--matrix-mb`` MB per load, on
both brokers; beside each size the machine's physical limit for the same bytes (a bare
``sendfile`` of a cached file to a loopback socket, a bare write of them to a file), and each
broker's rate as a fraction of it. The ``--matrix-*`` options run some rows only (default: all).
Each load runs ``--matrix-repeats`` times on each broker, the brokers taking turns; the table has
the best run and the median ratio.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "tests" / "cluster")]
PY = sys.executable

from broker_process import BrokerProcess  # noqa: E402
from kafka_process import KafkaProcess, start_cluster  # noqa: E402


def create_topic(bootstrap: str, name: str, partitions: int, rf: int = 1) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, rf)], request_timeout=60)[name].result(90)
    deadline = time.time() + 60
    while time.time() < deadline:
        md = admin.list_topics(name, timeout=10).topics.get(name)
        if md is not None and md.error is None and len(md.partitions) == partitions and all(
                p.leader >= 0 for p in md.partitions.values()):
            return
        time.sleep(0.2)
    raise RuntimeError(f"{name} not ready on {bootstrap}")


def data_file(workdir: Path, n: int, size: int) -> Path:
    path = workdir / f"values-{n}-{size}.txt"
    if not path.exists():
        line = b"v" * size + b"\n"
        with open(path, "wb") as f:
            for _ in range(n // 1000):
                f.write(line * 1000)
            f.write(line * (n % 1000))
    return path


def kcat_produce(bootstrap: str, topic: str, data: Path, n: int, acks: str, timeout: float) -> dict:
    t0 = time.perf_counter()
    r = subprocess.run(["kcat", "-b", bootstrap, "-t", topic, "-P", "-l", str(data), "-X", f"acks={acks}",
                        "-X", "linger.ms=5", "-X", "batch.num.messages=10000",
                        "-X", "queue.buffering.max.messages=1000000", "-X", "queue.buffering.max.kbytes=1048576"],
                       capture_output=True, timeout=timeout)
    secs = time.perf_counter() - t0
    return {"records": n, "seconds": secs, "rate": n / secs,
            "error": None if r.returncode == 0 else r.stderr.decode(errors="replace")[-300:]}


def client_load(*argv, size: int = 100, timeout: float = 300) -> dict:
    env = dict(os.environ, SAMSA_BENCH_VALUE_BYTES=str(size))
    r = subprocess.run([PY, str(BENCH / "client_load.py"), *map(str, argv), str(timeout)], capture_output=True,
                       env=env, timeout=timeout + 60)
    try:
        out = json.loads(r.stdout.decode().strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"error": r.stderr.decode(errors="replace")[-300:]}
    if "records" in out and out.get("seconds"):
        out["rate"] = out["records"] / out["seconds"]
    return out


def kcat_consume(bootstrap: str, topic: str, n: int, timeout: float, conf: tuple[str, ...] = ()) -> dict:
    t0 = time.perf_counter()
    extra = [a for kv in conf for a in ("-X", kv)]
    r = subprocess.run(["kcat", "-b", bootstrap, "-t", topic, "-C", "-o", "beginning", "-e", "-q", "-c", str(n),
                        "-f", "%o\\n", "-X", "fetch.max.bytes=52428800", *extra],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    secs = time.perf_counter() - t0
    got = r.stdout.count(b"\n")
    return {"records": got, "seconds": secs, "rate": got / secs,
            "error": None if r.returncode == 0 and got == n else f"{got}/{n} records; "
            + r.stderr.decode(errors="replace")[-300:]}


def raw_fetch(bootstrap: str, topic: str, parts: int, n: int, timeout: float = 300, passes: int = 1) -> dict:
    """A minimal consumer (the broker's own out-rate, without a client library's per-record work):
    Fetch v12 for every partition on one connection, answers received into one buffer, only the
    batch headers walked for the next offsets, until ``n`` records, ``passes`` times over from the
    start (a read of a cached topic lasts a fraction of a second: more passes, less noise); records/s."""
    import socket
    import struct
    from samsa.protocol.api import decode_response, encode_request
    from samsa.protocol.batch import iter_headers
    host, port = bootstrap.rsplit(":", 1)
    offsets = {p: 0 for p in range(parts)}
    got = 0
    buf = bytearray(64 << 20)
    view = memoryview(buf)
    t0 = time.perf_counter()
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        cid = 0
        while got < n * passes:
            if sum(offsets.values()) >= n:  # the topic's n records all read: the next pass, from the start
                offsets = {p: 0 for p in range(parts)}
            cid += 1
            body = {"replica_id": -1, "max_wait_ms": 500, "min_bytes": 1, "max_bytes": 50 << 20, "isolation_level": 0,
                    "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
                    "topics": [{"topic": topic, "partitions": [
                        {"partition": p, "fetch_offset": o, "log_start_offset": -1, "partition_max_bytes": 10 << 20}
                        for p, o in offsets.items()]}]}
            s.sendall(b"".join(bytes(c) for c in encode_request(1, 12, cid, "raw-fetch", body)))
            have = 0
            while have < 4 or have < 4 + struct.unpack_from(">i", buf)[0]:
                k = s.recv_into(view[have:])
                if not k:
                    return {"records": got, "seconds": time.perf_counter() - t0, "rate": 0, "error": "closed"}
                have += k
            _, resp = decode_response(1, 12, view[4:have])
            for t in resp["responses"]:
                for p in t["partitions"]:
                    if p["error_code"]:
                        return {"records": got, "seconds": 1, "rate": 0, "error": f"error {p['error_code']}"}
                    for _, h in iter_headers(p["records"] or b""):
                        if h.next_offset > offsets[p["partition_index"]]:
                            got += h.next_offset - max(h.base_offset, offsets[p["partition_index"]])
                            offsets[p["partition_index"]] = h.next_offset
    secs = time.perf_counter() - t0
    return {"records": got, "seconds": secs, "rate": got / secs, "error": None}


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def with_cpu(pid: int, nbytes: int, fn) -> dict:
    """``fn()``'s result with the broker's CPU seconds per GB moved meanwhile (``cpu_s_per_gb``):
    beside the rate, a figure a busy machine disturbs less."""
    c0 = cpu_seconds(pid)
    res = fn()
    res["cpu_s_per_gb"] = (cpu_seconds(pid) - c0) / (nbytes / 1e9)
    return res


def summary(runs: list[dict]) -> dict:
    """Repetitions of one load on one broker: the best run (its rate and CPU), with the median rate
    and every rate beside it; the last error if none succeeded."""
    ok = [r for r in runs if not r.get("error")]
    if not ok:
        return runs[-1]
    best = dict(max(ok, key=lambda r: r["rate"]))
    best["median"] = statistics.median(r["rate"] for r in ok)
    best["rates"] = [r["rate"] for r in runs]
    return best


def delete_topic(bootstrap: str, name: str) -> None:
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": bootstrap})  # held until the answer: a dropped client cancels it
    admin.delete_topics([name], request_timeout=60)[name].result(90)


def bare_limits(work: Path, size: int, total: int) -> dict:
    """The machine's limit for ``total`` bytes of ``size``-byte records: a bare sendfile of a cached
    file to a loopback socket (drained by a thread; the best of the OS's autotuned send buffer and
    fixed ones of 256 KB and 1 MB), and a bare write of them to a file; records/s."""
    import socket
    import threading
    path = work / f"bare-{size}"
    block = os.urandom(1 << 20)
    with open(path, "wb") as f:
        for _ in range(max(total >> 20, 1)):
            f.write(block)
    nbytes = path.stat().st_size
    with open(path, "rb") as f:  # cached
        while f.read(1 << 22):
            pass

    def send_once(sndbuf: int) -> float:
        with socket.socket() as srv:
            srv.bind(("127.0.0.1", 0))
            srv.listen(1)
            with socket.create_connection(srv.getsockname()) as cli:
                if sndbuf:
                    cli.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
                conn, _ = srv.accept()

                def drain():
                    view = memoryview(bytearray(1 << 20))
                    got = 0
                    while got < nbytes:
                        n = conn.recv_into(view)
                        if not n:
                            break
                        got += n
                with conn:
                    t = threading.Thread(target=drain)
                    t.start()
                    t0 = time.perf_counter()
                    with open(path, "rb") as f:
                        off = 0
                        while off < nbytes:
                            off += os.sendfile(cli.fileno(), f.fileno(), off, nbytes - off)
                    t.join()
                    return time.perf_counter() - t0
    send_secs = write_secs = float("inf")
    for _ in range(5):  # the best of five: the machine is shared
        for sndbuf in (0, 262144, 1 << 20):
            send_secs = min(send_secs, send_once(sndbuf))
        t0 = time.perf_counter()
        fd = os.open(work / f"bare-write-{size}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            for _ in range(max(total >> 20, 1)):
                os.write(fd, block)
        finally:
            os.close(fd)
        write_secs = min(write_secs, time.perf_counter() - t0)
        os.unlink(work / f"bare-write-{size}")
    path.unlink()
    return {"sendfile_MBps": nbytes / send_secs / 1e6, "write_MBps": nbytes / write_secs / 1e6,
            "sendfile_rate": nbytes / send_secs / size, "write_rate": nbytes / write_secs / size}


def drop_page_cache() -> None:
    """``sync`` then drop the clean page cache (``/proc/sys/vm/drop_caches``; root)."""
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("1\n")


def matrix(args, work: Path) -> int:
    rows: list[dict] = []
    limits: dict[int, dict] = {}
    load0 = os.getloadavg()
    started = time.time()
    kafka = KafkaProcess(work / "kafka", **dict(c.split("=", 1) for c in args.kafka_conf)).start()
    samsa = BrokerProcess(work / "samsa", **dict(c.split("=", 1) for c in args.samsa_conf)).start()
    brokers = {"kafka": kafka.bootstrap, "samsa": samsa.bootstrap}
    pids = {"kafka": kafka.proc.pid, "samsa": samsa.proc.pid}
    flip = False
    try:
        for bs in brokers.values():  # warm-up, not measured
            create_topic(bs, "warm-up", 8)
            kcat_produce(bs, "warm-up", data_file(work, 100_000, 1024), 100_000, "1", 600)
            kcat_consume(bs, "warm-up", 100_000, 600)
        for size in args.matrix_sizes:
            n = min(max(args.matrix_mb * 1_000_000 // size, 300), 1_000_000)
            data = data_file(work, n, size)
            limits[size] = bare_limits(work, size, n * size)
            passes = -(-args.matrix_raw_mb * 1_000_000 // (n * size))  # raw reads the topic over, to this many MB
            print(f"  limits {size} B: {json.dumps(limits[size])}", flush=True)
            for parts in args.matrix_partitions:
                for acks in args.matrix_acks:
                    row = {"size": size, "parts": parts, "acks": acks}
                    runs: dict[str, list[dict]] = {f"{side}_{d}": [] for side in brokers for d in ("in", "out", "raw")}
                    for rep in range(args.matrix_repeats):
                        # the brokers take turns, the first flipping from one repetition to the next
                        order = ["samsa", "kafka"] if flip else ["kafka", "samsa"]
                        flip = not flip
                        for side in order:
                            bs, pid = brokers[side], pids[side]
                            topic = f"m-{size}-p{parts}-a{acks}-r{rep}"
                            create_topic(bs, topic, parts)
                            if args.drop_caches:
                                drop_page_cache()
                            runs[f"{side}_in"].append(
                                with_cpu(pid, n * size, lambda: kcat_produce(bs, topic, data, n, acks, 900)))
                            os.sync()  # the written pages flushed now, not by the kernel during a later load
                            runs[f"{side}_out"].append(with_cpu(pid, n * size, lambda: kcat_consume(
                                bs, topic, n, 900, tuple(args.kcat_consumer_conf))))
                            runs[f"{side}_raw"].append(with_cpu(pid, n * size * passes,
                                                                lambda: raw_fetch(bs, topic, parts, n, passes=passes)))
                            delete_topic(bs, topic)
                            print(f"  {size} B p{parts} acks={acks} #{rep + 1} {side}: "
                                  + " ".join(f"{d} {runs[f'{side}_{d}'][-1]['rate']:,.0f}" for d in ("in", "out", "raw"))
                                  + " records/s (CPU s/GB "
                                  + " ".join(f"{runs[f'{side}_{d}'][-1]['cpu_s_per_gb']:.2f}" for d in ("in", "out", "raw"))
                                  + ") " + "".join(runs[f"{side}_{d}"][-1]["error"] or "" for d in ("in", "out", "raw")),
                                  flush=True)
                    row.update({k: summary(v) for k, v in runs.items()})
                    rows.append(row)
    finally:
        kafka.stop()
        samsa.stop()
    load1 = os.getloadavg()
    print(f"\n{len(rows)} loads in {time.time() - started:.0f} s; load average before {load0}, after {load1}; "
          f"{os.cpu_count()} CPUs; Samsa settings {args.samsa_conf or 'default'}; Kafka settings "
          f"{args.kafka_conf or 'default'}; kcat consumer settings "
          f"{args.kcat_consumer_conf or 'default'}; page cache dropped before each in: {args.drop_caches}\n")
    print("| record | partitions | acks | dir | Kafka (rec/s) | Samsa (rec/s) | Samsa/Kafka | median Samsa/Kafka "
          "| Samsa MB/s | bare limit MB/s | Samsa / limit | broker CPU s/GB Kafka / Samsa |"
          "\n|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        size, lim = row["size"], limits[row["size"]]
        for d, limit in (("in", lim["write_MBps"]), ("out", lim["sendfile_MBps"]), ("raw", lim["sendfile_MBps"])):
            k, sm = row[f"kafka_{d}"], row[f"samsa_{d}"]
            err = k.get("error") or sm.get("error")
            # rounded down: a ratio below 1.0 never shows as 1.00
            ratio = f"{math.floor(sm['rate'] / k['rate'] * 100) / 100:.2f}" if not err else f"error: {str(err)[:60]}"
            median = f"{math.floor(sm['median'] / k['median'] * 100) / 100:.2f}" if not err else ""
            mbps = sm["rate"] * size / 1e6
            print(f"| {size} B | {row['parts']} | {row['acks']} | {d} | {k['rate']:,.0f} | {sm['rate']:,.0f} | {ratio} "
                  f"| {median} "
                  f"| {mbps:,.0f} | {limit:,.0f} ({'write' if d == 'in' else 'sendfile'}) | {mbps / limit:.2f} "
                  f"| {k.get('cpu_s_per_gb', 0):.2f} / {sm.get('cpu_s_per_gb', 0):.2f} |")
    print(f"\nin: kcat producing; out: kcat consuming (-f '%o\\n'); raw: a minimal Fetch loop (one connection, "
          f"batch headers only), the brokers' own out-rate. Each load {args.matrix_repeats} times on each broker, "
          f"the brokers taking turns, each time into a new topic; the rates are the best of them, the median ratio "
          f"beside; broker CPU: the broker process's user + system CPU seconds per GB moved (of the best run)")
    if args.out:
        args.out.write_text(json.dumps({"rows": rows, "limits": limits, "load_before": load0, "load_after": load1},
                                       indent=1, default=str))
    shutil.rmtree(work, ignore_errors=True)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=200_000, help="records per produce load")
    ap.add_argument("--latency-seconds", type=float, default=5)
    ap.add_argument("--skip-cluster", action="store_true", help="no three-node comparison")
    ap.add_argument("--out", type=Path, help="write the results as JSON here")
    ap.add_argument("--matrix", action="store_true", help="the byte-size matrix (see above) instead")
    ap.add_argument("--matrix-mb", type=int, default=30, help="megabytes per load of the matrix")
    ap.add_argument("--matrix-sizes", type=lambda v: [int(x) for x in v.split(",")], default=[100, 1024, 10240, 102400],
                    help="record sizes of the matrix, comma-separated (default: all four)")
    ap.add_argument("--matrix-partitions", type=lambda v: [int(x) for x in v.split(",")], default=[1, 8],
                    help="partition counts of the matrix, comma-separated (default: 1,8)")
    ap.add_argument("--matrix-acks", type=lambda v: v.split(","), default=["1", "all"],
                    help="acks of the matrix, comma-separated (default: 1,all)")
    ap.add_argument("--matrix-repeats", type=int, default=3,
                    help="how many times each load of the matrix runs on each broker, the brokers taking turns "
                         "(default: 3; the best and the median reported)")
    ap.add_argument("--matrix-raw-mb", type=int, default=2000,
                    help="megabytes each raw read of the matrix moves, reading the topic over as often as that "
                         "takes (default: 2000)")
    ap.add_argument("--samsa-conf", action="append", default=[], metavar="KEY=VALUE",
                    help="a setting of the matrix's Samsa broker (e.g. socket.send.buffer.bytes=-1); repeatable")
    ap.add_argument("--kafka-conf", action="append", default=[], metavar="KEY=VALUE",
                    help="a setting of the matrix's Kafka broker (e.g. socket.send.buffer.bytes=262144); repeatable")
    ap.add_argument("--kcat-consumer-conf", action="append", default=[], metavar="KEY=VALUE",
                    help="a setting of kcat's consumer in the matrix's out loads, for both brokers (e.g. "
                         "queued.min.messages=10000000: librdkafka 2.0 otherwise stops fetching a partition for "
                         "500 ms whenever its queue holds 100,000 records); repeatable")
    ap.add_argument("--drop-caches", action="store_true",
                    help="the matrix drops the page cache before each broker's in load (root), so that both "
                         "write into free pages rather than whichever follows a freed file")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kafka-compare-"))
    if args.matrix:
        return matrix(args, work)
    rows: list[dict] = []
    load0 = os.getloadavg()
    started = time.time()

    def both(load: str, fn, brokers: dict, flip: list[bool]) -> None:
        order = ["kafka", "samsa"] if not flip[0] else ["samsa", "kafka"]
        flip[0] = not flip[0]
        row = {"load": load}
        for side in order:
            res = fn(side, brokers[side])
            row[side] = res
            print(f"  {load:<42} {side:<6} {json.dumps({k: v for k, v in res.items() if k != 'histogram'})[:200]}",
                  flush=True)
        rows.append(row)

    kafka = KafkaProcess(work / "kafka").start()
    samsa = BrokerProcess(work / "samsa").start()
    brokers = {"kafka": kafka.bootstrap, "samsa": samsa.bootstrap}
    flip = [False]
    try:
        n = args.records
        for bs in brokers.values():  # warm-up, not measured: Kafka's JIT, Samsa's first segment
            create_topic(bs, "warm-up", 8)
            kcat_produce(bs, "warm-up", data_file(work, n, 100), n, "1", 600)
            client_load("produce", bs, "warm-up", n // 2, "1")
        for size in (100, 1024):
            data = data_file(work, n, size)
            for parts in (1, 8):
                for acks in ("1", "all"):
                    for tool in ("kcat", "python"):
                        topic = f"{tool}-{size}-p{parts}-a{acks}"

                        def run(side, bs, tool=tool, topic=topic, parts=parts, acks=acks, size=size, data=data):
                            create_topic(bs, topic, parts)
                            if tool == "kcat":
                                return kcat_produce(bs, topic, data, n, acks, 600)
                            return client_load("produce", bs, topic, n // 2, acks, size=size)
                        both(f"{tool} produce {size} B p{parts} acks={acks}", run, brokers, flip)

        def consume_1000(side, bs):
            create_topic(bs, "wide", 1000)
            kcat_produce(bs, "wide", data_file(work, 50_000, 100), 50_000, "1", 600)
            return client_load("consume", bs, "wide", 50_000, 1000)
        both("consume 50,000 records from 1,000 partitions", consume_1000, brokers, flip)

        for acks in ("1", "all"):
            def latency(side, bs, acks=acks):
                create_topic(bs, f"latency-{acks}", 1)
                # warm-up: the first records to a new topic wait for metadata and (Kafka) the JIT
                client_load("produce", bs, f"latency-{acks}", 20000, acks)
                return client_load("latency", bs, f"latency-{acks}", 10000, args.latency_seconds, acks)
            both(f"latency at 10,000 records/s acks={acks}", latency, brokers, flip)
    finally:
        kafka.stop()
        samsa.stop()

    if not args.skip_cluster:
        from cluster_harness import Cluster
        kafkas = start_cluster(work / "kafka3", 3)
        cluster = Cluster(work / "samsa3", size=3).start()
        brokers = {"kafka": ",".join(k.bootstrap for k in kafkas), "samsa": cluster.bootstrap}
        try:
            data = data_file(work, args.records, 100)
            for tool in ("kcat", "python"):
                def rf3(side, bs, tool=tool):
                    create_topic(bs, f"rf3-{tool}", 8, rf=3)
                    if tool == "kcat":
                        return kcat_produce(bs, f"rf3-{tool}", data, args.records, "all", 600)
                    return client_load("produce", bs, f"rf3-{tool}", args.records // 2, "all")
                both(f"3 nodes RF 3 {tool} produce 100 B p8 acks=all", rf3, brokers, flip)
        finally:
            for k in kafkas:
                k.stop()
            cluster.stop()

    print(f"\n{len(rows)} loads in {time.time() - started:.0f} s; load average before {load0}, after "
          f"{os.getloadavg()}; {os.cpu_count()} CPUs\n")
    print("| load | Kafka | Samsa | Samsa/Kafka |\n|---|---:|---:|---:|")
    for row in rows:
        k, s = row["kafka"], row["samsa"]
        if "p50_ms" in k or "p50" in k:
            key50 = "p50_ms" if "p50_ms" in k else "p50"
            key99 = "p99_ms" if "p99_ms" in k else "p99"
            for key in (key50, key99):
                kv, sv = k.get(key), s.get(key)
                ratio = f"{sv / kv:.2f}" if kv and sv else "-"
                print(f"| {row['load']} {key} (ms, lower is better) | {kv} | {sv} | {ratio} |")
            continue
        kv, sv = k.get("rate"), s.get("rate")
        err = k.get("error") or s.get("error")
        ratio = f"{sv / kv:.2f}" if kv and sv and not err else f"error: {str(err)[:80]}"
        print(f"| {row['load']} (records/s) | {kv or 0:,.0f} | {sv or 0:,.0f} | {ratio} |")
    if args.out:
        args.out.write_text(json.dumps({"rows": rows, "load_before": load0, "load_after": os.getloadavg()},
                                       indent=1, default=str))
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
