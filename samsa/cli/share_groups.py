"""``samsa share-groups``: kafka-share-groups.sh (KIP-932) with Kafka's flags and output.

    samsa share-groups --bootstrap-server localhost:9092 --list [--state [Stable,Empty]]
    samsa share-groups --bootstrap-server localhost:9092 --describe --group g1 [--members | --state | --offsets]
        [--verbose]
    samsa share-groups --bootstrap-server localhost:9092 --reset-offsets --group g1 --topic t:0,1 --to-earliest
        --execute
    samsa share-groups --bootstrap-server localhost:9092 --delete --group g1
    samsa share-groups --bootstrap-server localhost:9092 --delete-offsets --group g1 --topic t

A share group's offsets are its start offsets: the first record of each partition not yet
delivered to completion (DescribeShareGroupOffsets), with the lag the broker computes.
``--reset-offsets`` and ``--delete-offsets`` only work on groups without members, as in
Kafka; new offsets are kept between each partition's earliest and latest offset. Where
Kafka's tool prints an error and still exits 0 (an unknown group, a failed deletion), this
one prints one line and exits 1.
"""

from __future__ import annotations

import argparse
import sys

from samsa.cli import group_tools
from samsa.cli.common import Parser, UsageError, error_message
from samsa.cli.group_tools import (ListedGroupTool, add_reset_specifications, assignment, cant, check_common,
                                   check_delete_offsets, check_only_with, check_reset_scope, parse_datetime,
                                   parse_offsets_file, parse_topics, plan_reset, print_table,
                                   reset_choice, run, warn)
from samsa.client.types import ShareGroupDescription, TopicPartition
from samsa.protocol import errors

DESCRIPTION = ("This tool helps to list, describe, reset and delete share groups.")
SCENARIOS = ("to_datetime", "to_earliest", "to_latest", "from_file", "to_current", "to_offset")
STATES = ("Empty", "Stable", "Dead")  # Kafka's share group states, as --state accepts them


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="samsa share-groups", description=DESCRIPTION)
    a = p.add_argument
    a("--bootstrap-server", metavar="<String: server to connect to>", help="REQUIRED: The server(s) to connect to.")
    a("--command-config", metavar="<String: command config property file>",
      help="Property file containing configs to be passed to Admin Client.")
    a("--timeout", metavar="<Long: timeout (ms)>", type=int, default=30000,
      help="The timeout that can be set for some use cases. (default: 30000)")
    a("--list", action="store_true", help="List all share groups.")
    a("--describe", action="store_true", help="Describe share group, members and offset information.")
    a("--delete", action="store_true", help="Delete share group.")
    a("--delete-offsets", action="store_true",
      help="Delete offsets of share group. Supports one share group at a time, and multiple topics.")
    a("--reset-offsets", action="store_true",
      help="Reset offsets of share group. Supports one share group at a time, and instances must be inactive. "
      "Has 2 execution options: --dry-run to plan which offsets to reset, and --execute to reset the offsets. "
      "Additionally, the --export option can be used to generate the offsets in CSV format. You must choose one "
      "of the following reset specifications: --to-datetime, --to-earliest, --to-latest, --from-file, "
      "--to-current, --to-offset. To define the scope, use --all-topics or --topic.")
    a("--group", metavar="<String: group id>", action="append", default=[], help="The share group id.")
    a("--all-groups", action="store_true", help="Apply to all share groups.")
    a("--topic", metavar="<String: topic>", action="append", default=[],
      help="The topic whose offset information should be deleted or reset. When resetting offsets, partitions "
      "can be specified using this format: `topic:0,1,2`, where 0,1,2 are the partitions to be included.")
    a("--all-topics", action="store_true", help="Apply to all topics. Supported operation: reset-offsets.")
    a("--members", action="store_true", help="Describe members of the group. This option may be used with the "
      "--describe option only.")
    a("--offsets", action="store_true", help="Describe the group and list all topic partitions in the group along "
      "with their offset information. This is the default sub-action and may be used with the --describe option "
      "only.")
    a("--state", metavar="<String>", nargs="?", const="", default=None,
      help="When specified with --describe, it displays the state of the group. When specified with --list, it "
      "displays the state of all groups. It can also be used to list groups with specific states. Valid values "
      "are Empty, Stable and Dead.")
    a("--verbose", action="store_true", help="Provide additional information, if any, when describing the group.")
    a("--dry-run", action="store_true", help="Output offset reset information without executing the operation. "
      "Supported operation: reset-offsets.")
    a("--execute", action="store_true", help="Execute the offset reset operation. Supported operation: "
      "reset-offsets.")
    a("--export", action="store_true", help="Generate offset reset information in CSV format for export to a file. "
      "Supported operation: reset-offsets.")
    add_reset_specifications(a, "YYYY-MM-DDThh:mm:ss.sss", durations=False)
    return p


def check_args(o: argparse.Namespace) -> None:
    action = check_common(o, groups_for=("describe", "delete"))
    if action == "reset_offsets":
        if not o.group or len(o.group) > 1:
            raise UsageError("Option [reset-offsets] takes the option: [group] (one share group at a time)")
        if o.dry_run == o.execute:
            raise UsageError("Option [reset-offsets] takes the option: [execute] or [dry-run]")
        check_reset_scope(o, SCENARIOS, exactly=True)
    if action == "delete_offsets":
        check_delete_offsets(o)
        if any(":" in t for t in o.topic):
            raise UsageError("Option [delete-offsets] takes whole topics: --topic TOPIC")
    check_only_with(o, action, all_groups_for=("describe", "delete"))
    for name in ("dry_run", "execute", "export") + SCENARIOS:
        cant(o, name, ("reset_offsets",))
    parse_topics(o.topic)
    if action == "list" and o.state:
        parse_states(o.state)
    if o.to_datetime is not None:
        parse_datetime(o.to_datetime)


def parse_states(text: str) -> list[str]:
    return group_tools.parse_states(text, STATES)


class Tool(ListedGroupTool):
    STATES, KIND = STATES, "share"

    def list_groups(self, states: list[str] | None) -> list:
        return self.admin.list_share_groups(states)

    def delete_groups(self, group_ids: list[str]) -> dict:
        return self.admin.delete_share_groups(group_ids)

    def describe_groups(self, group_ids: list[str]) -> dict[str, ShareGroupDescription]:
        return self.admin.describe_share_groups(group_ids)

    @staticmethod
    def _no_members(d: ShareGroupDescription) -> bool:
        if d.state == "Empty":
            warn(f"\nShare group '{d.group_id}' has no active members.")
            return True
        return False

    def print_offsets(self, found: list[ShareGroupDescription]) -> None:
        """One table a group, as Kafka's tool prints them."""
        verbose = self.o.verbose
        for d in found:
            rows = []
            offsets = self.admin.list_share_group_offsets(d.group_id)
            for tp, info in offsets.items():
                if isinstance(info, BaseException):
                    raise info
                row = [d.group_id, tp.topic, str(tp.partition)]
                if verbose:
                    row.append("-" if info.leader_epoch is None else str(info.leader_epoch))
                row += ["-" if info.start_offset < 0 else str(info.start_offset),
                        "-" if info.lag < 0 else str(info.lag)]
                rows.append(row)
            header = ["GROUP", "TOPIC", "PARTITION"] + (["LEADER-EPOCH"] if verbose else []) + ["START-OFFSET", "LAG"]
            widths: list[int | None] = [None, None, 10] + ([13] if verbose else []) + [13, 0]
            print()
            if not rows:
                print(f"Share group '{d.group_id}' has no offset information.")
                continue
            print_table(header, rows, widths)

    def print_members(self, found: list[ShareGroupDescription]) -> None:
        verbose = self.o.verbose
        for d in found:
            if self._no_members(d) or not d.members:
                continue
            header = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"] + \
                (["MEMBER-EPOCH"] if verbose else []) + ["ASSIGNMENT"]
            widths: list[int | None] = [None, None, None, None, 12] + ([13] if verbose else []) + [0]
            rows = []
            for m in sorted(d.members, key=lambda m: m.member_id):
                rows.append([d.group_id, m.member_id, m.host, m.client_id, str(len(m.assignment))]
                            + ([str(m.member_epoch)] if verbose else [])
                            + [assignment(m.assignment) if m.assignment else ""])
            print()
            print_table(header, rows, widths)

    def print_states(self, found: list[ShareGroupDescription]) -> None:
        verbose = self.o.verbose
        for d in found:
            c = d.coordinator
            coordinator = f"{c.host}:{c.port}  ({c.id})" if c else "-"
            header = ["GROUP", "COORDINATOR (ID)", "STATE"] + (["GROUP-EPOCH", "ASSIGNMENT-EPOCH"] if verbose else []) \
                + ["#MEMBERS"]
            row = [d.group_id, coordinator, d.state] + ([str(d.group_epoch), str(d.assignment_epoch)]
                                                         if verbose else []) + [str(len(d.members))]
            widths: list[int | None] = [None, max(25, len(coordinator)), 15] + ([12, 17] if verbose else []) + [0]
            print()
            print_table(header, [row], widths)
            self._no_members(d)

    # ---------------------------------------------------------------- --reset-offsets

    def reset_offsets(self) -> int:
        o = self.o
        group_id = o.group[0]
        d = self.admin.describe_share_groups([group_id])[group_id]
        if d.state not in ("Empty", "Dead"):
            warn(f"Share group '{group_id}' is not empty.")
            return 1
        current = {tp: info.start_offset for tp, info in self.admin.list_share_group_offsets(group_id).items()
                   if not isinstance(info, BaseException) and info.start_offset >= 0}
        from_file = parse_offsets_file(o.from_file, [group_id]).get(group_id, {}) if o.from_file else {}
        if o.from_file:
            tps = sorted(from_file)
        elif o.all_topics:
            tps = sorted(current)
        else:
            tps = self.partitions_of(parse_topics(o.topic))
        plan = self.new_offsets(tps, current, from_file)
        if o.execute and plan:
            failed = {tp: e for tp, e in self.admin.alter_share_group_offsets(group_id, plan).items() if e is not None}
            if failed:
                tp, e = next(iter(failed.items()))
                raise errors.error_for(e.code, f"Resetting the offset of {tp}: {error_message(e)}")
        if o.export:
            for tp, offset in sorted(plan.items()):
                print(f"{tp.topic},{tp.partition},{offset}")
            return 0
        print()
        print_table(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
                    [[group_id, tp.topic, str(tp.partition), str(off)] for tp, off in sorted(plan.items())],
                    [None, None, 10, 0])
        return 0

    def offsets(self, tps: list[TopicPartition], spec: str | int) -> dict[TopicPartition, int]:
        return {tp: r.offset for tp, r in self.admin.list_offsets({tp: spec for tp in tps}).items()} if tps else {}

    def new_offsets(self, tps: list[TopicPartition], current: dict[TopicPartition, int],
                    from_file: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        o = self.o
        if not tps:
            return {}
        earliest, latest = self.offsets(tps, "earliest"), self.offsets(tps, "latest")
        choice = reset_choice(o)
        by_time = self.offsets(tps, max(parse_datetime(o.to_datetime), 0)) if o.to_datetime else None
        # --to-current: a partition the group has no start offset for stays where a new group would start.
        committed = {tp: current.get(tp, latest[tp]) for tp in tps} if choice == "to-current" else current
        return plan_reset(choice, tps, committed, earliest, latest, offset=o.to_offset, shift=None,
                          from_file=from_file, by_time=by_time)

    # ---------------------------------------------------------------- --delete

    # ---------------------------------------------------------------- --delete-offsets

    def delete_offsets(self) -> int:
        group_id = self.o.group[0]
        topics = list(dict.fromkeys(self.o.topic))
        try:
            results = {t: (error_message(e) if e is not None else None)
                       for t, e in self.admin.delete_share_group_offsets(group_id, topics).items()}
        except errors.GroupIdNotFoundError:
            warn(f"Error: Share group '{group_id}' does not exist.")
            return 1
        except errors.KafkaError as e:
            warn(f"\nError: {error_message(e)}")
            results = {t: error_message(e) for t in topics}
        print()
        print_table(["TOPIC", "STATUS"], [[t, "Successful" if results.get(t) is None else f"Error: {results[t]}"]
                                          for t in sorted(topics)], [None, 0])
        return 1 if any(v is not None for v in results.values()) else 0


def main(argv: list[str] | None = None) -> int:
    return run(argv, build_parser(), check_args, Tool, "samsa-share-groups", DESCRIPTION, "share group")


if __name__ == "__main__":
    sys.exit(main())
