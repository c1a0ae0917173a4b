"""`samsa consumer-groups` against a broker, checked against a known group state."""

from __future__ import annotations

import subprocess
import sys

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

import samsa.embedded
from cli_tools import error_after_unreachable_warning


@pytest.fixture(scope="module")
def broker():
    with samsa.embedded.Broker() as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})
        admin.create_topics([NewTopic("t", 3, 1)])["t"].result()
        p = Producer({"bootstrap.servers": b.bootstrap_servers})
        for i in range(30):
            p.produce("t", b"v%d" % i, partition=i % 3)  # 10 records in each partition
        assert p.flush(30) == 0
        yield b


def cg(broker, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "samsa.cli.main", "consumer-groups", "--bootstrap-server",
                           broker.bootstrap_servers, *args], capture_output=True, text=True, timeout=60)


def rows(out: str) -> list[list[str]]:
    return [line.split() for line in out.splitlines() if line.strip()]


def consumer(broker, group: str) -> Consumer:
    return Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": group, "enable.auto.commit": False,
                     "auto.offset.reset": "earliest", "session.timeout.ms": 6000})


def commit(broker, group: str, offsets: dict[int, int]) -> None:
    c = consumer(broker, group)
    c.commit(offsets=[TopicPartition("t", p, o) for p, o in offsets.items()], asynchronous=False)
    c.close()


def test_usage_and_bad_combinations(broker):
    r = subprocess.run([sys.executable, "-m", "samsa.cli.main", "consumer-groups"], capture_output=True, text=True)
    assert r.returncode == 1 and "--reset-offsets" in r.stderr
    r = cg(broker, "--describe")
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1


def test_describe_an_inactive_group(broker):
    commit(broker, "g-inactive", {0: 4, 1: 10})
    r = cg(broker, "--describe", "--group", "g-inactive")
    assert r.returncode == 0, r.stderr
    assert "Consumer group 'g-inactive' has no active members." in r.stdout
    table = rows(r.stdout)
    header = table.index(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID",
                          "HOST", "CLIENT-ID"])
    assert table[header + 1:] == [["g-inactive", "t", "0", "4", "10", "6", "-", "-", "-"],
                                  ["g-inactive", "t", "1", "10", "10", "0", "-", "-", "-"]]
    assert "g-inactive" in rows(cg(broker, "--list").stdout)[0] or ["g-inactive"] in rows(cg(broker, "--list").stdout)


def test_active_group_members_state_and_refused_reset(broker):
    c = consumer(broker, "g-active")
    c.subscribe(["t"])
    got = 0
    while got < 30:
        m = c.poll(1)
        if m is not None and not m.error():
            got += 1
    c.commit(asynchronous=False)
    try:
        described = rows(cg(broker, "--describe", "--group", "g-active").stdout)
        assert {tuple(r[:6]) for r in described[1:]} == {("g-active", "t", str(p), "10", "10", "0") for p in range(3)}
        assert all(r[6].startswith("rdkafka-") and r[7] == "/127.0.0.1" for r in described[1:])
        members = rows(cg(broker, "--describe", "--group", "g-active", "--members", "--verbose").stdout)
        assert members[0] == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"]
        assert members[1][4:] == ["3", "t(0,1,2)"]
        state = cg(broker, "--describe", "--group", "g-active", "--state").stdout
        assert "Stable" in state and "range" in state
        r = cg(broker, "--reset-offsets", "--group", "g-active", "--topic", "t", "--to-earliest", "--execute")
        assert r.returncode == 1
        assert r.stderr.strip() == ("Assignments can only be reset if the group 'g-active' is inactive, "
                                    "but the current state is Stable.")
        r = cg(broker, "--delete", "--group", "g-active")
        assert r.returncode == 1
        assert rows(r.stdout)[0] == ["Deletion", "of", "some", "consumer", "groups", "failed:"]
        assert r.stdout.strip().splitlines()[1].startswith("* Group 'g-active' could not be deleted due to:")
    finally:
        c.close()


def test_reset_offsets_plans_and_executes(broker):
    commit(broker, "g-reset", {0: 5, 1: 5, 2: 5})
    dry = rows(cg(broker, "--reset-offsets", "--group", "g-reset", "--topic", "t", "--to-earliest").stdout)
    assert dry[1:] == [["g-reset", "t", str(p), "0"] for p in range(3)]
    assert rows(cg(broker, "--describe", "--group", "g-reset").stdout)[-1][3] == "5"  # dry run changed nothing
    cases = {
        ("--to-offset", "7"): ["7", "7", "7"],
        ("--shift-by", "-100"): ["0", "0", "0"],    # clamped to the earliest
        ("--shift-by", "4"): ["4", "4", "4"],
        ("--to-latest",): ["10", "10", "10"],
        ("--by-duration", "PT1H"): ["0", "0", "0"],
        ("--to-datetime", "2000-01-01T00:00:00.000Z"): ["0", "0", "0"],
    }
    for spec, expected in cases.items():
        r = cg(broker, "--reset-offsets", "--group", "g-reset", "--topic", "t", *spec, "--execute")
        assert r.returncode == 0, r.stderr
        assert [row[3] for row in rows(r.stdout)[1:]] == expected, spec
    r = cg(broker, "--reset-offsets", "--group", "g-reset", "--topic", "t:1", "--to-offset", "3", "--execute")
    assert rows(r.stdout)[1:] == [["g-reset", "t", "1", "3"]]


def test_delete_offsets_and_groups(broker):
    commit(broker, "g-del", {0: 1, 1: 1})
    r = cg(broker, "--delete-offsets", "--group", "g-del", "--topic", "t:0")
    assert r.returncode == 0 and rows(r.stdout)[1:] == [["t", "0", "Successful"]]
    remaining = rows(cg(broker, "--describe", "--group", "g-del").stdout)
    assert [row[2] for row in remaining if row[0] == "g-del"] == ["1"]
    r = cg(broker, "--delete", "--group", "g-del")
    assert r.returncode == 0 and "Deletion of requested consumer groups ('g-del') was successful." in r.stdout
    r = cg(broker, "--describe", "--group", "g-del")
    assert r.returncode == 1 and "Error: Consumer group 'g-del' does not exist." in r.stderr


def test_unreachable_bootstrap_is_one_line():
    r = subprocess.run([sys.executable, "-m", "samsa.cli.main", "consumer-groups", "--bootstrap-server",
                        "127.0.0.1:1", "--list", "--timeout", "1500"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert "127.0.0.1:1" in error_after_unreachable_warning(r)
