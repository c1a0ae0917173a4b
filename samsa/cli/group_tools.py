"""What ``samsa consumer-groups`` and ``samsa share-groups`` have in common: Kafka's
kafka-consumer-groups.sh and kafka-share-groups.sh take the same actions, the same --topic,
--from-file and --to-datetime values, print the same tables and run the same way. Where the two
tools differ (the states they know, whether --reset-offsets takes --all-groups) the caller says so.
"""

from __future__ import annotations

import argparse
import re
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Callable, Iterable, Mapping

from samsa.cli.common import UsageError, admin_config, error_message, run_tool
from samsa.client.admin import Admin
from samsa.client import offset_reset
from samsa.client.offset_reset import Clamped, ResetError
from samsa.client.types import TopicPartition
from samsa.protocol import errors

ACTIONS = ("list", "describe", "delete", "reset_offsets", "delete_offsets")


def flag(name: str) -> str:
    return "[" + name.replace("_", "-") + "]"


def given(opts: argparse.Namespace, name: str) -> bool:
    value = getattr(opts, name)
    return value not in (None, False, [])


def cant(opts: argparse.Namespace, name: str, allowed: tuple[str, ...]) -> None:
    """``name`` only goes with the ``allowed`` actions (Kafka's checkInvalidArgs)."""
    if not given(opts, name):
        return
    for action in ACTIONS:
        if action not in allowed and getattr(opts, action):
            raise UsageError(f'Option "{flag(name)}" can\'t be used with option "{flag(action)}"')


def parse_topics(values: list[str]) -> list[tuple[str, list[int] | None]]:
    """``["t1", "t2:0,2"]`` -> ``[("t1", None), ("t2", [0, 2])]`` (None: every partition)."""
    out = []
    for v in values:
        name, sep, parts = v.partition(":")
        if not name:
            raise UsageError(f"Invalid --topic '{v}': expected TOPIC or TOPIC:PARTITION,PARTITION,...")
        if not sep:
            out.append((name, None))
            continue
        try:
            partitions = [int(x) for x in parts.split(",")]
        except ValueError:
            raise UsageError(f"Invalid partition list in --topic '{v}': expected TOPIC:PARTITION,PARTITION,...") \
                from None
        if any(p < 0 for p in partitions):
            raise UsageError(f"Invalid partition list in --topic '{v}': partitions are not negative")
        out.append((name, partitions))
    return out


_DATETIME = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?"
                       r"(Z|[+-]\d{2}(?::?\d{2})?)?")


def parse_datetime(text: str) -> int:
    """``YYYY-MM-DDTHH:mm:SS.sss`` with an optional zone (``Z``, ``+hh:mm``) -> epoch ms.
    Without a zone the local time zone applies, as in Kafka's tool."""
    m = _DATETIME.fullmatch(text.strip())
    if not m:
        raise UsageError(f"Error parsing timestamp '{text}': expected the format YYYY-MM-DDTHH:mm:SS.sss, "
                         "optionally followed by a time zone (Z, +hh:mm or -hh:mm)")
    year, month, day, hour, minute, second, fraction, zone = m.groups()
    if zone is None:
        tz = None
    elif zone == "Z":
        tz = timezone.utc
    else:
        digits = zone[1:].replace(":", "")
        delta = timedelta(hours=int(digits[:2]), minutes=int(digits[2:] or 0))
        tz = timezone(delta if zone[0] == "+" else -delta)
    try:
        dt = datetime(int(year), int(month), int(day), int(hour), int(minute), int(second or 0),
                      int((fraction or "0").ljust(6, "0")[:6]), tzinfo=tz)
    except ValueError as e:
        raise UsageError(f"Error parsing timestamp '{text}': {e}") from None
    if tz is None:
        dt = dt.astimezone()  # the local zone
    return int(dt.timestamp() * 1000)


def parse_offsets_file(path: str, group_ids: list[str]) -> dict[str, dict[TopicPartition, int]]:
    """A --from-file CSV: ``topic,partition,offset`` lines for one group, or
    ``group,topic,partition,offset`` lines (as --export writes them for several groups)."""
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise UsageError(f"Cannot read --from-file {path}: {e.strerror}") from None
    out: dict[str, dict[TopicPartition, int]] = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = [f.strip() for f in line.split(",")]
        try:
            if len(fields) == 3 and len(group_ids) == 1:
                group, (topic, partition, offset) = group_ids[0], fields
            elif len(fields) == 4:
                group, topic, partition, offset = fields
            else:
                raise ValueError
            out.setdefault(group, {})[TopicPartition(topic, int(partition))] = int(offset)
        except ValueError:
            raise UsageError(f"Invalid line {n} in {path}: expected "
                             + ("topic,partition,offset" if len(group_ids) == 1 else "group,topic,partition,offset")
                             ) from None
    return out


def print_table(header: list[str], rows: list[list[str]], widths: list[int | None]) -> None:
    """Left-aligned columns like Kafka's ``%-Ns``: a column is ``width`` wide (None: as wide as
    its longest cell, at least 15), and a longer value pushes the rest of its line along."""
    sized = []
    for i, w in enumerate(widths):
        cells = [header[i]] + [r[i] for r in rows]
        sized.append(max(15, *(len(c) for c in cells)) if w is None else w)
    for r in [header] + rows:
        print(" ".join(c.ljust(w) for c, w in zip(r, sized)).rstrip())


def warn(text: str) -> None:
    print(text, file=sys.stderr)


def assignment(tps: list[TopicPartition]) -> str:
    """``topic:0,1;other:2`` as Kafka 4's tool shows a consumer group member's partitions."""
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(tps):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return ";".join(f"{t}:{','.join(map(str, ps))}" for t, ps in by_topic.items()) or "-"


def parse_states(text: str, states: tuple[str, ...]) -> list[str]:
    """``"stable,EMPTY"`` -> ``["Stable", "Empty"]`` (case does not matter, as in Kafka)."""
    by_lower = {s.lower(): s for s in states}
    names = [s.strip() for s in text.split(",")]
    if not all(n.lower() in by_lower for n in names):
        raise UsageError(f"Invalid state list '{text}'. Valid states are: {', '.join(states)}")
    return list(dict.fromkeys(by_lower[n.lower()] for n in names))


def check_common(o: argparse.Namespace, groups_for: tuple[str, ...]) -> str:
    """The checks both tools make first; returns the action. ``groups_for``: the actions that take
    [group] or [all-groups]."""
    actions = [a for a in ACTIONS if getattr(o, a)]
    if len(actions) != 1:
        raise UsageError("Command must include exactly one action: --list, --describe, --delete, --reset-offsets, "
                         "--delete-offsets")
    action = actions[0]
    if not o.bootstrap_server:
        raise UsageError('Missing required argument "[bootstrap-server]"')
    if o.timeout is not None and o.timeout <= 0:
        raise UsageError("Option [timeout] must be a positive number of milliseconds")
    if o.group and o.all_groups:
        raise UsageError('Option "[all-groups]" can\'t be used with option "[group]"')
    if o.topic and o.all_topics:
        raise UsageError('Option "[all-topics]" can\'t be used with option "[topic]"')
    if action in groups_for and not o.group and not o.all_groups:
        raise UsageError(f"Option {flag(action)} takes one of these options: [all-groups], [group]")
    if action == "describe":
        views = [v for v in ("members", "offsets") if getattr(o, v)] + (["state"] if o.state is not None else [])
        if len(views) > 1:
            raise UsageError("Option [describe] takes at most one of these options: [members], [offsets], [state]")
        if o.state:
            raise UsageError(f"Option [describe] takes [state] without a value, got '{o.state}'")
    return action


def check_reset_scope(o: argparse.Namespace, scenarios: tuple[str, ...], exactly: bool) -> None:
    """--reset-offsets: one reset specification and a scope. ``exactly``: the message says "exactly one"
    (kafka-share-groups.sh) rather than "one"/"at most one" (kafka-consumer-groups.sh)."""
    chosen = [s for s in scenarios if given(o, s)]
    if len(chosen) != 1:
        many = "exactly one" if exactly else "at most one" if chosen else "one"
        raise UsageError(f"Option [reset-offsets] takes {many} of these options: "
                         + ", ".join(flag(s) for s in scenarios))
    if not o.topic and not o.all_topics and not o.from_file:
        raise UsageError("Option [reset-offsets] takes one of these options: [all-topics], [topic]")


def check_delete_offsets(o: argparse.Namespace) -> None:
    if not o.group or not o.topic:
        raise UsageError("Option [delete-offsets] takes the following options: [group], [topic]")
    if len(o.group) > 1:
        raise UsageError("Option [delete-offsets] supports only one [group] at a time")


def check_only_with(o: argparse.Namespace, action: str, all_groups_for: tuple[str, ...]) -> None:
    """Each option only with the actions Kafka's tools take it with."""
    cant(o, "group", ("describe", "delete", "reset_offsets", "delete_offsets"))
    cant(o, "all_groups", all_groups_for)
    cant(o, "topic", ("reset_offsets", "delete_offsets"))
    cant(o, "all_topics", ("reset_offsets",))
    for name in ("members", "offsets", "verbose"):
        cant(o, name, ("describe",))
    if o.state is not None and action not in ("list", "describe"):
        raise UsageError(f'Option "[state]" can\'t be used with option "{flag(action)}"')


def add_reset_specifications(a: Callable[..., object], datetime_format: str, durations: bool) -> None:
    """--reset-offsets' reset specifications, in Kafka's order; ``durations``: --by-duration and
    --shift-by too (kafka-consumer-groups.sh has them, kafka-share-groups.sh does not)."""
    a("--to-offset", metavar="<Long: offset>", type=int, help="Reset offsets to a specific offset.")
    a("--from-file", metavar="<String: path to CSV file>", help="Reset offsets to values defined in CSV file.")
    a("--to-datetime", metavar="<String: datetime>",
      help=f"Reset offsets to offset from datetime. Format: '{datetime_format}'")
    if durations:
        a("--by-duration", metavar="<String: duration>",
          help="Reset offsets to offset by duration from current timestamp. Format: 'PnDTnHnMnS'")
    a("--to-earliest", action="store_true", help="Reset offsets to earliest offset.")
    a("--to-latest", action="store_true", help="Reset offsets to latest offset.")
    a("--to-current", action="store_true", help="Reset offsets to current offset.")
    if durations:
        a("--shift-by", metavar="<Long: number-of-offsets>", type=int,
          help="Reset offsets shifting current offset by 'n', where 'n' can be positive or negative.")


class GroupTool:
    """The tool's actions, one method each (``list``, ``describe``...); ``all_group_ids`` lists the groups
    --all-groups means."""

    def __init__(self, admin: Admin, opts: argparse.Namespace):
        self.admin = admin
        self.o = opts

    def all_group_ids(self) -> list[str]:
        raise NotImplementedError

    def group_ids(self) -> list[str]:
        if self.o.all_groups:
            return self.all_group_ids()
        return list(dict.fromkeys(self.o.group))

    def partitions_of(self, topics: list[tuple[str, list[int] | None]]) -> list[TopicPartition]:
        return partitions_of(self.admin, topics)


class ListedGroupTool(GroupTool):
    """--list and --describe as kafka-share-groups and kafka-streams-groups have them (the
    consumer groups tool's differ): a subclass names its group kind's ``STATES`` and Admin calls,
    and prints --describe's three views (``print_states``, ``print_members``, ``print_offsets``)."""

    STATES: tuple[str, ...] = ()

    def list_groups(self, states: list[str] | None) -> list:
        raise NotImplementedError

    def describe_groups(self, group_ids: list[str]) -> dict:
        raise NotImplementedError

    def print_states(self, found: list) -> None:
        raise NotImplementedError

    def print_members(self, found: list) -> None:
        raise NotImplementedError

    def print_offsets(self, found: list) -> None:
        raise NotImplementedError

    def all_group_ids(self) -> list[str]:
        return [g.group_id for g in self.list_groups(None)]

    def list(self) -> int:
        states = parse_states(self.o.state, self.STATES) if self.o.state else None
        groups = self.list_groups(states)
        if self.o.state is None:
            for g in groups:
                print(g.group_id)
            return 0
        print_table(["GROUP", "STATE"], [[g.group_id, g.state or "Unknown"] for g in groups], [None, 0])
        return 0

    KIND = ""  # "share", "streams": the groups' kind, as the tool's messages name it

    def delete_groups(self, group_ids: list[str]) -> dict:
        raise NotImplementedError

    def delete(self) -> int:
        group_ids = self.group_ids()
        ours = {g.group_id for g in self.list_groups(None)}
        failed: dict[str, str] = {g: f"Group '{g}' is not a {self.KIND} group." for g in group_ids if g not in ours}
        todo = [g for g in group_ids if g in ours]
        for group_id, e in (self.delete_groups(todo) if todo else {}).items():
            if e is not None:
                failed[group_id] = error_message(e)
        return print_deletion(f"{self.KIND} group", [g for g in todo if g not in failed],
                              {g: failed[g] for g in group_ids if g in failed}, failures_to_stderr=True)

    def describe(self) -> int:
        group_ids = self.group_ids()
        described = self.describe_groups(group_ids) if group_ids else {}
        found = [described[g] for g in group_ids]
        if self.o.state is not None:
            self.print_states(found)
        elif self.o.members:
            self.print_members(found)
        else:
            self.print_offsets(found)
        return 0


def partitions_of(admin: Admin, topics: list[tuple[str, list[int] | None]]) -> list[TopicPartition]:
    """The partitions that --topic names: all of a topic's unless some are listed."""
    described = admin.describe_topics(list(dict.fromkeys(name for name, _ in topics)))
    out = []
    for name, parts in topics:
        known = [p.partition for p in described[name].partitions]
        for p in known if parts is None else parts:
            if p not in known:
                raise errors.UnknownTopicOrPartitionError(
                    f"Partition {p} of topic '{name}' does not exist (the topic has {len(known)} partitions)")
            out.append(TopicPartition(name, p))
    return list(dict.fromkeys(out))


def print_deletion(what: str, deleted: list[str], failed: dict[str, str], failures_to_stderr: bool) -> int:
    """--delete's report: ``what`` is "consumer group" or "share group"; ``failed`` maps a group to why.
    kafka-share-groups.sh prints the failures as an error (stderr), kafka-consumer-groups.sh on stdout."""
    names = ", ".join(f"'{g}'" for g in deleted)
    if not failed:
        print(f"Deletion of requested {what}s ({names}) was successful.")
        return 0
    out = sys.stderr if failures_to_stderr else sys.stdout
    print(("\nError: " if failures_to_stderr else "") + f"Deletion of some {what}s failed:", file=out)
    for group_id, why in failed.items():
        print(f"* Group '{group_id}' could not be deleted due to: {why}", file=out)
    if deleted:
        print(f"\nThese {what}s were deleted successfully: {names}")
    return 1


def reset_choice(o: argparse.Namespace) -> str:
    """The one reset specification given, as offset_reset names it ("to-earliest", ...)."""
    return next(c for c in offset_reset.CHOICES if getattr(o, c.replace("-", "_"), None) not in (None, False, []))


def plan_reset(choice: str, tps: list[TopicPartition], committed: Mapping[TopicPartition, int],
               earliest: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int], *, offset: int | None,
               shift: int | None, from_file: Mapping[TopicPartition, int],
               by_time: Mapping[TopicPartition, int] | None) -> dict[TopicPartition, int]:
    """offset_reset's new offsets, a refused plan as one KafkaError, the clamped ones warned about."""
    try:
        new, clamped = offset_reset.new_offsets(choice, tps, committed, earliest, latest, offset=offset, shift=shift,
                                                from_file=from_file, by_time=by_time)
    except ResetError as e:
        raise errors.KafkaError(str(e)) from None
    warn_clamped(clamped)
    return new


def warn_clamped(clamped: Iterable[Clamped]) -> None:
    for c in clamped:
        warn(f"WARN: New offset ({c.asked}) is {'higher' if c.higher else 'lower'} than "
             f"{'latest' if c.higher else 'earliest'} offset for topic partition {c.tp}. Value will be set to "
             f"{c.bound}")


def run(argv: list[str] | None, parser: argparse.ArgumentParser, check_args: Callable[[argparse.Namespace], None],
        tool: Callable[[Admin, argparse.Namespace], object], client_id: str, description: str, what: str) -> int:
    """Check the arguments, connect an Admin and run the one action given; Kafka errors are one line
    ("Error: Executing {what} command failed due to ...")."""
    def go(opts: argparse.Namespace) -> int:
        check_args(opts)
        config = admin_config(opts, client_id)
        config.setdefault("request.timeout.ms", str(opts.timeout))
        config.setdefault("default.api.timeout.ms", str(opts.timeout))
        action = next(a for a in ACTIONS if getattr(opts, a))
        with Admin(config) as admin:
            return getattr(tool(admin, opts), action)()
    return run_tool(argv, parser, go, description=description, failures=[
        ((errors.KafkaError, ValueError), f"Error: Executing {what} command failed due to {{}}")])
