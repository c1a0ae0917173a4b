"""`samsa console-consumer`: the seeds' walkthroughs, run as a user runs them."""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import threading
import time

import pytest
from confluent_kafka import Producer

from cli_tools import one_error_line, samsa
from samsa.client.types import NewTopic
from waiting import wait_until


def produce(broker, topic: str, values: list[bytes], partition: int | None = None, **kw) -> None:
    p = Producer({"bootstrap.servers": broker.bootstrap_servers})
    for v in values:
        p.produce(topic, v, **({"partition": partition} if partition is not None else {}), **kw)
    assert p.flush(30) == 0


def cc(broker, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return samsa("console-consumer", "--bootstrap-server", broker.bootstrap_servers, *args, timeout=timeout)


@pytest.fixture(scope="module")
def topics(broker, admin):
    admin.create_topics([NewTopic(t, n, 1) for t, n in
                         [("srktest", 1), ("two", 2), ("props", 1), ("tail", 1), ("inc-a", 1), ("inc-b", 1),
                          ("nope-c", 1), ("pubsub", 2), ("longs", 1)]])


def test_from_beginning_prints_each_value_and_the_count(broker, topics):
    produce(broker, "srktest", [b"This is my first kafka's message from shell client", b"haha is ok?"])
    r = cc(broker, "--topic", "srktest", "--from-beginning", "--max-messages", "2")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["This is my first kafka's message from shell client", "haha is ok?"]
    assert r.stderr.strip().splitlines()[-1] == "Processed a total of 2 messages"


def test_print_properties(broker, topics):
    p = Producer({"bootstrap.servers": broker.bootstrap_servers})
    p.produce("props", b"v1", key=b"k1", timestamp=1_700_000_000_123, headers=[("h1", b"x"), ("h2", None)])
    p.produce("props", b"v2", timestamp=1_700_000_000_456)
    p.flush(30)
    r = cc(broker, "--topic", "props", "--from-beginning", "--max-messages", "2",
           "--property", "print.key=true", "--property", "print.timestamp=true", "--property", "print.partition=true",
           "--property", "print.offset=true", "--property", "print.headers=true", "--property", "key.separator=|")
    assert r.stdout.splitlines() == [
        "CreateTime:1700000000123|Partition:0|Offset:0|h1:x,h2:null|k1|v1",
        "CreateTime:1700000000456|Partition:0|Offset:1|NO_HEADERS|null|v2"]
    r = cc(broker, "--topic", "props", "--from-beginning", "--max-messages", "1", "--property", "print.key=true")
    assert r.stdout == "k1\tv1\n"  # the default key.separator is a tab
    r = cc(broker, "--topic", "props", "--from-beginning", "--max-messages", "1", "--property", "print.value=false",
           "--property", "print.key=true")
    assert r.stdout == "k1\n"


def test_partition_and_offset(broker, topics):
    produce(broker, "two", [b"p0-%d" % i for i in range(5)], partition=0)
    produce(broker, "two", [b"p1-%d" % i for i in range(5)], partition=1)
    r = cc(broker, "--topic", "two", "--partition", "1", "--offset", "2", "--max-messages", "3")
    assert r.stdout.splitlines() == ["p1-2", "p1-3", "p1-4"]
    r = cc(broker, "--topic", "two", "--partition", "0", "--offset", "earliest", "--max-messages", "1")
    assert r.stdout.splitlines() == ["p0-0"]
    r = cc(broker, "--topic", "two", "--partition", "0", "--offset", "latest", "--timeout-ms", "1000")
    assert r.stdout == "" and "Processed a total of 0 messages" in r.stderr


def test_default_is_the_end_live_tail_two_terminals(broker, topics):
    """Terminal 1 runs the consumer (no --from-beginning); terminal 2 produces; lines appear."""
    produce(broker, "tail", [b"old-%d" % i for i in range(3)])
    proc = subprocess.Popen([sys.executable, "-m", "samsa.cli.main", "console-consumer", "--bootstrap-server",
                             broker.bootstrap_servers, "--topic", "tail"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)
    reader.start()
    try:
        probes = iter(range(1000))

        def probe_seen() -> bool:  # until the consumer has its position, a probe may be missed: send another
            produce(broker, "tail", [b"live-%d" % next(probes)])
            return bool(lines) or proc.poll() is not None
        wait_until(probe_seen, "the consumer to print a probe", 30, interval=0.3)
        assert lines, proc.stderr.read() if proc.poll() is not None else "no output"
        produce(broker, "tail", [b"hello from terminal 2"])
        wait_until(lambda: "hello from terminal 2\n" in lines, "the live line", 10)
        assert not any(line.startswith("old-") for line in lines)  # it started at the end
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0
    assert f"Processed a total of {len(lines)} messages" in err


def test_include_regex_and_legacy_whitelist(broker, topics):
    produce(broker, "inc-a", [b"a"])
    produce(broker, "inc-b", [b"b"])
    produce(broker, "nope-c", [b"c"])
    r = cc(broker, "--include", "inc-.*", "--from-beginning", "--max-messages", "2", "--timeout-ms", "15000")
    assert sorted(r.stdout.split()) == ["a", "b"]
    r = cc(broker, "--whitelist", "inc-a,nope-c", "--from-beginning", "--max-messages", "2", "--timeout-ms", "15000")
    assert sorted(r.stdout.split()) == ["a", "c"]


def test_groups_publish_subscribe_and_queue(broker, topics):
    produce(broker, "pubsub", [b"m%d" % i for i in range(20)])
    # two groups: each sees every message (publish-subscribe)
    for group in ("testGroup", "testGroup-2"):
        r = cc(broker, "--topic", "pubsub", "--consumer-property", f"group.id={group}", "--from-beginning",
               "--max-messages", "20")
        assert sorted(r.stdout.split()) == sorted("m%d" % i for i in range(20))
    # the group committed its offsets: a second run of testGroup has nothing left to read
    r = cc(broker, "--topic", "pubsub", "--group", "testGroup", "--timeout-ms", "3000")
    assert r.stdout == ""
    # two members of one group share the partitions (queue)
    args = [sys.executable, "-m", "samsa.cli.main", "console-consumer", "--bootstrap-server",
            broker.bootstrap_servers, "--topic", "pubsub", "--group", "queue", "--from-beginning",
            "--timeout-ms", "8000", "--consumer-property", "heartbeat.interval.ms=300",
            "--consumer-property", "session.timeout.ms=6000"]
    procs = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    wait_for_members(broker, "queue", 2)
    produce(broker, "pubsub", [b"q%d" % i for i in range(20)], partition=0)
    produce(broker, "pubsub", [b"q%d" % i for i in range(20, 40)], partition=1)
    outs = [p.communicate(timeout=90)[0].split() for p in procs]
    everything = sorted(outs[0] + outs[1])
    assert everything == sorted(["m%d" % i for i in range(20)] + ["q%d" % i for i in range(40)])
    assert any(w.startswith("q") for w in outs[0]) and any(w.startswith("q") for w in outs[1])


def wait_for_members(broker, group: str, n: int, timeout: float = 30) -> None:
    """Until the group is stable with ``n`` members holding partitions (asked with confluent-kafka)."""
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})

    def stable() -> bool:
        desc = admin.describe_consumer_groups([group])[group].result(10)
        return str(desc.state).endswith("STABLE") and len(desc.members) == n and \
            all(m.assignment.topic_partitions for m in desc.members)
    wait_until(stable, f"group {group} Stable with {n} members", timeout, interval=0.2)


def test_deserializers_and_isolation_level(broker, topics):
    produce(broker, "longs", [struct.pack(">q", 1234567890123)], key=struct.pack(">i", 7))
    r = cc(broker, "--topic", "longs", "--from-beginning", "--max-messages", "1", "--isolation-level", "read_committed",
           "--value-deserializer", "org.apache.kafka.common.serialization.LongDeserializer",
           "--key-deserializer", "org.apache.kafka.common.serialization.IntegerDeserializer",
           "--property", "print.key=true")
    assert r.stdout == "7\t1234567890123\n", r.stderr


def test_consumer_config_file_and_properties(broker, topics, tmp_path):
    config = tmp_path / "consumer.properties"
    config.write_text("group.id=from-file\nauto.offset.reset=earliest\n")
    r = cc(broker, "--topic", "srktest", "--consumer.config", str(config), "--max-messages", "1")
    assert r.returncode == 0 and r.stdout.splitlines() == ["This is my first kafka's message from shell client"]
    r = cc(broker, "--topic", "srktest", "--consumer.config", str(config), "--group", "other")
    assert "do not match" in one_error_line(r)


@pytest.mark.parametrize("args, message", [
    ([], "Exactly one of include/topic is required."),
    (["--topic", "a", "--include", "b"], "Exactly one of include/topic is required."),
    (["--include", "a", "--partition", "0"], "The topic is required when partition is specified."),
    (["--topic", "a", "--offset", "3"], "The partition is required when offset is specified."),
    (["--topic", "a", "--partition", "0", "--offset", "soon"], "The provided offset value is incorrect"),
    (["--topic", "a", "--partition", "0", "--offset", "2", "--from-beginning"], "from-beginning and offset"),
    (["--topic", "a", "--group", "g", "--partition", "0"], "group and partition cannot be specified together"),
    (["--topic", "a", "--from-beginning", "--consumer-property", "auto.offset.reset=latest"],
     "Can't simultaneously specify --from-beginning and 'auto.offset.reset=latest'"),
])
def test_usage_errors(broker, args, message):
    r = cc(broker, *args)
    assert r.returncode == 1 and message in r.stderr


def test_no_arguments_prints_usage_and_bad_server_is_bounded():
    r = samsa("console-consumer")
    assert r.returncode == 1 and "--bootstrap-server" in r.stderr
    from broker_process import free_port
    t0 = time.time()
    r = samsa("console-consumer", "--bootstrap-server", f"127.0.0.1:{free_port()}", "--topic", "x",
              "--consumer-property", "request.timeout.ms=1500", timeout=60)
    assert r.returncode == 1 and "Could not connect to any bootstrap server" in r.stderr
    assert "Processed a total of 0 messages" in r.stderr and time.time() - t0 < 30


def test_sigterm_stops_cleanly(broker, topics):
    proc = subprocess.Popen([sys.executable, "-m", "samsa.cli.main", "console-consumer", "--bootstrap-server",
                             broker.bootstrap_servers, "--topic", "srktest", "--from-beginning"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = proc.stdout.readline()
    assert first.startswith("This is my first")
    os.kill(proc.pid, signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "Processed a total of 2 messages" in err
