"""``samsa consumer-groups``: kafka-consumer-groups.sh with Kafka's flags and output.

    samsa consumer-groups --bootstrap-server localhost:9092 --list [--state [Stable,Empty]]
    samsa consumer-groups --bootstrap-server localhost:9092 --describe --group g1 [--members [--verbose] | --state]
    samsa consumer-groups --bootstrap-server localhost:9092 --reset-offsets --group g1 --topic t:0,1 --to-earliest
        --execute
    samsa consumer-groups --bootstrap-server localhost:9092 --delete --group g1
    samsa consumer-groups --bootstrap-server localhost:9092 --delete-offsets --group g1 --topic t

LOG-END-OFFSET and LAG use the high watermark (ListOffsets latest, read_uncommitted).
``--reset-offsets`` shows the plan unless ``--execute`` is given, and (as in Kafka) only
works on groups without members; new offsets are kept between each partition's earliest
and latest offset.
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime, timezone
from typing import Mapping

from samsa.cli.common import Parser, UsageError, error_message
from samsa.cli import group_tools
from samsa.cli.group_tools import (GroupTool, add_reset_specifications, assignment, cant, check_common,
                                   check_delete_offsets, check_only_with, check_reset_scope, flag, parse_datetime,
                                   parse_offsets_file, parse_topics, plan_reset, print_deletion, print_table,
                                   reset_choice, run, warn)
from samsa.client import offset_reset
from samsa.client.offset_reset import ResetError
from samsa.client.types import ConsumerGroupDescription, OffsetAndMetadata, TopicPartition
from samsa.protocol import errors

DESCRIPTION = ("This tool helps to list all consumer groups, describe a consumer group, delete consumer group info, "
               "or reset consumer group offsets.")
SCENARIOS = ("to_datetime", "by_duration", "to_earliest", "to_latest", "shift_by", "from_file", "to_current",
             "to_offset")
# Kafka's consumer group states (ConsumerGroupState without UNKNOWN), as --state accepts them.
STATES = ("PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty", "Assigning", "Reconciling")
INACTIVE = ("Empty", "Dead")
REBALANCING = ("PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling")


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="samsa consumer-groups", description=DESCRIPTION)
    a = p.add_argument
    a("--bootstrap-server", metavar="<String: server to connect to>",
      help="REQUIRED: The server(s) to connect to.")
    a("--command-config", metavar="<String: command config property file>",
      help="Property file containing configs to be passed to Admin Client and Consumer.")
    a("--timeout", metavar="<Long: timeout (ms)>", type=int, default=5000,
      help="The timeout in ms for the admin calls (connecting, finding a group's coordinator). (default: 5000)")
    a("--list", action="store_true", help="List all consumer groups.")
    a("--describe", action="store_true", help="Describe consumer group and list offset lag (number of messages "
      "not yet processed) related to given group.")
    a("--delete", action="store_true", help="Pass in groups to delete topic partition offsets and ownership "
      "information over the entire consumer group. For instance --group g1 --group g2")
    a("--delete-offsets", action="store_true", help="Delete offsets of consumer group. Supports one consumer "
      "group at the time, and multiple topics.")
    a("--reset-offsets", action="store_true", help="Reset offsets of consumer group. Supports one consumer group "
      "at the time, and instances should be inactive. Has 2 execution options: --dry-run (the default) to plan "
      "which offsets to reset, and --execute to update the offsets. Additionally, the --export option is used to "
      "export the results to a CSV format. You must choose one of the following reset specifications: "
      "--to-datetime, --by-duration, --to-earliest, --to-latest, --shift-by, --from-file, --to-current, "
      "--to-offset. To define the scope use --all-topics or --topic.")
    a("--group", metavar="<String: consumer group>", action="append", default=[],
      help="The consumer group we wish to act on.")
    a("--all-groups", action="store_true", help="Apply to all consumer groups.")
    a("--topic", metavar="<String: topic>", action="append", default=[],
      help="The topic whose consumer group information should be deleted or topic whose should be included in "
      "the reset offset process. In `reset-offsets` case, partitions can be specified using this format: "
      "`topic1:0,1,2`, where 0,1,2 are the partition to be included in the process.")
    a("--all-topics", action="store_true", help="Consider all topics assigned to a group in the `reset-offsets` "
      "process.")
    a("--members", action="store_true", help="Describe members of the group. This option may be used with "
      "'--describe' and '--bootstrap-server' options only.")
    a("--offsets", action="store_true", help="Describe the group and list all topic partitions in the group "
      "along with their offset lag. This is the default sub-action of '--describe'.")
    a("--state", metavar="<String>", nargs="?", const="", default=None,
      help="When specified with '--describe', includes the state of the group. When specified with '--list', "
      "it displays the state of all groups. It can also be used to list groups with specific states, "
      "e.g. '--list --state Stable,Empty'.")
    a("--type", metavar="<String>", nargs="?", const="", default=None,
      help="When specified with '--list', it displays the types of all the groups. It can also be used to list "
      "groups with specific types, e.g. '--list --type Classic,Consumer'.")
    a("--verbose", action="store_true", help="Provide additional information, if any, when describing the group "
      "(the partitions assigned to each member with '--members').")
    a("--dry-run", action="store_true", help="Only show results without executing changes on Consumer Groups. "
      "Supported operations: reset-offsets.")
    a("--execute", action="store_true", help="Execute operation. Supported operations: reset-offsets.")
    a("--export", action="store_true", help="Export operation execution to a CSV file. Supported operations: "
      "reset-offsets.")
    add_reset_specifications(a, "YYYY-MM-DDTHH:mm:SS.sss", durations=True)
    return p


# ---------------------------------------------------------------------------- arguments

def check_args(o: argparse.Namespace) -> None:
    action = check_common(o, groups_for=("describe", "delete", "reset_offsets"))
    if action == "reset_offsets":
        if o.dry_run and o.execute:
            raise UsageError("Option [reset-offsets] only accepts one of [execute] and [dry-run]")
        check_reset_scope(o, SCENARIOS, exactly=False)
    if action == "delete_offsets":
        check_delete_offsets(o)
    check_only_with(o, action, all_groups_for=("describe", "delete", "reset_offsets"))
    if o.type is not None and action != "list":
        raise UsageError(f'Option "[type]" can\'t be used with option "{flag(action)}"')
    if o.type:
        parse_types(o.type)
    for name in ("dry_run", "execute", "export") + SCENARIOS:
        cant(o, name, ("reset_offsets",))
    # Values that can be wrong: found out before connecting to anything.
    parse_topics(o.topic)
    if action == "list" and o.state:
        parse_states(o.state)
    if o.to_datetime is not None:
        parse_datetime(o.to_datetime)
    if o.by_duration is not None:
        parse_duration(o.by_duration)


def parse_states(text: str) -> list[str]:
    return group_tools.parse_states(text, STATES)


TYPES = ("classic", "consumer")


def parse_types(text: str) -> list[str]:
    types = [t.strip().lower() for t in text.split(",") if t.strip()]
    bad = [t for t in types if t not in TYPES]
    if bad or not types:
        raise UsageError(f"Invalid types list '{text}'. Valid types are: Classic, Consumer")
    return types


def parse_duration(text: str) -> int:
    """``--by-duration``: Java's ``Duration.parse`` format (``PnDTnHnMn.nS``) -> milliseconds."""
    try:
        return offset_reset.parse_duration(text)
    except ResetError as e:
        raise UsageError(str(e)) from None


def _dash(value: object) -> str:
    return "-" if value is None else str(value)


# ---------------------------------------------------------------------------- the tool

class Tool(GroupTool):
    def all_group_ids(self) -> list[str]:
        return [g.group_id for g in self.admin.list_consumer_groups()]

    def offsets(self, tps: list[TopicPartition], spec: str | int) -> dict[TopicPartition, int]:
        """ListOffsets for ``tps``; partitions of topics that are gone are left out."""
        if not tps:
            return {}
        try:
            return {tp: r.offset for tp, r in self.admin.list_offsets({tp: spec for tp in tps}).items()}
        except errors.UnknownTopicOrPartitionError:
            pass
        out = {}
        for topic in sorted({tp.topic for tp in tps}):
            try:
                found = self.admin.list_offsets({tp: spec for tp in tps if tp.topic == topic})
            except errors.UnknownTopicOrPartitionError:
                continue
            out.update((tp, r.offset) for tp, r in found.items())
        return out

    def list(self) -> int:
        states = parse_states(self.o.state) if self.o.state else None
        groups = self.admin.list_consumer_groups(states)
        if self.o.type:
            types = parse_types(self.o.type)
            groups = [g for g in groups if (g.type or "classic") in types]
        if self.o.state is None and self.o.type is None:
            for g in groups:
                print(g.group_id)
            return 0
        header, widths = ["GROUP"], [31]
        if self.o.state is not None:
            header.append("STATE")
            widths.append(20)
        if self.o.type is not None:
            header.append("TYPE")
            widths.append(20)
        rows = []
        for g in groups:
            row = [g.group_id]
            if self.o.state is not None:
                row.append(g.state or "Unknown")
            if self.o.type is not None:
                row.append((g.type or "classic").capitalize())
            rows.append(row)
        print_table(header, rows, widths if self.o.type is not None else [None, None])
        return 0

    # ---------------------------------------------------------------- --describe

    def describe(self) -> int:
        group_ids = self.group_ids()
        described = self.admin.describe_consumer_groups(group_ids) if group_ids else {}
        missing = [g for g in group_ids if described[g].state == "Dead"]
        for group_id in missing:
            warn(f"Error: Consumer group '{group_id}' does not exist.")
        found = [described[g] for g in group_ids if g not in missing]
        if self.o.state is not None:
            if found:
                self.print_states(found)
        else:
            for d in found:
                if self.o.members:
                    self.print_members(d)
                else:
                    self.print_offsets(d)
        return 1 if missing else 0

    @staticmethod
    def print_member_state(d: ConsumerGroupDescription) -> None:
        if d.state == "Empty":
            print(f"\nConsumer group '{d.group_id}' has no active members.")
        elif d.state in REBALANCING:
            print(f"\nWarning: Consumer group '{d.group_id}' is rebalancing.")

    def print_offsets(self, d: ConsumerGroupDescription) -> None:
        committed = self.admin.list_consumer_group_offsets(d.group_id)
        owner = {tp: m for m in d.members for tp in m.assignment}
        tps = sorted(set(committed) | set(owner))
        ends = self.offsets(tps, "latest")
        rows = []
        for tp in tps:
            current = committed[tp].offset if tp in committed else None
            end = ends.get(tp)
            lag = end - current if current is not None and end is not None else None
            m = owner.get(tp)
            rows.append([d.group_id, tp.topic, str(tp.partition), _dash(current), _dash(end), _dash(lag),
                         m.member_id if m else "-", m.host if m else "-", m.client_id if m else "-"])
        for m in d.members:
            if not m.assignment:  # a member without partitions still shows
                rows.append([d.group_id, "-", "-", "-", "-", "-", m.member_id, m.host, m.client_id])
        self.print_member_state(d)
        print()
        print_table(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID",
                     "HOST", "CLIENT-ID"], rows, [None, None, 10, 15, 15, 15, None, None, 0])

    def print_members(self, d: ConsumerGroupDescription) -> None:
        self.print_member_state(d)
        if not d.members:
            return
        header = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
        widths: list[int | None] = [None, None, None, None, 15]
        consumer = d.type == "consumer"
        if self.o.verbose and consumer:  # KIP-848: member epochs, current and target assignments
            header += ["CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"]
            widths += [15, 20, 15, 20]
        elif self.o.verbose:
            header.append("ASSIGNMENT")
            widths.append(0)
        rows = []
        for m in d.members:
            row = [d.group_id, m.member_id, m.host, m.client_id, str(len(m.assignment))]
            if self.o.verbose and consumer:
                row += [_dash(m.member_epoch), assignment(m.assignment), _dash(d.target_assignment_epoch),
                        assignment(m.target_assignment or [])]
            elif self.o.verbose:
                by_topic: dict[str, list[int]] = {}
                for tp in sorted(m.assignment):
                    by_topic.setdefault(tp.topic, []).append(tp.partition)
                row.append(", ".join(f"{t}({','.join(map(str, ps))})" for t, ps in by_topic.items()) or "-")
            rows.append(row)
        print()
        print_table(header, rows, widths)

    def print_states(self, found: list[ConsumerGroupDescription]) -> None:
        if all(d.type != "consumer" for d in found):  # classic groups: one table
            rows = []
            for d in found:
                c = d.coordinator
                coordinator = f"{c.host}:{c.port} ({c.id})" if c else "-"
                rows.append([d.group_id, coordinator, d.partition_assignor, d.state, str(len(d.members))])
            print()
            print_table(["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"], rows,
                        [None, 25, 20, 15, 0])
            return
        for d in found:
            c = d.coordinator
            coordinator = f"{c.host}:{c.port}  ({c.id})" if c and d.type == "consumer" else \
                f"{c.host}:{c.port} ({c.id})" if c else "-"
            print()
            if d.type == "consumer":  # Kafka 4's columns for consumer groups (KIP-848)
                header = ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE"]
                row = [d.group_id, coordinator, d.partition_assignor, d.state]
                widths: list[int | None] = [None, 25, 20, 20]
                if self.o.verbose:
                    header += ["GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH"]
                    row += [_dash(d.group_epoch), _dash(d.target_assignment_epoch)]
                    widths += [15, 25]
                print_table(header + ["#MEMBERS"], [row + [str(len(d.members))]], widths + [0])
            else:
                print_table(["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
                            [[d.group_id, coordinator, d.partition_assignor, d.state, str(len(d.members))]],
                            [None, 25, 20, 15, 0])

    # ---------------------------------------------------------------- --reset-offsets

    def reset_offsets(self) -> int:
        o = self.o
        if not o.dry_run and not o.execute:
            warn("WARN: No action will be performed as the --execute option is missing. "
                 "Add --dry-run to keep this behaviour without the warning.")
        group_ids = self.group_ids()
        from_file = parse_offsets_file(o.from_file, group_ids) if o.from_file else {}
        topics = parse_topics(o.topic) if o.topic else []
        named = self.partitions_of(topics) if topics else []
        described = self.admin.describe_consumer_groups(group_ids) if group_ids else {}
        plans: dict[str, dict[TopicPartition, int]] = {}
        refused = False
        for group_id in group_ids:
            state = described[group_id].state
            if state not in INACTIVE:
                warn(f"Assignments can only be reset if the group '{group_id}' is inactive, "
                     f"but the current state is {state}.")
                refused = True
                continue
            committed = self.admin.list_consumer_group_offsets(group_id)
            if o.from_file:
                tps = sorted(from_file.get(group_id, {}))
            elif o.all_topics:
                tps = sorted(committed)
            else:
                tps = named
            plan = self.new_offsets(tps, committed, from_file.get(group_id, {}))
            if o.execute and plan:
                self.admin.alter_consumer_group_offsets(group_id, plan)
            plans[group_id] = plan
        if o.export:
            for group_id, plan in plans.items():
                for tp, offset in sorted(plan.items()):
                    fields = [tp.topic, str(tp.partition), str(offset)]
                    print(",".join(fields if len(group_ids) == 1 else [group_id] + fields))
        elif plans:
            print()
            print_table(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
                        [[g, tp.topic, str(tp.partition), str(off)]
                         for g, plan in plans.items() for tp, off in sorted(plan.items())],
                        [30, 30, 10, 0])
        return 1 if refused else 0

    def new_offsets(self, tps: list[TopicPartition], committed: Mapping[TopicPartition, OffsetAndMetadata],
                    from_file: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        o = self.o
        if not tps:
            return {}
        earliest = self.offsets(tps, "earliest")
        latest = self.offsets(tps, "latest")
        for tp in tps:
            if tp not in earliest or tp not in latest:
                raise errors.UnknownTopicOrPartitionError(f"Partition {tp} does not exist")
        choice = reset_choice(o)
        by_time = None
        if o.to_datetime:
            by_time = self.offsets(tps, max(parse_datetime(o.to_datetime), 0))
        elif o.by_duration:
            now = int(datetime.now(timezone.utc).timestamp() * 1000)
            by_time = self.offsets(tps, max(now - parse_duration(o.by_duration), 0))
        return plan_reset(choice, tps, {tp: c.offset for tp, c in committed.items()}, earliest, latest,
                          offset=o.to_offset, shift=o.shift_by, from_file=from_file, by_time=by_time)

    # ---------------------------------------------------------------- --delete

    def delete(self) -> int:
        group_ids = self.group_ids()
        deleted: list[str] = []
        failed: dict[str, str] = {}
        for group_id in group_ids:
            try:
                self.admin.delete_consumer_groups([group_id])
                deleted.append(group_id)
            except errors.KafkaError as e:
                failed[group_id] = error_message(e)
        return print_deletion("consumer group", deleted, failed, failures_to_stderr=False)

    # ---------------------------------------------------------------- --delete-offsets

    def delete_offsets(self) -> int:
        group_id = self.o.group[0]
        tps = self.partitions_of(parse_topics(self.o.topic))
        try:
            results = self.admin.delete_consumer_group_offsets(group_id, tps)
        except errors.GroupIdNotFoundError:
            warn(f"Error: Consumer group '{group_id}' does not exist.")
            return 1
        except errors.NonEmptyGroupError:
            warn(f"Error: Deleting offsets of a consumer group '{group_id}' is forbidden if the group is not empty.")
            return 1
        failed = any(e is not None for e in results.values())
        if failed:
            warn("Error: Encounter some partition level error, see the follow-up details:")
        print()
        print_table(["TOPIC", "PARTITION", "STATUS"],
                    [[tp.topic, str(tp.partition), "Successful" if e is None else f"Error: {error_message(e)}"]
                     for tp, e in results.items()], [30, 15, 0])
        return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    return run(argv, build_parser(), check_args, Tool, "samsa-consumer-groups", DESCRIPTION, "consumer group")


if __name__ == "__main__":
    sys.exit(main())
