"""``samsa share-groups`` (kafka-share-groups.sh) against Kafka 4.4.0 and Samsa, and its output
compared with Kafka's own tool (ShareGroupCommand) on the reference Kafka."""

from __future__ import annotations

import contextlib
import io
import subprocess

import kafka_process
from cli_tools import one_error_line, samsa
from samsa.cli import share_groups
from samsa.client.share_consumer import ShareConsumer
from share_helpers import SHARE_OFFSET_APIS, WAIT
from waiting import wait_until


def _group_with_state(target, name: str) -> tuple[str, str]:
    """A two-partition topic of 6 records and a share group that consumed them and left (Empty)."""
    topic, group = target.names(name)
    target.create_topic(topic, partitions=2)
    target.group_config(group)
    target.produce(topic, ["a", "b", "c"], partition=0)
    target.produce(topic, ["d", "e", "f"], partition=1)
    c = ShareConsumer({"bootstrap.servers": target.bootstrap, "group.id": group, "client.id": "cli-test"})
    c.subscribe([topic])
    got: list = []
    try:
        wait_until(lambda: got.extend(c.poll(0.5)) or len(got) >= 6, "6 records", WAIT)
        c.commit_sync()
    finally:
        c.close()
    return topic, group


def tool(target, *args: str) -> subprocess.CompletedProcess:
    """``samsa share-groups`` run in this process (its main(), stdout and stderr captured): the
    tool as a user runs it, less the interpreter's start-up (test_share_groups_tool_errors runs
    it as a process)."""
    out, err = io.StringIO(), io.StringIO()
    argv = ["--bootstrap-server", target.bootstrap, *args]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = share_groups.main(argv)
    return subprocess.CompletedProcess(["samsa", "share-groups", *argv], code, out.getvalue(), err.getvalue())


def tool_process(target, *args: str) -> subprocess.CompletedProcess:
    return samsa("share-groups", "--bootstrap-server", target.bootstrap, *args)


def table(r) -> list[list[str]]:
    assert r.returncode == 0, r
    return [line.split() for line in r.stdout.strip().splitlines()]


def test_share_groups_tool(target):
    target.needs(*SHARE_OFFSET_APIS)
    topic, group = _group_with_state(target, "cli")
    assert group in tool(target, "--list").stdout.split()
    assert [group, "Empty"] in table(tool(target, "--list", "--state", "Empty"))

    r = tool(target, "--describe", "--group", group, "--state", "--verbose")
    rows = table(r)
    assert rows[0] == ["GROUP", "COORDINATOR", "(ID)", "STATE", "GROUP-EPOCH", "ASSIGNMENT-EPOCH", "#MEMBERS"]
    assert rows[1][0] == group and rows[1][3] == "Empty" and rows[1][-1] == "0"
    assert f"Share group '{group}' has no active members." in r.stderr

    # Everything delivered and accepted: no lag. (Kafka 4.4 leaves the start offset where it was
    # until the partition is read again; the lag counts what is not delivered to completion.)
    def lagless() -> list[list[str]]:
        rows = table(tool(target, "--describe", "--group", group))[1:]
        return rows if len(rows) == 2 and all(r[4] == "0" for r in rows) else []
    rows = wait_until(lagless, "no lag", WAIT)
    assert [r[:3] for r in rows] == [[group, topic, "0"], [group, topic, "1"]]

    r = tool(target, "--reset-offsets", "--group", group, "--topic", f"{topic}:0", "--to-earliest", "--execute")
    assert table(r) == [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], [group, topic, "0", "0"]]
    assert table(tool(target, "--describe", "--group", group, "--offsets", "--verbose"))[1][:6] == \
        [group, topic, "0", "0", "0", "3"]  # LEADER-EPOCH 0, START-OFFSET 0, LAG 3

    r = tool(target, "--reset-offsets", "--group", group, "--all-topics", "--to-offset", "99", "--dry-run")
    assert "Value will be set to 3" in r.stderr  # clamped to the log end, as Kafka's resetter does
    assert table(r)[1:] == [[group, topic, "0", "3"], [group, topic, "1", "3"]]

    assert table(tool(target, "--delete-offsets", "--group", group, "--topic", topic)) == \
        [["TOPIC", "STATUS"], [topic, "Successful"]]
    r = tool(target, "--delete", "--group", group)
    assert r.returncode == 0 and r.stdout.strip() == f"Deletion of requested share groups ('{group}') was successful."
    assert group not in tool(target, "--list").stdout.split()


def test_share_groups_tool_errors(target):
    line = one_error_line(tool_process(target, "--describe", "--group", "no-such-share-group"))
    assert line == "Error: Executing share group command failed due to Group no-such-share-group not found."
    r = tool_process(target, "--delete", "--group", "no-such-share-group")
    assert r.returncode == 1
    assert "* Group 'no-such-share-group' could not be deleted due to: Group 'no-such-share-group' is not a " \
           "share group." in r.stderr
    assert one_error_line(tool_process(target, "--reset-offsets", "--group", "g", "--topic", "t", "--to-earliest")) == \
        "Option [reset-offsets] takes the option: [execute] or [dry-run]"


def test_share_groups_output_as_kafkas_tool(kafka):
    """The same commands through Kafka 4.4.0's ShareGroupCommand and through samsa share-groups,
    on the reference Kafka: the same output. (Two of them, one JVM each: the other views were
    compared by hand, --list, --members and --offsets with and without --verbose included.)"""
    from share_helpers import ShareTarget
    target = ShareTarget("kafka", kafka.bootstrap)
    topic, group = _group_with_state(target, "cli-diff")
    for args in (["--describe", "--group", group, "--state", "--verbose"],
                 ["--reset-offsets", "--group", group, "--topic", f"{topic}:1", "--to-offset", "1", "--dry-run"]):
        theirs = kafka_process.run_tool("org.apache.kafka.tools.consumer.group.ShareGroupCommand",
                                        "--bootstrap-server", kafka.bootstrap, *args)
        ours = tool(target, *args)
        assert (ours.returncode, ours.stdout) == (theirs.returncode, theirs.stdout), args


def test_configs_share_group_keys(target):
    """``samsa configs --entity-type groups`` sets, shows and refuses the share.* group configs."""
    _, group = target.names("cfg")
    base = ["configs", "--bootstrap-server", target.bootstrap, "--entity-type", "groups", "--entity-name", group]
    r = samsa(*base, "--alter", "--add-config", "share.record.lock.duration.ms=5000,share.auto.offset.reset=earliest")
    assert r.returncode == 0 and r.stdout.strip() == f"Completed updating config for group {group}.", r
    shown = samsa(*base, "--describe").stdout
    assert "  share.record.lock.duration.ms=5000 sensitive=false" in shown
    assert "  share.auto.offset.reset=earliest sensitive=false" in shown
    line = one_error_line(samsa(*base, "--alter", "--add-config", "share.record.lock.duration.ms=500"))
    assert "share.record.lock.duration.ms" in line
