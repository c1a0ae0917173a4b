"""librdkafka's own integration tests against a Samsa broker: a compatibility oracle.

    .venv/bin/python bench/librdkafka_suite.py --tests-dir PATH/librdkafka/tests [--only 0011,0092] [--timeout 300]

With ``--brokers 3`` the broker is a ZooKeeper cluster of three (the transaction tests create
topics with replication factor 3, as librdkafka's own harness runs three brokers).
With ``--broker kafka`` the same tests run against Apache Kafka 4.4.0 KRaft nodes
(tests/kafka_process.py) instead, for the reference totals; ``--kafka-version 4.4.0`` is what
the share consumer tests (0170-0185, ``TEST_BRKVER(4, 2, 0, 0)``) need not to skip themselves.

PATH is a librdkafka v2.x source release whose tests you built yourself (``./configure
--no-download && make && make -C tests build``); this script builds nothing. It starts one
Samsa broker configured as librdkafka's test harness configures Kafka (``num.partitions=4``,
``group.initial.rebalance.delay.ms`` left at Kafka's 3000, ``auto.create.topics.enable``,
``group.share.min.record.lock.duration.ms=1000``),
then runs every test that needs a broker as its own ``test-runner`` process (``TESTS=NNNN``,
``TEST_KAFKA_VERSION=3.9.0``), one after the other, and prints one line a test and the totals.
Not part of ``./test``: a failure here is a lead to a bug, found and fixed with a test of ours.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "cluster"))

from broker_process import BrokerProcess  # noqa: E402
from cluster_harness import Cluster  # noqa: E402

# librdkafka's harness configures Kafka so (and leaves the initial rebalance delay at 3000 ms); for
# Kafka 4.2+ (its share-consumer tests, 0170-0190, set locks of 3 s) it lowers the share groups'
# minimum lock duration (tests/cluster_testing.py, run-all-tests.sh).
HARNESS_CONFIG = {"num.partitions": 4, "group.initial.rebalance.delay.ms": 3000, "auto.create.topics.enable": "true",
                  "group.share.min.record.lock.duration.ms": 1000}

# Tests that need more than one broker, SSL/SASL/OAUTHBEARER, a ZooKeeper address, or that
# only run with KAFKA_PATH (Kafka's own scripts): they cannot run against one Samsa broker.
NOT_FOR_ONE_BROKER = re.compile(r"ssl|sasl|oauth|auth|follower|0097|0101|0124|0126|0128|0133|0134|0135")


def broker_tests(tests_dir: Path, exclude: bool = True) -> list[str]:
    """Names of the tests in test.c's table that need a broker (not flagged TEST_F_LOCAL/MANUAL)."""
    source = (tests_dir / "test.c").read_text()
    table = source[source.index("struct test tests[] = {"):]
    table = table[:table.index("\n};")]
    out = []
    for m in re.finditer(r"_TEST\((\w+),\s*([^,)]*)", table):
        name, flags = m.group(1), m.group(2)
        if "TEST_F_LOCAL" in flags or "TEST_F_MANUAL" in flags or name.startswith("8"):
            continue
        if not (exclude and NOT_FOR_ONE_BROKER.search(name)) and name[:4] not in {n[:4] for n in out}:
            out.append(name)  # TESTS=NNNN runs every test of that number
    return out


# Some tests run Kafka's scripts from $KAFKA_PATH/bin: Samsa's tools take the same flags.
KAFKA_SCRIPTS = {"kafka-topics.sh": "topics", "kafka-configs.sh": "configs",
                 "kafka-consumer-groups.sh": "consumer-groups", "kafka-acls.sh": "acls"}


def kafka_path(where: Path) -> Path:
    """A directory that looks like a Kafka installation to the tests: bin/ scripts running samsa's tools."""
    bin_dir = where / "bin"
    bin_dir.mkdir(parents=True)
    for script, tool in KAFKA_SCRIPTS.items():
        path = bin_dir / script
        path.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m samsa.cli.main {tool} "$@"\n')
        path.chmod(0o755)
    return where


def real_kafka_path(where: Path) -> Path:
    """A KAFKA_PATH whose bin/*.sh run Apache Kafka's own tools (tests/kafka_process.py's jars) against Samsa."""
    sys.path.insert(0, str(ROOT / "tests"))
    import kafka_process
    bin_dir = where / "bin"
    bin_dir.mkdir(parents=True)
    for tool, main_class in kafka_process.TOOLS.items():
        path = bin_dir / f"{tool}.sh"
        cmd = " ".join(f"'{a}'" for a in kafka_process.java(main_class))
        path.write_text(f'#!/bin/sh\nexec {cmd} "$@"\n')
        path.chmod(0o755)
    return where


class KafkaNodes:
    """Apache Kafka 4.4.0 nodes (tests/kafka_process.py) with the Samsa broker's face here: bootstrap, brokers, stop."""

    def __init__(self, procs):
        self.brokers = dict(enumerate(procs))

    @property
    def bootstrap(self) -> str:
        return ",".join(p.bootstrap for p in self.brokers.values())

    def stop(self) -> None:
        for p in self.brokers.values():
            p.stop()


def run_test(tests_dir: Path, name: str, conf: Path, timeout: float, kafka: Path,
             bootstrap: str, log_dir: Path | None = None, kafka_version: str = "3.9.0",
             group_protocol: str | None = None) -> tuple[str, float, str]:
    env = dict(os.environ, TESTS=name[:4], TEST_KAFKA_VERSION=kafka_version, RDKAFKA_TEST_CONF=str(conf),
               KAFKA_PATH=str(kafka), BROKERS=bootstrap, PYTHONPATH=str(ROOT),
               LD_LIBRARY_PATH=f"{tests_dir.parent / 'src'}:{tests_dir.parent / 'src-cpp'}")
    if group_protocol:  # librdkafka's switch: its consumers use group.protocol=consumer (KIP-848)
        env["TEST_CONSUMER_GROUP_PROTOCOL"] = group_protocol
    started = time.monotonic()
    try:
        r = subprocess.run(["./test-runner"], cwd=tests_dir, env=env, capture_output=True, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired as e:
        out = "".join(x.decode(errors="replace") if isinstance(x, bytes) else (x or "") for x in (e.stdout, e.stderr))
        if log_dir is not None:
            (log_dir / f"{name}.log").write_text(out)
        return "TIMEOUT", time.monotonic() - started, out[-2000:].strip().splitlines()[-1:][0] if out.strip() else ""
    out = re.sub(r"\x1b\[[0-9;]*m", "", r.stdout + r.stderr)
    if log_dir is not None:
        (log_dir / f"{name}.log").write_text(out)
    row = re.search(rf"\|\s*{re.escape(name)}\s*\|\s*(\w+)\s*\|", out)  # the test's row of the summary table
    if r.returncode == 0 and row is not None and row.group(1) == "SKIPPED":
        verdict = "SKIPPED"
    else:
        verdict = "PASSED" if r.returncode == 0 else "FAILED"
    why = ""
    if verdict == "FAILED":
        # The first failure is the subtest's own; its message is the line after the ### banner.
        found = re.search(r'### Test "([^"]*)" failed at [^\n]*###\n([^\n]*)', out)
        why = f"{found.group(1)}: {found.group(2)}"[:300] if found else out.strip().splitlines()[-1][:300]
    return verdict, time.monotonic() - started, why


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tests-dir", type=Path, required=True, help="librdkafka's tests/ directory, built")
    ap.add_argument("--only", help="comma list of test numbers")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per test")
    ap.add_argument("--log-dir", type=Path, help="write each test's whole output to LOG_DIR/<test>.log")
    ap.add_argument("--brokers", type=int, default=1,
                    help="more than 1: a ZooKeeper cluster of that many brokers (tests that create topics with "
                         "replication factor 3, such as 0103, need 3)")
    ap.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                    help="a broker config for the run, e.g. authorizer.class.name=… for the ACL tests (0081)")
    ap.add_argument("--kafka-tools", choices=("samsa", "kafka"), default="samsa",
                    help="what $KAFKA_PATH/bin/*.sh run: Samsa's tools, or Apache Kafka 4.4.0's own "
                         "(the jars tests/kafka/pom.xml fetches)")
    ap.add_argument("--timeout-multiplier", type=float,
                    help="test.timeout.multiplier in the tests' config: their own timeouts scaled (a loaded machine, "
                         "Kafka's JVM tools)")
    ap.add_argument("--group-protocol", choices=("classic", "consumer"),
                    help="TEST_CONSUMER_GROUP_PROTOCOL: 'consumer' runs the tests' consumers with the consumer "
                         "group protocol (KIP-848); TEST_KAFKA_VERSION is then 4.0.0 unless --kafka-version")
    ap.add_argument("--kafka-version",
                    help="TEST_KAFKA_VERSION (default 3.9.0, or 4.0.0 with --group-protocol consumer); "
                         "4.4.0 runs the share consumer tests (0170-0185 need 4.2)")
    ap.add_argument("--broker", choices=("samsa", "kafka"), default="samsa",
                    help="what the tests run against: Samsa, or Apache Kafka 4.4.0 KRaft nodes (bench/kafka_nodes.py; "
                         "--brokers 1 or 3) for the same tests' totals on the reference broker")
    args = ap.parse_args()
    kafka_version = args.kafka_version or ("4.0.0" if args.group_protocol == "consumer" else "3.9.0")
    config = {**HARNESS_CONFIG, **dict(o.split("=", 1) for o in args.override)}
    tests_dir = args.tests_dir.resolve()
    if not (tests_dir / "test-runner").exists():
        ap.error(f"no test-runner in {tests_dir}: build librdkafka's tests first")
    names = broker_tests(tests_dir, exclude=not args.only)  # --only names them: run them as asked
    if args.only:
        wanted = set(args.only.split(","))
        names = [n for n in names if n[:4] in wanted]
    if args.log_dir is not None:
        args.log_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="samsa-rdk-") as tmp:
        if args.broker == "kafka":
            import kafka_process
            broker = KafkaNodes(kafka_process.start_cluster(Path(tmp) / "kafka-nodes", args.brokers, **config))
        elif args.brokers > 1:
            broker = Cluster(Path(tmp), size=args.brokers, **config).start()
        else:
            broker = BrokerProcess(Path(tmp), **config).start()
        conf = Path(tmp) / "test.conf"
        conf.write_text(f"bootstrap.servers={broker.bootstrap}\n" + (
            f"test.timeout.multiplier={args.timeout_multiplier}\n" if args.timeout_multiplier else ""))
        kafka = (real_kafka_path if args.kafka_tools == "kafka" else kafka_path)(Path(tmp) / "kafka")
        results = []
        try:
            for name in names:
                verdict, took, why = run_test(tests_dir, name, conf, args.timeout, kafka, broker.bootstrap,
                                             args.log_dir, kafka_version, args.group_protocol)
                results.append((name, verdict))
                print(f"{name:<40} {verdict:<8} {took:6.1f} s  {why}", flush=True)
                procs = [b.proc for b in broker.brokers.values()] if isinstance(broker, (Cluster, KafkaNodes)) \
                    else [broker.proc]
                if any(proc.poll() is not None for proc in procs):
                    print("a broker exited: stopping here", flush=True)
                    break
        finally:
            broker.stop()
    counts = {v: sum(1 for _, r in results if r == v) for v in ("PASSED", "FAILED", "TIMEOUT", "SKIPPED")}
    print(f"\n{len(results)} tests: " + ", ".join(f"{n} {v.lower()}" for v, n in counts.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
