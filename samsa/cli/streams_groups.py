"""``samsa streams-groups``: kafka-streams-groups.sh (KIP-1071) with Kafka's flags and output.

    samsa streams-groups --bootstrap-server localhost:9092 --list [--state [Stable,Empty]]
    samsa streams-groups --bootstrap-server localhost:9092 --describe --group app [--members | --state | --offsets]
        [--verbose]
    samsa streams-groups --bootstrap-server localhost:9092 --reset-offsets --group app --topic t:0,1 --to-earliest
        --execute
    samsa streams-groups --bootstrap-server localhost:9092 --delete-offsets --group app --topic t
    samsa streams-groups --bootstrap-server localhost:9092 --delete --group app

A streams group's offsets are those its tasks committed (OffsetFetch, as a consumer group's), for
every partition of its input topics (the source and repartition topics of its topology).
``--reset-offsets`` only works on groups without members, as in Kafka. Where Kafka's tool prints
an error and still exits 0 (an unknown group, a failed deletion), this one prints one line and
exits 1.
"""

from __future__ import annotations

import argparse
import sys
import time

from samsa.cli import group_tools
from samsa.cli.common import Parser, UsageError, error_message
from samsa.cli.consumer_groups import parse_duration
from samsa.cli.group_tools import (ListedGroupTool, add_reset_specifications, cant, check_common, check_delete_offsets,
                                   check_only_with, check_reset_scope, parse_datetime, parse_offsets_file, parse_topics,
                                   plan_reset, print_table, reset_choice, run, warn)
from samsa.client.types import StreamsGroupDescription, StreamsMemberDescription, TopicPartition
from samsa.protocol import errors

DESCRIPTION = "This tool helps to list, describe, reset and delete streams groups."
SCENARIOS = ("to_datetime", "by_duration", "to_earliest", "to_latest", "shift_by", "from_file", "to_current",
             "to_offset")
STATES = ("Empty", "NotReady", "Assigning", "Reconciling", "Stable", "Dead")  # Kafka's streams group states


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="samsa streams-groups", description=DESCRIPTION)
    a = p.add_argument
    a("--bootstrap-server", metavar="<String: server to connect to>", help="REQUIRED: The server(s) to connect to.")
    a("--command-config", metavar="<String: command config property file>",
      help="Property file containing configs to be passed to Admin Client.")
    a("--timeout", metavar="<Long: timeout (ms)>", type=int, default=30000,
      help="The timeout that can be set for some use cases. (default: 30000)")
    a("--list", action="store_true", help="List all streams groups.")
    a("--describe", action="store_true", help="Describe streams group and list offset lag related to given group.")
    a("--delete", action="store_true", help="Delete streams group.")
    a("--delete-offsets", action="store_true", help="Delete offsets of streams group. Supports one streams group at "
      "the time, and multiple topics.")
    a("--reset-offsets", action="store_true",
      help="Reset offsets of streams group. The instances should be inactive. Has 2 execution options: --dry-run "
      "(the default) to plan which offsets to reset, and --execute to update the offsets. You must choose one of "
      "the following reset specifications: --to-datetime, --by-duration, --to-earliest, --to-latest, --shift-by, "
      "--from-file, --to-current, --to-offset. To define the scope use --all-topics or --topic.")
    a("--group", metavar="<String: streams group>", action="append", default=[], help="The streams group we wish "
      "to act on.")
    a("--all-groups", action="store_true", help="Apply to all streams groups.")
    a("--topic", metavar="<String: topic>", action="append", default=[],
      help="The topic whose streams group information should be reset. In `reset-offsets` case, partitions can be "
      "specified using this format: `topic1:0,1,2`, where 0,1,2 are the partition to be included in the process.")
    a("--all-topics", action="store_true", help="Consider all topics assigned to a group in the `reset-offsets` "
      "process.")
    a("--members", action="store_true", help="Describe members of the group. This option may be used with the "
      "'--describe' option only.")
    a("--offsets", action="store_true", help="Describe the group and list all topic partitions in the group along "
      "with their offset information. This is the default sub-action and may be used with the '--describe' option "
      "only.")
    a("--state", metavar="<String>", nargs="?", const="", default=None,
      help="When specified with '--describe', includes the state of the group. When specified with '--list', it "
      "displays the state of all groups. It can also be used to list groups with specific states. Valid values "
      "are Empty, NotReady, Stable, Assigning, Reconciling, and Dead.")
    a("--verbose", action="store_true", help="Use with --describe --state to show group epoch and target "
      "assignment epoch. Use with --describe --members to show for each member the member epoch, target "
      "assignment epoch, current assignment, target assignment, and whether member is still using the classic "
      "rebalance protocol. Use with --describe --offsets and --describe to show leader epochs for each partition.")
    a("--dry-run", action="store_true", help="Only show results without executing changes on streams groups. "
      "Supported operations: reset-offsets.")
    a("--execute", action="store_true", help="Execute operation. Supported operations: reset-offsets.")
    a("--export", action="store_true", help="Export operation execution to a CSV file. Supported operations: "
      "reset-offsets.")
    add_reset_specifications(a, "YYYY-MM-DDTHH:mm:SS.sss", durations=True)
    return p


def check_args(o: argparse.Namespace) -> None:
    action = check_common(o, groups_for=("describe", "delete", "reset_offsets"))
    if action == "delete_offsets":
        check_delete_offsets(o)
    if action == "reset_offsets":
        if o.dry_run and o.execute:
            raise UsageError("Option [reset-offsets] only accepts one of [execute, dry-run]")
        check_reset_scope(o, SCENARIOS, exactly=False)
    check_only_with(o, action, all_groups_for=("describe", "delete", "reset_offsets"))
    for name in ("dry_run", "execute", "export") + SCENARIOS:
        cant(o, name, ("reset_offsets",))
    parse_topics(o.topic)
    if action == "list" and o.state:
        group_tools.parse_states(o.state, STATES)
    if o.to_datetime is not None:
        parse_datetime(o.to_datetime)
    if o.by_duration is not None:
        parse_duration(o.by_duration)


def tasks_text(label: str, tasks: dict[str, list[int]]) -> str:
    """``ACTIVE: 0:[0,1]; 1:[0]; `` as Kafka's tool shows a member's tasks of one kind ("" for none)."""
    if not any(tasks.values()):
        return ""
    return f"{label}: " + "".join(f"{sub}:[{','.join(map(str, ps))}]; " for sub, ps in sorted(tasks.items()) if ps)


def assignments(m: StreamsMemberDescription, verbose: bool) -> str:
    out = "".join(tasks_text(k.upper(), m.assignment.get(k, {})) for k in ("active", "standby", "warmup"))
    if verbose:
        out += "".join(tasks_text(f"TARGET-{k.upper()}", m.target_assignment.get(k, {}))
                       for k in ("active", "standby", "warmup"))
    return out


class Tool(ListedGroupTool):
    STATES, KIND = STATES, "streams"

    def list_groups(self, states: list[str] | None) -> list:
        return self.admin.list_streams_groups(states)

    def delete_groups(self, group_ids: list[str]) -> dict:
        return self.admin.delete_streams_groups(group_ids)

    def describe_groups(self, group_ids: list[str]) -> dict[str, StreamsGroupDescription]:
        return self.admin.describe_streams_groups(group_ids)

    @staticmethod
    def _no_members(d: StreamsGroupDescription) -> bool:
        if d.state == "Empty" or not d.members:
            warn(f"\nStreams group '{d.group_id}' has no active members.")
            return True
        return False

    def input_partitions(self, d: StreamsGroupDescription) -> list[TopicPartition]:
        topics = d.input_topics()
        if not topics:
            return []
        described = self.admin.describe_topics(topics)
        return sorted(TopicPartition(t, p.partition) for t in topics if t in described
                      for p in described[t].partitions)

    def print_offsets(self, found: list[StreamsGroupDescription]) -> None:
        verbose = self.o.verbose
        for d in found:
            committed = self.admin.list_consumer_group_offsets(d.group_id)
            tps = sorted(set(self.input_partitions(d)) | set(committed))
            latest = {tp: r.offset for tp, r in self.admin.list_offsets({tp: "latest" for tp in tps}).items()} \
                if tps else {}
            rows = []
            for tp in tps:
                c = committed.get(tp)
                end = latest.get(tp, -1)
                # Kafka's tool: the log end offset less the committed one (0 if none), as it comes
                lag = None if end < 0 else end - (c.offset if c is not None else 0)
                row = [d.group_id, tp.topic, str(tp.partition)]
                if verbose:
                    row += ["-" if c is None else str(c.offset),
                            "-" if c is None or c.leader_epoch is None else str(c.leader_epoch),
                            "-" if end < 0 else str(end)]
                row.append("-" if lag is None else str(lag))
                rows.append(row)
            header = ["GROUP", "TOPIC", "PARTITION"] + (
                ["CURRENT-OFFSET", "LEADER-EPOCH", "LOG-END-OFFSET"] if verbose else []) + ["OFFSET-LAG"]
            widths: list[int | None] = [None, max(25, *(len(r[1]) for r in rows)) if rows else 25, 10] + (
                [15, 15, 15] if verbose else []) + [0]
            if self._no_members(d) and not rows:
                continue
            print_table(header, rows, widths)

    def print_members(self, found: list[StreamsGroupDescription]) -> None:
        verbose = self.o.verbose
        for d in found:
            if self._no_members(d):
                continue
            header = ["GROUP"] + (["TARGET-ASSIGNMENT-EPOCH", "TOPOLOGY-EPOCH"] if verbose else []) + ["MEMBER"] + (
                ["MEMBER-PROTOCOL", "MEMBER-EPOCH"] if verbose else []) + ["PROCESS", "CLIENT-ID", "ASSIGNMENTS"]
            widths: list[int | None] = [None] + ([25, 14] if verbose else []) + [None] + (
                [15, 15] if verbose else []) + [None, None, 0]
            rows = []
            for m in sorted(d.members, key=lambda m: m.member_id):
                rows.append([d.group_id] + ([str(d.assignment_epoch), str(m.topology_epoch)] if verbose else [])
                            + [m.member_id]
                            + (["classic" if m.is_classic else "streams", str(m.member_epoch)] if verbose else [])
                            + [m.process_id, m.client_id, assignments(m, verbose)])
            print_table(header, rows, widths)

    def print_states(self, found: list[StreamsGroupDescription]) -> None:
        verbose = self.o.verbose
        for d in found:
            c = d.coordinator
            coordinator = f"{c.host}:{c.port} ({c.id})" if c else "-"
            header = ["GROUP", "COORDINATOR (ID)", "ASSIGNOR", "STATE"] + (
                ["GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH"] if verbose else []) + ["#MEMBERS"]
            row = [d.group_id, coordinator, d.assignor, d.state] + (
                [str(d.group_epoch), str(d.assignment_epoch)] if verbose else []) + [str(len(d.members))]
            widths: list[int | None] = [None, max(25, len(coordinator)), 15, 25] + ([15, 25] if verbose else []) + [0]
            print_table(header, [row], widths)
            if d.state == "Empty":
                self._no_members(d)

    # ---------------------------------------------------------------- --reset-offsets

    def reset_offsets(self) -> int:
        o = self.o
        code = 0
        for group_id in self.group_ids():
            d = self.admin.describe_streams_groups([group_id])[group_id]
            if d.state not in ("Empty", "Dead"):
                warn(f"Error: Assignments can only be reset if the group '{group_id}' is inactive, but the current "
                     f"state is {d.state}.")
                code = 1
                continue
            committed = {tp: c.offset for tp, c in self.admin.list_consumer_group_offsets(group_id).items()}
            from_file = parse_offsets_file(o.from_file, [group_id]).get(group_id, {}) if o.from_file else {}
            if o.from_file:
                tps = sorted(from_file)
            elif o.all_topics:
                tps = sorted(set(self.input_partitions(d)) | set(committed))
            else:
                tps = self.partitions_of(parse_topics(o.topic))
            plan = self.new_offsets(tps, committed, from_file)
            if o.execute and plan:
                self.admin.alter_consumer_group_offsets(group_id, plan)
            if o.export:
                for tp, offset in sorted(plan.items()):
                    print(f"{group_id},{tp.topic},{tp.partition},{offset}")
                continue
            print()
            print_table(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
                        [[group_id, tp.topic, str(tp.partition), str(off)] for tp, off in sorted(plan.items())],
                        [None, 25, 10, 0])
        return code

    def new_offsets(self, tps: list[TopicPartition], committed: dict[TopicPartition, int],
                    from_file: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        o = self.o
        if not tps:
            return {}

        def offsets(spec: str | int) -> dict[TopicPartition, int]:
            return {tp: r.offset for tp, r in self.admin.list_offsets({tp: spec for tp in tps}).items()}
        earliest, latest = offsets("earliest"), offsets("latest")
        by_time = None
        if o.to_datetime:
            by_time = offsets(max(parse_datetime(o.to_datetime), 0))
        elif o.by_duration:
            by_time = offsets(max(int(time.time() * 1000) - parse_duration(o.by_duration), 0))
        current = {tp: committed.get(tp, latest[tp]) for tp in tps}
        return plan_reset(reset_choice(o), tps, current, earliest, latest, offset=o.to_offset, shift=o.shift_by,
                          from_file=from_file, by_time=by_time)

    # ---------------------------------------------------------------- --delete

    # ---------------------------------------------------------------- --delete-offsets

    def delete_offsets(self) -> int:
        group_id = self.o.group[0]
        if group_id not in {g.group_id for g in self.admin.list_streams_groups()}:
            warn(f"Error: Streams group '{group_id}' does not exist.")
            return 1
        tps = self.partitions_of(parse_topics(self.o.topic))
        try:
            results = self.admin.delete_consumer_group_offsets(group_id, tps)
        except errors.KafkaError as e:
            warn(f"Error: {error_message(e)}")
            return 1
        failed = any(e is not None for e in results.values())
        if failed:
            warn("Error: Encounter some partition level error, see the follow-up details:")
        print_table(["TOPIC", "PARTITION", "STATUS"],
                    [[tp.topic, str(tp.partition), "Successful" if e is None else f"Error: {error_message(e)}"]
                     for tp, e in results.items()], [30, 15, 0])
        return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    return run(argv, build_parser(), check_args, Tool, "samsa-streams-groups", DESCRIPTION, "streams group")


if __name__ == "__main__":
    sys.exit(main())

