"""Apache Kafka's own tools (their main classes from the fetched jars) against Samsa and against
Kafka, output compared after normalising; Samsa's tools against Kafka; ``kafka-dump-log`` reading
Samsa's files and ``samsa dump-log`` reading Kafka's. Every tool run of a side starts at once
(threads), so the JVMs' start-up is paid in parallel, one JVM per tool per broker."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import harness
import kafka_process
from harness import create_topic
from waiting import wait_until

T = "diff-tools"
G = "diff-tools-g"


def _norm(text: str, side) -> str:
    text = text.replace(side.bootstrap, "BOOTSTRAP")
    text = re.sub(r"127\.0\.0\.1:\d+", "HOST:PORT", text)
    text = re.sub(r"\b[A-Za-z0-9_-]{22}\b", "<uuid>", text)  # topic and cluster ids
    text = re.sub(r'"logDir":"[^"]*"', '"logDir":"<dir>"', text)
    text = re.sub(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}\]", "[<time>]", text)  # log4j's timestamps
    return "\n".join(line.rstrip() for line in text.strip().splitlines())


def _kafka_tool_commands(bs: str) -> dict[str, tuple[str, list[str], str | None]]:
    """name -> (tool, args, stdin)."""
    return {
        "topics-describe": ("kafka-topics", ["--bootstrap-server", bs, "--describe", "--topic", T], None),
        "topics-list": ("kafka-topics", ["--bootstrap-server", bs, "--list", "--exclude-internal"], None),
        "topics-create-bad": ("kafka-topics", ["--bootstrap-server", bs, "--create", "--topic", "bad/name"], None),
        "configs-describe": ("kafka-configs", ["--bootstrap-server", bs, "--describe", "--entity-type", "topics",
                                               "--entity-name", T], None),
        "configs-alter-bad": ("kafka-configs", ["--bootstrap-server", bs, "--alter", "--entity-type", "topics",
                                                "--entity-name", T, "--add-config", "retention.ms=abc"], None),
        "groups-describe": ("kafka-consumer-groups", ["--bootstrap-server", bs, "--describe", "--group", G,
                                                      "--offsets"], None),
        "get-offsets": ("kafka-get-offsets", ["--bootstrap-server", bs, "--topic", T, "--time", "-1"], None),
        "console-consumer": ("kafka-console-consumer", ["--bootstrap-server", bs, "--topic", T, "--from-beginning",
                                                        "--max-messages", "3", "--partition", "0",
                                                        "--property", "print.key=true"], None),
        "acls-list": ("kafka-acls", ["--bootstrap-server", bs, "--list"], None),
        "transactions-list": ("kafka-transactions", ["--bootstrap-server", bs, "list"], None),
        "leader-election": ("kafka-leader-election", ["--bootstrap-server", bs, "--election-type", "preferred",
                                                      "--topic", T, "--partition", "0"], None),
        "reassign-list": ("kafka-reassign-partitions", ["--bootstrap-server", bs, "--list"], None),
        "log-dirs": ("kafka-log-dirs", ["--bootstrap-server", bs, "--describe", "--topic-list", T], None),
        "features": ("kafka-features", ["--bootstrap-server", bs, "describe"], None),
        "delete-records": ("kafka-delete-records", ["--bootstrap-server", bs, "--offset-json-file", "{json}"], None),
        "producer-perf": ("kafka-producer-perf-test", ["--topic", "diff-tools-perf", "--num-records", "2000",
                                                       "--record-size", "100", "--throughput", "-1",
                                                       "--producer-props", f"bootstrap.servers={bs}", "acks=all"],
                          None),
        "console-producer": ("kafka-console-producer", ["--bootstrap-server", bs, "--topic", "diff-tools-cp"],
                             "a\nb\nc\n"),
    }


@pytest.fixture(scope="module")
def tool_runs(sides, tmp_path_factory):
    """Every tool of the list, run against each side (all at once), after the same setup on each."""
    from test_groups_admin import _commit, _coordinator
    tmp = tmp_path_factory.mktemp("tools")
    jobs = {}
    for s in sides:
        create_topic(s, T, 2, {"retention.ms": "3600000"})
        create_topic(s, "diff-tools-perf")
        create_topic(s, "diff-tools-cp")
        now = int(time.time() * 1000)  # (timestamps of 1970 would be past retention.ms at once)
        s.produce(T, [(b"k1", b"one", now), (b"k2", b"two", now + 1), (b"k3", b"three", now + 2)])
        _coordinator(s, G)
        wait_until(lambda: _commit(s, G, T, 2) == [(0, 0)], f"an offset committed on {s.name}", 60)
        dr = tmp / f"dr-{s.name}.json"
        dr.write_text('{"partitions": [{"topic": "%s", "partition": 1, "offset": 0}], "version": 1}' % T)
        for name, (tool, args, stdin) in _kafka_tool_commands(s.bootstrap).items():
            if name not in NAMES:
                continue
            jobs[(s.name, name)] = (kafka_process.TOOLS[tool], [a.replace("{json}", str(dr)) for a in args], stdin)
    with ThreadPoolExecutor(max_workers=6) as pool:
        futures = {k: pool.submit(kafka_process.run_tool, main, *args, input=stdin, timeout=240)
                   for k, (main, args, stdin) in jobs.items()}
        out = {k: f.result() for k, f in futures.items()}
    return {k: (r.returncode, _norm(r.stdout, next(s for s in sides if s.name == k[0])),
                _norm(r.stderr, next(s for s in sides if s.name == k[0]))) for k, r in out.items()}


# What ./test runs: each JVM costs 1-2 s on a quiet machine and 15-40 s on a loaded one, so the
# suite's budget takes these; SAMSA_KAFKA_TOOLS=all runs every tool of the list (34 JVMs).
CORE = ["topics-describe", "topics-create-bad", "configs-describe", "groups-describe", "get-offsets",
        "console-consumer", "transactions-list", "delete-records"]
ALL_TOOLS = os.environ.get("SAMSA_KAFKA_TOOLS") == "all"
NAMES = list(_kafka_tool_commands("x")) if ALL_TOOLS else CORE
VARIABLE = {"producer-perf"}  # prints throughput figures: only the exit status and the shape are compared


@pytest.mark.parametrize("name", NAMES)
def test_kafka_tool(diff, tool_runs, name):
    def run(s):
        rc, out, err = tool_runs[(s.name, name)]
        if name in VARIABLE:  # progress lines come every 5 s: the summary line's shape only
            out = re.sub(r"[\d.]+", "N", out.splitlines()[-1] if out else "")
        if name == "topics-list":  # the other scenarios' topics differ: this module's only
            out = "\n".join(line for line in out.splitlines() if line.startswith("diff-tools"))
        if name == "transactions-list":  # producer ids are the broker's to pick; no order promised
            rows = [[c.strip() for c in line.split("\t")] for line in out.splitlines()]
            out = "\n".join(sorted("\t".join(r[:2] + ["<pid>"] + r[3:]) if len(r) > 3 and r[2].isdigit()
                                    else "\t".join(r) for r in rows))
        err = "\n".join(line for line in err.splitlines() if "WARN" not in line)
        return {"rc": rc, "stdout": out, "stderr": err}
    diff(run)


def _segment(log_dir: Path, topic: str) -> Path:
    return sorted((log_dir / f"{topic}-0").glob("*.log"))[0]


def test_kafka_dump_log_reads_samsa_segment(samsa_broker, samsa_side, tool_runs):
    if samsa_side is None:
        pytest.skip("Samsa's side not run")
    seg = _segment(Path(samsa_broker.overrides["log.dirs"]), T)
    r = kafka_process.run_tool(kafka_process.TOOLS["kafka-dump-log"], "--files", str(seg), "--print-data-log")
    assert r.returncode == 0, r.stderr
    assert "baseOffset: 0 lastOffset: 2 count: 3" in r.stdout, r.stdout
    assert "key: k2 payload: two" in r.stdout, r.stdout
    idx = seg.with_suffix(".index")
    if idx.exists():
        r = kafka_process.run_tool(kafka_process.TOOLS["kafka-dump-log"], "--files", str(idx))
        assert r.returncode == 0 and "Exception" not in r.stdout + r.stderr, r.stdout + r.stderr


def test_samsa_dump_log_reads_kafka_segment(kafka, kafka_side, tool_runs):
    if kafka_side is None:
        pytest.skip("Kafka's side not run")
    seg = _segment(kafka.log_dir, T)
    r = subprocess.run([sys.executable, "-m", "samsa.cli.main", "dump-log", "--files", str(seg), "--print-data-log"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "baseOffset: 0 lastOffset: 2 count: 3" in r.stdout, r.stdout
    assert "payload: two" in r.stdout, r.stdout


SAMSA_TOOLS = {
    "topics-describe": ["topics", "--describe", "--topic", T],
    "configs-describe": ["configs", "--describe", "--entity-type", "topics", "--entity-name", T],
    "groups-describe": ["consumer-groups", "--describe", "--group", G, "--offsets"],
    "leader-election": ["leader-election", "--election-type", "preferred", "--topic", T, "--partition", "0"],
}


@pytest.mark.parametrize("name", list(SAMSA_TOOLS))
def test_samsa_tool_against_kafka(diff, tool_runs, name):
    """Samsa's tool prints the same against Kafka as against Samsa."""
    def run(s):
        r = subprocess.run([sys.executable, "-m", "samsa.cli.main", *SAMSA_TOOLS[name], "--bootstrap-server",
                            s.bootstrap], capture_output=True, text=True, timeout=60)
        return {"rc": r.returncode, "stdout": _norm(r.stdout, s), "stderr": _norm(r.stderr, s)}
    diff(run)
