"""``samsa consumer-groups`` (kafka-consumer-groups.sh) run as a subprocess against an embedded
broker, its output checked against a group state set up with confluent-kafka.

The known state: topic ``t`` has 3 partitions of 10 records each; group ``g1`` read them
and committed offsets 4, 7 and 10, then left.
"""

from __future__ import annotations

import queue
import threading
import time

import pytest
from cli_tools import error_after_unreachable_warning, one_error_line, samsa
from confluent_kafka import Consumer, Producer

from samsa.client.types import NewTopic, OffsetAndMetadata, TopicPartition
from waiting import wait_until

WAIT = 60.0
G1_COMMITTED = {0: 4, 1: 7, 2: 10}
TS_BASE = 1_600_000_000_000  # 2020-09-13T12:26:40Z: record i of topic "ts" is i minutes later
OFFSETS_HEADER = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
                  "CLIENT-ID"]


def consumer(broker, group: str, **conf) -> Consumer:
    return Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": group, "log_level": 2,
                     "auto.offset.reset": "earliest", "enable.auto.commit": False, "session.timeout.ms": 6000,
                     "heartbeat.interval.ms": 300, **conf})


@pytest.fixture(scope="module")
def state(broker, admin):
    """Topics t (3 x 10 records), ts (10 records a minute apart in 2020), recent (10 records
    ten minutes apart, the last ten minutes ago); group g1 as described above."""
    admin.create_topics([NewTopic("t", 3, 1), NewTopic("ts", 1, 1), NewTopic("recent", 1, 1)])
    p = Producer({"bootstrap.servers": broker.bootstrap_servers})
    for i in range(30):
        p.produce("t", b"v%d" % i, partition=i % 3)
    now = int(time.time() * 1000)
    for i in range(10):
        p.produce("ts", b"ts%d" % i, timestamp=TS_BASE + i * 60_000)
        p.produce("recent", b"r%d" % i, timestamp=now - (10 - i) * 600_000)
    assert p.flush(WAIT) == 0
    c = consumer(broker, "g1")
    c.subscribe(["t"])
    read = 0
    deadline = time.monotonic() + WAIT
    while read < 30 and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is None or m.error():
            continue
        read += 1
        if m.offset() < G1_COMMITTED[m.partition()]:  # commit part of what was read
            c.commit(message=m, asynchronous=False)
    c.close()
    assert read == 30
    committed = admin.list_consumer_group_offsets("g1")
    assert {tp.partition: o.offset for tp, o in committed.items()} == G1_COMMITTED
    return broker


def cg(broker, *args: str, timeout: float = 60):
    return samsa("consumer-groups", "--bootstrap-server", broker.bootstrap_servers, *args, timeout=timeout)


def ok(r) -> str:
    assert r.returncode == 0, (r.stdout, r.stderr)
    return r.stdout


def rows(out: str) -> list[list[str]]:
    return [line.split() for line in out.splitlines() if line.strip()]


def table(out: str, header: list[str]) -> list[list[str]]:
    """The rows under ``header`` in ``out`` (up to the next blank line)."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split() == header)
    body = []
    for line in lines[start + 1:]:
        if not line.strip():
            break
        body.append(line.split())
    return body


def copy_group(admin, group: str, offsets: dict[int, int], topic: str = "t") -> None:
    admin.alter_consumer_group_offsets(group, {TopicPartition(topic, p): o for p, o in offsets.items()})


def committed(admin, group: str) -> dict[tuple[str, int], int]:
    return {(tp.topic, tp.partition): o.offset for tp, o in admin.list_consumer_group_offsets(group).items()}


class Member:
    """A confluent-kafka consumer kept alive in a thread (all its calls made in that thread)."""

    def __init__(self, broker, group: str, topics: list[str], client_id: str):
        self.consumer = consumer(broker, group, **{"client.id": client_id})
        self.consumer.subscribe(topics)
        self.stop = threading.Event()
        self.calls: queue.Queue = queue.Queue()
        self.read = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            m = self.consumer.poll(0.05)
            if m is not None and not m.error():
                self.read += 1
            while not self.calls.empty():
                fn, done = self.calls.get()
                try:
                    done.put((True, fn(self.consumer)))
                except Exception as e:
                    done.put((False, e))

    def call(self, fn):
        done: queue.Queue = queue.Queue()
        self.calls.put((fn, done))
        good, value = done.get(timeout=WAIT)
        if not good:
            raise value
        return value

    def close(self) -> None:
        self.stop.set()
        self.thread.join(WAIT)
        self.consumer.close()


@pytest.fixture(scope="module")
def live(state, admin):
    """Group g-live: one active member (client id cli-member) that read all of t and committed."""
    m = Member(state, "g-live", ["t"], "cli-member")
    try:
        wait_until(lambda: m.read == 30, "the member to read t")
        m.call(lambda c: c.commit(asynchronous=False))

        def stable():
            d = admin.describe_consumer_groups(["g-live"])["g-live"]
            return d.state == "Stable" and len(d.members) == 1 and len(d.members[0].assignment) == 3
        wait_until(stable, "g-live to be Stable")
        yield m
    finally:
        m.close()


# ---------------------------------------------------------------------------- usage

def test_no_arguments_prints_usage():
    r = samsa("consumer-groups")
    assert r.returncode == 1
    for flag in ("--bootstrap-server", "--list", "--describe", "--reset-offsets", "--delete-offsets", "--to-datetime",
                 "--by-duration", "--shift-by", "--all-topics", "--members", "--verbose", "--timeout"):
        assert flag in r.stderr


@pytest.mark.parametrize("args, expected", [
    (["--list", "--describe"], "Command must include exactly one action"),
    (["--group", "g1"], "Command must include exactly one action"),
    (["--describe"], "Option [describe] takes one of these options: [all-groups], [group]"),
    (["--reset-offsets", "--topic", "t", "--to-earliest"],
     "Option [reset-offsets] takes one of these options: [all-groups], [group]"),
    (["--delete"], "Option [delete] takes one of these options: [all-groups], [group]"),
    (["--describe", "--group", "g", "--members", "--state"], "takes at most one of these options"),
    (["--describe", "--group", "g", "--all-groups"], "can't be used with option"),
    (["--reset-offsets", "--group", "g", "--topic", "t"], "Option [reset-offsets] takes one of these options"),
    (["--reset-offsets", "--group", "g", "--all-topics", "--to-earliest", "--to-latest"],
     "Option [reset-offsets] takes at most one of these options"),
    (["--reset-offsets", "--group", "g", "--to-earliest"],
     "Option [reset-offsets] takes one of these options: [all-topics], [topic]"),
    (["--reset-offsets", "--group", "g", "--topic", "t", "--all-topics", "--to-earliest"], "can't be used"),
    (["--reset-offsets", "--group", "g", "--topic", "t", "--to-earliest", "--dry-run", "--execute"],
     "only accepts one of [execute] and [dry-run]"),
    (["--delete-offsets", "--group", "g"], "Option [delete-offsets] takes the following options: [group], [topic]"),
    (["--delete-offsets", "--group", "a", "--group", "b", "--topic", "t"], "supports only one [group] at a time"),
    (["--list", "--group", "g"], 'Option "[group]" can\'t be used with option "[list]"'),
    (["--describe", "--group", "g", "--to-earliest"], 'Option "[to-earliest]" can\'t be used with option "[describe]"'),
    (["--describe", "--group", "g", "--topic", "t"], 'Option "[topic]" can\'t be used with option "[describe]"'),
    (["--list", "--members"], 'Option "[members]" can\'t be used with option "[list]"'),
    (["--delete", "--group", "g", "--execute"], 'Option "[execute]" can\'t be used with option "[delete]"'),
    (["--list", "--state", "Bogus"], "Invalid state list 'Bogus'. Valid states are:"),
    (["--describe", "--group", "g", "--state", "Stable"], "Option [describe] takes [state] without a value"),
    (["--reset-offsets", "--group", "g", "--topic", "t", "--to-datetime", "yesterday"], "Error parsing timestamp"),
    (["--reset-offsets", "--group", "g", "--topic", "t", "--to-datetime", "2020-13-01T00:00:00.000"],
     "Error parsing timestamp"),
    (["--reset-offsets", "--group", "g", "--topic", "t", "--by-duration", "1h"], "Error parsing duration"),
    (["--reset-offsets", "--group", "g", "--topic", "t", "--by-duration", "P1DT"], "Error parsing duration"),
    (["--reset-offsets", "--group", "g", "--topic", "t:x", "--to-earliest"], "Invalid partition list"),
    (["--reset-offsets", "--group", "g", "--topic", "t", "--to-offset", "abc"], "invalid int value"),
])
def test_bad_combinations_are_one_line(args, expected):
    # Nothing listens on port 1: each of these fails before connecting.
    line = one_error_line(samsa("consumer-groups", "--bootstrap-server", "127.0.0.1:1", *args, timeout=30))
    assert expected in line


def test_missing_bootstrap_server():
    assert one_error_line(samsa("consumer-groups", "--list")) == 'Missing required argument "[bootstrap-server]"'


def test_unreachable_bootstrap_is_one_line_in_bounded_time(tmp_path):
    config = tmp_path / "admin.properties"
    config.write_text("request.timeout.ms=500\ndefault.api.timeout.ms=1000\n")
    for extra in (["--command-config", str(config)], ["--timeout", "1000"]):
        started = time.monotonic()
        r = samsa("consumer-groups", "--bootstrap-server", "127.0.0.1:1", "--describe", "--group", "g1", *extra,
                  timeout=30)
        line = error_after_unreachable_warning(r)
        assert line.startswith("Error: Executing consumer group command failed due to ")
        assert "127.0.0.1:1" in line
        assert time.monotonic() - started < 20


# ---------------------------------------------------------------------------- list / describe

def test_list(state, admin):
    copy_group(admin, "g-list-other", {0: 1})
    out = ok(cg(state, "--list"))
    assert "g1" in out.splitlines() and "g-list-other" in out.splitlines()
    assert out.splitlines() == sorted(out.splitlines())
    with_state = rows(ok(cg(state, "--list", "--state")))
    assert with_state[0] == ["GROUP", "STATE"]
    assert ["g1", "Empty"] in with_state[1:]
    assert ["g1", "Empty"] in rows(ok(cg(state, "--list", "--state", "empty,Stable")))
    assert "g1" not in [r[0] for r in rows(ok(cg(state, "--list", "--state", "Stable")))]


def test_describe_inactive_group(state):
    r = cg(state, "--describe", "--group", "g1")
    out = ok(r)
    assert "Consumer group 'g1' has no active members." in out.splitlines()
    assert table(out, OFFSETS_HEADER) == [
        ["g1", "t", str(p), str(G1_COMMITTED[p]), "10", str(10 - G1_COMMITTED[p]), "-", "-", "-"] for p in range(3)]
    # Kafka's layout: %-15s at least for names, 10 for the partition, 15 for the numbers.
    lines = out.splitlines()
    assert ("GROUP           TOPIC           PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG             "
            "CONSUMER-ID     HOST            CLIENT-ID") in lines
    assert "g1              t               0          4               10              6               -" \
           "               -               -" in lines
    # The same with --offsets, the default view.
    again = ok(cg(state, "--describe", "--group", "g1", "--offsets"))
    assert table(again, OFFSETS_HEADER) == table(out, OFFSETS_HEADER)


def test_describe_members_and_state_of_inactive_group(state):
    out = ok(cg(state, "--describe", "--group", "g1", "--members"))
    assert out.strip() == "Consumer group 'g1' has no active members."
    out = ok(cg(state, "--describe", "--group", "g1", "--state"))
    assert rows(out) == [["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
                         ["g1", f"127.0.0.1:{state.port}", "(0)", "Empty", "0"]]


def test_describe_unknown_group(state):
    r = cg(state, "--describe", "--group", "no-such-group")
    assert one_error_line(r) == "Error: Consumer group 'no-such-group' does not exist."
    # Known and unknown together: the known one is shown, the unknown one reported.
    r = cg(state, "--describe", "--group", "no-such-group", "--group", "g1")
    assert r.returncode == 1
    assert r.stderr.strip() == "Error: Consumer group 'no-such-group' does not exist."
    assert len(table(r.stdout, OFFSETS_HEADER)) == 3


def test_describe_active_group(state, live):
    out = ok(cg(state, "--describe", "--group", "g-live"))
    assert "no active members" not in out
    described = table(out, OFFSETS_HEADER)
    assert [r[:6] for r in described] == [["g-live", "t", str(p), "10", "10", "0"] for p in range(3)]
    for r in described:
        assert r[6].startswith("cli-member-") and r[7] == "/127.0.0.1" and r[8] == "cli-member"

    out = ok(cg(state, "--describe", "--group", "g-live", "--members"))
    members = table(out, ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"])
    assert len(members) == 1 and members[0][0] == "g-live" and members[0][2:] == ["/127.0.0.1", "cli-member", "3"]
    out = ok(cg(state, "--describe", "--group", "g-live", "--members", "--verbose"))
    members = table(out, ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"])
    assert members[0][2:] == ["/127.0.0.1", "cli-member", "3", "t(0,1,2)"]

    out = ok(cg(state, "--describe", "--group", "g-live", "--state"))
    assert table(out, ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"]) == [
        ["g-live", f"127.0.0.1:{state.port}", "(0)", "range", "Stable", "1"]]
    lines = [line for line in out.splitlines() if line.strip()]
    assert lines[0] == "GROUP           COORDINATOR (ID)          ASSIGNMENT-STRATEGY  STATE           #MEMBERS"

    # --all-groups: every group, one state table.
    out = ok(cg(state, "--describe", "--all-groups", "--state"))
    by_group = {r[0]: r for r in table(out, ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE",
                                             "#MEMBERS"])}
    assert by_group["g-live"][-2:] == ["Stable", "1"] and by_group["g1"][-2:] == ["Empty", "0"]
    assert ["g-live", "Stable"] in rows(ok(cg(state, "--list", "--state", "Stable")))


def test_active_group_refuses_reset_and_delete(state, admin, live):
    before = committed(admin, "g-live")
    r = cg(state, "--reset-offsets", "--group", "g-live", "--topic", "t", "--to-earliest", "--execute")
    assert one_error_line(r) == ("Assignments can only be reset if the group 'g-live' is inactive, "
                                 "but the current state is Stable.")
    r = cg(state, "--reset-offsets", "--group", "g-live", "--all-topics", "--to-earliest", "--dry-run")
    assert one_error_line(r).startswith("Assignments can only be reset if the group 'g-live' is inactive")
    assert committed(admin, "g-live") == before

    r = cg(state, "--delete", "--group", "g-live")
    assert r.returncode == 1
    assert r.stdout.strip().splitlines() == ["Deletion of some consumer groups failed:",
                                             "* Group 'g-live' could not be deleted due to: The group is not empty."]

    r = cg(state, "--delete-offsets", "--group", "g-live", "--topic", "t:0")
    assert one_error_line(r) == "Error: Encounter some partition level error, see the follow-up details:"
    assert table(r.stdout, ["TOPIC", "PARTITION", "STATUS"]) == [
        ["t", "0", "Error:", "The", "consumer", "group", "is", "actively", "subscribed", "to", "the", "topic."]]
    assert committed(admin, "g-live") == before


# ---------------------------------------------------------------------------- reset offsets

def plan(out: str) -> list[list[str]]:
    return table(out, ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"])


def test_reset_dry_run_changes_nothing(state, admin):
    copy_group(admin, "g-dry", G1_COMMITTED)
    for extra in ([], ["--dry-run"]):
        r = cg(state, "--reset-offsets", "--group", "g-dry", "--topic", "t", "--to-earliest", *extra)
        assert plan(ok(r)) == [["g-dry", "t", str(p), "0"] for p in range(3)]
        assert ("WARN" in r.stderr) == (not extra)  # a reminder that nothing was done, without --dry-run
    lines = [line for line in r.stdout.splitlines() if line.strip()]
    assert lines[0] == "GROUP                          TOPIC                          PARTITION  NEW-OFFSET"
    assert committed(admin, "g-dry") == {("t", p): o for p, o in G1_COMMITTED.items()}
    described = table(ok(cg(state, "--describe", "--group", "g-dry")), OFFSETS_HEADER)
    assert [r[3] for r in described] == ["4", "7", "10"]


@pytest.mark.parametrize("spec, expected", [
    (["--to-earliest"], [0, 0, 0]),
    (["--to-latest"], [10, 10, 10]),
    (["--to-current"], [4, 7, 10]),
    (["--to-offset", "7"], [7, 7, 7]),
    (["--to-offset", "100"], [10, 10, 10]),        # clamped to the log end
    (["--shift-by", "-3"], [1, 4, 7]),
    (["--shift-by", "2"], [6, 9, 10]),             # the last one clamped to the log end
    (["--shift-by", "-5"], [0, 2, 5]),             # the first one clamped to the log start
    (["--by-duration", "P1D"], [0, 0, 0]),         # every record is younger than a day
    (["--by-duration", "PT0S"], [10, 10, 10]),     # none is newer than now: the log end
    (["--to-datetime", "2000-01-01T00:00:00.000"], [0, 0, 0]),
    (["--to-datetime", "2999-01-01T00:00:00.000Z"], [10, 10, 10]),
])
def test_reset_execute(state, admin, spec, expected):
    group = "g-reset-" + "".join(c for c in "-".join(spec) if c.isalnum() or c == "-")
    copy_group(admin, group, G1_COMMITTED)
    out = ok(cg(state, "--reset-offsets", "--group", group, "--topic", "t", *spec, "--execute"))
    assert plan(out) == [[group, "t", str(p), str(o)] for p, o in enumerate(expected)]
    assert committed(admin, group) == {("t", p): o for p, o in enumerate(expected)}
    described = table(ok(cg(state, "--describe", "--group", group)), OFFSETS_HEADER)
    assert [(r[2], r[3], r[5]) for r in described] == [(str(p), str(o), str(10 - o)) for p, o in enumerate(expected)]


@pytest.mark.parametrize("when, expected", [
    ("2020-09-13T12:30:00.000Z", 4),        # record i is at 12:26:40 + i minutes (UTC)
    ("2020-09-13T14:30:00.000+02:00", 4),   # the same moment
    ("2020-09-13T12:30:40.000Z", 4),        # exactly record 4's time
    ("2020-09-13T12:30:40.001Z", 5),
    ("2020-09-13T10:36:00.000-02:00", 10),  # 12:36 UTC, after the last record: the log end
])
def test_reset_to_datetime(state, admin, when, expected):
    group = "g-dt-" + "".join(c for c in when if c.isalnum())
    copy_group(admin, group, {0: 2}, topic="ts")
    out = ok(cg(state, "--reset-offsets", "--group", group, "--topic", "ts", "--to-datetime", when, "--execute"))
    assert plan(out) == [[group, "ts", "0", str(expected)]]
    assert committed(admin, group) == {("ts", 0): expected}


def test_reset_by_duration(state, admin):
    # Record i of "recent" is (10 - i) * 10 minutes old: 35 minutes ago falls between records 6 and 7.
    copy_group(admin, "g-dur", {0: 0}, topic="recent")
    out = ok(cg(state, "--reset-offsets", "--group", "g-dur", "--topic", "recent", "--by-duration", "PT35M",
                "--execute"))
    assert plan(out) == [["g-dur", "recent", "0", "7"]]
    assert committed(admin, "g-dur") == {("recent", 0): 7}


def test_reset_scopes_and_export(state, admin, tmp_path):
    copy_group(admin, "g-scope", G1_COMMITTED)
    copy_group(admin, "g-scope", {0: 5}, topic="ts")
    # Chosen partitions only.
    out = ok(cg(state, "--reset-offsets", "--group", "g-scope", "--topic", "t:0,2", "--to-offset", "1", "--execute"))
    assert plan(out) == [["g-scope", "t", "0", "1"], ["g-scope", "t", "2", "1"]]
    assert committed(admin, "g-scope") == {("t", 0): 1, ("t", 1): 7, ("t", 2): 1, ("ts", 0): 5}
    # --all-topics: every partition the group has an offset for.
    out = ok(cg(state, "--reset-offsets", "--group", "g-scope", "--all-topics", "--to-latest", "--execute"))
    assert plan(out) == [["g-scope", "t", "0", "10"], ["g-scope", "t", "1", "10"], ["g-scope", "t", "2", "10"],
                         ["g-scope", "ts", "0", "10"]]
    # Several --topic; CSV out; and the CSV back in with --from-file.
    out = ok(cg(state, "--reset-offsets", "--group", "g-scope", "--topic", "t:1", "--topic", "ts", "--shift-by",
                "-4", "--export"))
    assert out.splitlines() == ["t,1,6", "ts,0,6"]
    csv = tmp_path / "offsets.csv"
    csv.write_text("t,1,3\nts,0,99\n")
    out = ok(cg(state, "--reset-offsets", "--group", "g-scope", "--from-file", str(csv), "--execute"))
    assert plan(out) == [["g-scope", "t", "1", "3"], ["g-scope", "ts", "0", "10"]]  # 99 clamped
    assert committed(admin, "g-scope") == {("t", 0): 10, ("t", 1): 3, ("t", 2): 10, ("ts", 0): 10}


def test_reset_errors(state, admin):
    copy_group(admin, "g-reset-err", {0: 3})
    r = cg(state, "--reset-offsets", "--group", "g-reset-err", "--topic", "t", "--shift-by", "1", "--execute")
    assert one_error_line(r) == ("Error: Executing consumer group command failed due to Cannot shift offset for "
                                 "partition t-1 since there is no current committed offset")
    r = cg(state, "--reset-offsets", "--group", "g-reset-err", "--topic", "nope", "--to-earliest", "--execute")
    assert "nope" in one_error_line(r)
    r = cg(state, "--reset-offsets", "--group", "g-reset-err", "--topic", "t:7", "--to-earliest", "--execute")
    assert "Partition 7 of topic 't' does not exist" in one_error_line(r)
    assert committed(admin, "g-reset-err") == {("t", 0): 3}
    # A group that does not exist yet can be given offsets (it is then a simple group).
    out = ok(cg(state, "--reset-offsets", "--group", "g-reset-new", "--topic", "t:2", "--to-offset", "5",
                "--execute"))
    assert plan(out) == [["g-reset-new", "t", "2", "5"]]
    assert committed(admin, "g-reset-new") == {("t", 2): 5}


def test_reset_after_the_member_left(state, admin):
    m = Member(state, "g-left", ["t"], "leaving")
    try:
        wait_until(lambda: m.read == 30, "the member to read t")
        m.call(lambda c: c.commit(asynchronous=False))
    finally:
        m.close()  # LeaveGroup: the group is Empty at once
    out = ok(cg(state, "--reset-offsets", "--group", "g-left", "--topic", "t", "--to-earliest", "--execute"))
    assert plan(out) == [["g-left", "t", str(p), "0"] for p in range(3)]
    described = table(ok(cg(state, "--describe", "--group", "g-left")), OFFSETS_HEADER)
    assert [r[3:6] for r in described] == [["0", "10", "10"]] * 3


# ---------------------------------------------------------------------------- delete

def test_delete_groups(state, admin):
    copy_group(admin, "g-del-1", {0: 1})
    copy_group(admin, "g-del-2", {1: 1})
    out = ok(cg(state, "--delete", "--group", "g-del-1", "--group", "g-del-2"))
    assert out.strip() == "Deletion of requested consumer groups ('g-del-1', 'g-del-2') was successful."
    assert one_error_line(cg(state, "--describe", "--group", "g-del-1")) == \
        "Error: Consumer group 'g-del-1' does not exist."
    assert "g-del-1" not in ok(cg(state, "--list")).splitlines()
    # Some fail, some succeed.
    copy_group(admin, "g-del-3", {0: 1})
    r = cg(state, "--delete", "--group", "g-del-3", "--group", "g-del-1")
    assert r.returncode == 1
    assert r.stdout.strip().splitlines() == [
        "Deletion of some consumer groups failed:",
        "* Group 'g-del-1' could not be deleted due to: The group id does not exist.",
        "",
        "These consumer groups were deleted successfully: 'g-del-3'"]


def test_delete_offsets(state, admin):
    copy_group(admin, "g-deloff", {0: 1, 1: 2, 2: 3})
    copy_group(admin, "g-deloff", {0: 4}, topic="ts")
    r = cg(state, "--delete-offsets", "--group", "g-deloff", "--topic", "t:0,2")
    assert table(ok(r), ["TOPIC", "PARTITION", "STATUS"]) == [["t", "0", "Successful"], ["t", "2", "Successful"]]
    lines = [line for line in r.stdout.splitlines() if line.strip()]
    assert lines[0] == "TOPIC                          PARTITION       STATUS"
    assert committed(admin, "g-deloff") == {("t", 1): 2, ("ts", 0): 4}
    described = table(ok(cg(state, "--describe", "--group", "g-deloff")), OFFSETS_HEADER)
    assert [(r[1], r[2], r[3]) for r in described] == [("t", "1", "2"), ("ts", "0", "4")]
    # A whole topic.
    assert table(ok(cg(state, "--delete-offsets", "--group", "g-deloff", "--topic", "ts")),
                 ["TOPIC", "PARTITION", "STATUS"]) == [["ts", "0", "Successful"]]
    assert committed(admin, "g-deloff") == {("t", 1): 2}
    r = cg(state, "--delete-offsets", "--group", "no-such-group", "--topic", "t")
    assert one_error_line(r) == "Error: Consumer group 'no-such-group' does not exist."
    r = cg(state, "--delete-offsets", "--group", "g-deloff", "--topic", "nope")
    assert "nope" in one_error_line(r)


def test_offsets_and_metadata_survive_the_tool(state, admin):
    """What the tool does not touch stays: metadata of other partitions is kept."""
    admin.alter_consumer_group_offsets("g-meta", {TopicPartition("t", 0): OffsetAndMetadata(3, "keep me"),
                                                  TopicPartition("t", 1): 4})
    ok(cg(state, "--reset-offsets", "--group", "g-meta", "--topic", "t:1", "--to-offset", "2", "--execute"))
    offsets = admin.list_consumer_group_offsets("g-meta")
    assert offsets[TopicPartition("t", 0)] == OffsetAndMetadata(3, "keep me")
    assert offsets[TopicPartition("t", 1)].offset == 2
