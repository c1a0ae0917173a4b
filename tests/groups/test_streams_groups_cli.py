"""``samsa streams-groups`` (kafka-streams-groups.sh, KIP-1071) on a Samsa broker: its tables beside
those of Kafka's own tool (StreamsGroupCommand, Kafka 4.4.0) on the same group, the offsets a member
committed, --reset-offsets of an empty group, --delete, and the errors as one line."""

from __future__ import annotations

import contextlib
import io
import re
import sys
from pathlib import Path

import kafka_process
from samsa.cli import streams_groups

sys.path.insert(0, str(Path(__file__).parent.parent / "differential"))
from harness import Side, create_topic  # noqa: E402
from streams_wire import StreamsMember  # noqa: E402
from waiting import wait_until  # noqa: E402


def tool(bootstrap: str, *args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = streams_groups.main(["--bootstrap-server", bootstrap, *args])
    return code, out.getvalue(), err.getvalue()


def kafka_tool(bootstrap: str, *args: str) -> str:
    r = kafka_process.run_tool(kafka_process.TOOLS["kafka-streams-groups"], "--bootstrap-server", bootstrap, *args)
    return r.stdout


def lines(text: str) -> list[str]:
    """The table's lines, trailing blanks and blank lines aside, rows in order."""
    return sorted(re.sub(r"\s+$", "", ln) for ln in text.splitlines() if ln.strip())


def test_streams_groups_tool(gbroker, names):
    bootstrap = gbroker.bootstrap
    topic, group = names
    side = Side("samsa", bootstrap)
    try:
        create_topic(side, topic, 2)
        for partition in (0, 1):
            assert side.produce(topic, [(None, b"x")] * 3, partition)["responses"][0]["partition_responses"][0][
                "error_code"] == 0
        m = StreamsMember(side, group, "member-one", topic)
        m.heartbeat()
        m.settle()
        m.commit({(topic, 0): 1, (topic, 1): 2})

        code, out, _ = tool(bootstrap, "--list")
        assert code == 0 and group in out.split()
        code, out, _ = tool(bootstrap, "--list", "--state")
        assert code == 0 and re.search(rf"^{re.escape(group)}\s+Stable$", out, re.M), out
        # The same tables as Kafka's own tool prints for this group.
        for args in (["--describe", "--members"], ["--describe", "--members", "--verbose"],
                     ["--describe", "--state"], ["--describe", "--state", "--verbose"],
                     ["--describe", "--offsets", "--verbose"]):
            code, out, err = tool(bootstrap, *args, "--group", group)
            assert code == 0, err
            assert lines(out) == lines(kafka_tool(bootstrap, *args, "--group", group)), (args, out)
        code, out, _ = tool(bootstrap, "--describe", "--members", "--group", group)
        assert "ACTIVE: 0:[0,1]; 1:[0,1];" in out
        code, out, _ = tool(bootstrap, "--describe", "--offsets", "--verbose", "--group", group)
        assert re.search(rf"^{re.escape(group)}\s+{re.escape(topic)}\s+1\s+2\s+-\s+3\s+1$", out, re.M), out

        # Not while it has a member; then the member leaves and the group is Empty.
        code, _, err = tool(bootstrap, "--reset-offsets", "--group", group, "--all-topics", "--to-earliest",
                            "--execute")
        assert code == 1 and "inactive, but the current state is Stable" in err
        code, _, err = tool(bootstrap, "--delete", "--group", group)
        assert code == 1 and f"Group '{group}' could not be deleted" in err
        code, out, err = tool(bootstrap, "--delete-offsets", "--group", group, "--topic", topic)
        assert code == 1 and "Error: The consumer group is actively subscribed to the topic." in out, (out, err)
        m.leave()
        code, out, _ = tool(bootstrap, "--describe", "--state", "--group", group)
        assert code == 0 and re.search(r"\sEmpty\s+0$", out, re.M), out
        code, out, _ = tool(bootstrap, "--reset-offsets", "--group", group, "--topic", f"{topic}:1", "--to-earliest",
                            "--execute")
        assert code == 0 and re.search(rf"^{re.escape(group)}\s+{re.escape(topic)}\s+1\s+0$", out, re.M), out
        code, out, _ = tool(bootstrap, "--describe", "--offsets", "--verbose", "--group", group)
        assert re.search(rf"^{re.escape(group)}\s+{re.escape(topic)}\s+1\s+0\s", out, re.M), out
        code, out, _ = tool(bootstrap, "--delete-offsets", "--group", group, "--topic", f"{topic}:0")
        assert code == 0 and re.search(rf"^{re.escape(topic)}\s+0\s+Successful$", out, re.M), out
        code, out, _ = tool(bootstrap, "--describe", "--offsets", "--verbose", "--group", group)
        assert re.search(rf"^{re.escape(group)}\s+{re.escape(topic)}\s+0\s+-\s", out, re.M), out
        code, out, _ = tool(bootstrap, "--delete", "--group", group)
        assert code == 0 and out.strip() == f"Deletion of requested streams groups ('{group}') was successful."
        code, out, err = tool(bootstrap, "--describe", "--group", group)
        assert code == 1 and err.strip() == (f"Error: Executing streams group command failed due to Group {group} "
                                             "not found."), err
        code, _, err = tool(bootstrap, "--describe")
        assert code != 0 and len(err.strip().splitlines()) >= 1
    finally:
        side.close()


def test_streams_group_records_as_kafka_dumps_them(gbroker, names):
    """A streams group's records in __consumer_offsets (key types 17, 19 to 23), read by Kafka 4.4.0's
    kafka-dump-log.sh --offsets-decoder and by samsa dump-log: the same lines."""
    from cli_tools import samsa
    from samsa.coordinator.groups.persistence import partition_for
    topic, group = names
    side = Side("samsa", gbroker.bootstrap)
    try:
        create_topic(side, topic, 2)
        m = StreamsMember(side, group, "member-dump", topic)
        m.heartbeat()
        m.settle()
        m.leave()

        def settled() -> bool:  # its last target assignment (for no member) written
            d = side.call(89, {"group_ids": [group], "include_authorized_operations": False})["groups"][0]
            return d["group_state"] == "Empty" and d["group_epoch"] == d["assignment_epoch"]
        wait_until(settled, "the group empty and its assignment written", 30)
    finally:
        side.close()
    logs = sorted((gbroker.data_dir / "logs" / f"__consumer_offsets-{partition_for(group, 50)}").glob("*.log"))
    files = ",".join(map(str, logs))

    def records(text: str) -> list[str]:
        return [ln.split(" key: ", 1)[1] for ln in text.splitlines() if ln.startswith("| offset") and group in ln]
    ours = records(samsa("dump-log", "--offsets-decoder", "--files", files).stdout)
    kafkas = records(kafka_process.run_tool(kafka_process.TOOLS["kafka-dump-log"], "--offsets-decoder",
                                            "--files", files).stdout)
    kinds = {int(k) for k in re.findall(r'"type":"(\d+)"', "".join(ours))}
    assert kinds == {17, 19, 20, 21, 22, 23}, kinds
    assert ours == kafkas


def test_streams_group_in_the_broker_metrics(own_broker, names):
    """The broker's metrics count a streams group (Kafka 4's group-coordinator-metrics names)."""
    from broker_process import free_port
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "metrics"))
    from scrape import scrape, value
    topic, group = names
    port = free_port()
    b = own_broker(**{"prometheus.listener": f"http://127.0.0.1:{port}"})
    side = Side("samsa", b.bootstrap)
    try:
        create_topic(side, topic, 2)
        m = StreamsMember(side, group, "member-metrics", topic)
        m.heartbeat()
        m.settle()
        got = scrape(f"http://127.0.0.1:{port}/metrics")
        assert value(got, "kafka_server_group_coordinator_metrics_group_count", protocol="streams") == 1
        assert value(got, "kafka_server_group_coordinator_metrics_group_count", protocol="classic") == 0
        assert value(got, "kafka_server_group_coordinator_metrics_streams_group_count", state="stable") == 1
        assert value(got, "kafka_server_group_coordinator_metrics_streams_group_rebalance_total") >= 1
    finally:
        side.close()
