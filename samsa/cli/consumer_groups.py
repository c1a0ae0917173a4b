"""``samsa consumer-groups``: kafka-consumer-groups.sh with Kafka's flags and output.

    samsa consumer-groups --bootstrap-server localhost:9092 --list
    samsa consumer-groups --bootstrap-server localhost:9092 --describe --group g1 [--members [--verbose] | --state]
    samsa consumer-groups --bootstrap-server localhost:9092 --reset-offsets --group g1 --topic t --to-earliest --execute

LOG-END-OFFSET and LAG use the high watermark (ListOffsets latest).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
from datetime import datetime, timezone

from samsa.cli.common import Parser, UsageError, admin_config, error_message
from samsa.client.admin import AsyncAdmin
from samsa.client.group_admin import GroupAdmin, GroupDescription
from samsa.client.types import TopicPartition
from samsa.protocol import errors

DESCRIPTION = "Helps to list all consumer groups, describe a consumer group, delete consumer group info, or reset consumer group offsets."
RESET_SPECS = ("to_earliest", "to_latest", "to_current", "to_offset", "to_datetime", "shift_by", "by_duration")


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="samsa consumer-groups", description=DESCRIPTION)
    a = p.add_argument
    a("--bootstrap-server", help="REQUIRED: The server(s) to connect to.")
    a("--command-config", help="Property file containing configs to be passed to Admin Client.")
    a("--timeout", type=int, default=5000, help="The timeout in ms for group operations.")
    a("--list", action="store_true", help="List all consumer groups.")
    a("--describe", action="store_true", help="Describe consumer group and list offset lag.")
    a("--delete", action="store_true", help="Pass in groups to delete topic partition offsets and ownership.")
    a("--delete-offsets", action="store_true", help="Delete offsets of consumer group.")
    a("--reset-offsets", action="store_true", help="Reset offsets of consumer group.")
    a("--group", action="append", default=[], help="The consumer group we wish to act on.")
    a("--all-groups", action="store_true", help="Apply to all consumer groups.")
    a("--topic", action="append", default=[], help="The topic (topic:0,1,2 for partitions).")
    a("--all-topics", action="store_true", help="Consider all topics assigned to a group.")
    a("--members", action="store_true", help="Describe members of the group.")
    a("--verbose", action="store_true", help="Provide additional information, if any.")
    a("--offsets", action="store_true", help="Describe the group and list all topic partitions with offset lag.")
    a("--state", nargs="?", const="", default=None, help="Describe the group state, or filter --list by states.")
    a("--dry-run", action="store_true", help="Only show results without executing changes.")
    a("--execute", action="store_true", help="Execute the operation.")
    a("--to-earliest", action="store_true")
    a("--to-latest", action="store_true")
    a("--to-current", action="store_true")
    a("--to-offset", type=int)
    a("--to-datetime", help="YYYY-MM-DDTHH:mm:SS.sss")
    a("--shift-by", type=int)
    a("--by-duration", help="PnDTnHnMnS")
    return p


def check_args(o: argparse.Namespace) -> None:
    actions = [x for x in ("list", "describe", "delete", "delete_offsets", "reset_offsets") if getattr(o, x)]
    if len(actions) != 1:
        raise UsageError("Command must include exactly one action: --list, --describe, --delete, --reset-offsets, "
                         "--delete-offsets")
    if not o.bootstrap_server:
        raise UsageError("Missing required argument \"[bootstrap-server]\"")
    if actions[0] in ("describe", "reset_offsets") and not o.group and not o.all_groups:
        raise UsageError(f"Option [{actions[0].replace('_', '-')}] takes one of these options: [all-groups], [group]")
    if actions[0] in ("delete", "delete_offsets") and not o.group:
        raise UsageError(f"Option [{actions[0].replace('_', '-')}] takes the option: [group]")
    if actions[0] == "reset_offsets":
        specs = [s for s in RESET_SPECS if getattr(o, s) not in (None, False)]
        if len(specs) != 1:
            raise UsageError("Option [reset-offsets] takes exactly one of these options: --to-earliest, --to-latest, "
                             "--to-current, --to-offset, --to-datetime, --shift-by, --by-duration")
        if not o.topic and not o.all_topics:
            raise UsageError("Option [reset-offsets] takes one of these options: [all-topics], [topic]")
        if o.dry_run and o.execute:
            raise UsageError("Option [reset-offsets] only accepts one of [execute], [dry-run]")
    if actions[0] == "delete_offsets" and not o.topic:
        raise UsageError("Option [delete-offsets] takes the option: [topic]")


def parse_topics(values: list[str]) -> list[tuple[str, list[int] | None]]:
    out = []
    for v in values:
        name, _, parts = v.partition(":")
        try:
            out.append((name, [int(x) for x in parts.split(",") if x] if parts else None))
        except ValueError:
            raise UsageError(f"Invalid partition list in --topic {v}") from None
    return out


def table(rows: list[list[str]]) -> None:
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print(" ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip())


class Tool:
    def __init__(self, admin: AsyncAdmin, opts: argparse.Namespace):
        self.admin = admin
        self.groups = GroupAdmin(admin)
        self.o = opts

    async def group_ids(self) -> list[str]:
        if self.o.all_groups:
            return [g["group_id"] for g in await self.groups.list_groups()]
        return self.o.group

    async def log_end_offsets(self, tps) -> dict[TopicPartition, int]:
        if not tps:
            return {}
        found = await self.admin.list_offsets({tp: "latest" for tp in tps})
        return {tp: r.offset for tp, r in found.items()}

    # ---------------------------------------------------------------- actions

    async def list(self) -> None:
        states = [s for s in (self.o.state or "").split(",") if s] if self.o.state is not None else None
        groups = await self.groups.list_groups(states)
        if self.o.state is not None:
            rows = [["GROUP", "STATE"]] + [[g["group_id"], g["group_state"]] for g in groups]
            table(rows)
        else:
            for g in groups:
                print(g["group_id"])

    async def describe(self) -> int:
        failed = 0
        for group_id in await self.group_ids():
            d = await self.groups.describe(group_id)
            if d.state == "Dead":
                print(f"Error: Consumer group '{group_id}' does not exist.", file=sys.stderr)
                failed = 1
                continue
            print()
            if self.o.members:
                self.print_members(d)
            elif self.o.state is not None:
                self.print_state(d)
            else:
                await self.print_offsets(d)
        return failed

    def print_state(self, d: GroupDescription) -> None:
        node = self.admin.cluster.brokers.get(d.coordinator)
        coordinator = f"{node.host}:{node.port}  ({d.coordinator})" if node else f"({d.coordinator})"
        table([["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
               [d.group_id, coordinator, d.assignor, d.state, str(len(d.members))]])

    def print_members(self, d: GroupDescription) -> None:
        if not d.members:
            print(f"Consumer group '{d.group_id}' has no active members.")
            return
        head = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"] + (["ASSIGNMENT"] if self.o.verbose else [])
        rows = [head]
        for m in d.members:
            row = [d.group_id, m.member_id, m.host, m.client_id, str(len(m.assignment))]
            if self.o.verbose:
                by_topic: dict[str, list[int]] = {}
                for tp in m.assignment:
                    by_topic.setdefault(tp.topic, []).append(tp.partition)
                row.append(",".join(f"{t}({','.join(map(str, sorted(ps)))})" for t, ps in sorted(by_topic.items()))
                           or "-")
            rows.append(row)
        table(rows)

    async def print_offsets(self, d: GroupDescription) -> None:
        committed = await self.groups.offsets(d.group_id)
        owner = {tp: m for m in d.members for tp in m.assignment}
        tps = sorted(set(committed) | set(owner), key=lambda tp: (tp.topic, tp.partition))
        if not d.members:
            print(f"Consumer group '{d.group_id}' has no active members.")
            print()
        ends = await self.log_end_offsets(tps)
        rows = [["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
                 "CLIENT-ID"]]
        for tp in tps:
            current = committed[tp].offset if tp in committed else None
            end = ends.get(tp)
            lag = end - current if current is not None and end is not None else None
            m = owner.get(tp)
            rows.append([d.group_id, tp.topic, str(tp.partition), "-" if current is None else str(current),
                         "-" if end is None else str(end), "-" if lag is None else str(lag),
                         m.member_id if m else "-", m.host if m else "-", m.client_id if m else "-"])
        table(rows)

    async def reset_offsets(self) -> int:
        for group_id in await self.group_ids():
            d = await self.groups.describe(group_id)
            if self.o.execute and d.state not in ("Empty", "Dead"):
                raise UsageError(f"Assignments can only be reset if the group '{group_id}' is inactive, "
                                 f"but the current state is {d.state}.")
            committed = await self.groups.offsets(group_id)
            tps = await self.partitions_to_reset(d, committed)
            plan = await self.new_offsets(tps, committed)
            if self.o.execute:
                await self.groups.alter_offsets(group_id, plan)
            print()
            table([["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]] +
                  [[group_id, tp.topic, str(tp.partition), str(off)] for tp, off in sorted(
                      plan.items(), key=lambda kv: (kv[0].topic, kv[0].partition))])
        return 0

    async def partitions_to_reset(self, d: GroupDescription, committed) -> list[TopicPartition]:
        if self.o.all_topics:
            return sorted(set(committed) | {tp for m in d.members for tp in m.assignment})
        described = await self.admin.describe_topics([name for name, _ in parse_topics(self.o.topic)])
        out = []
        for name, parts in parse_topics(self.o.topic):
            known = [p.partition for p in described[name].partitions]
            for p in parts if parts is not None else known:
                if p not in known:
                    raise UsageError(f"Partition {p} of topic {name} does not exist")
                out.append(TopicPartition(name, p))
        return out

    async def new_offsets(self, tps, committed) -> dict[TopicPartition, int]:
        o = self.o
        earliest = {tp: r.offset for tp, r in (await self.admin.list_offsets({tp: "earliest" for tp in tps})).items()}
        latest = await self.log_end_offsets(tps)

        def clamp(tp, off: int) -> int:
            return max(earliest[tp], min(off, latest[tp]))

        if o.to_earliest:
            return dict(earliest)
        if o.to_latest:
            return dict(latest)
        if o.to_current:
            return {tp: committed[tp].offset if tp in committed else latest[tp] for tp in tps}
        if o.to_offset is not None:
            return {tp: clamp(tp, o.to_offset) for tp in tps}
        if o.shift_by is not None:
            return {tp: clamp(tp, (committed[tp].offset if tp in committed else latest[tp]) + o.shift_by) for tp in tps}
        ts = parse_datetime(o.to_datetime) if o.to_datetime else int(datetime.now(timezone.utc).timestamp() * 1000) \
            - parse_duration(o.by_duration)
        found = await self.admin.list_offsets({tp: ts for tp in tps})
        return {tp: found[tp].offset if found[tp].offset >= 0 else latest[tp] for tp in tps}

    async def delete(self) -> int:
        results = await self.groups.delete_groups(self.o.group)
        ok = [g for g, code in results.items() if code == 0]
        failed = {g: code for g, code in results.items() if code}
        if ok:
            print("Deletion of requested consumer groups (" + ", ".join(f"'{g}'" for g in ok) + ") was successful.")
        if failed:
            print("Deletion of some consumer groups failed:")
            for g, code in failed.items():
                print(f"* Group '{g}' could not be deleted due to: {error_message(errors.error_for(code))}")
        return 1 if failed else 0

    async def delete_offsets(self) -> int:
        group_id = self.o.group[0]
        tps = await self.partitions_to_reset(await self.groups.describe(group_id), await self.groups.offsets(group_id))
        error, results = await self.groups.delete_offsets(group_id, tps)
        if error:
            raise errors.error_for(error, f"Encounter some unknown error: {errors.error_name(error)}")
        print()
        table([["TOPIC", "PARTITION", "STATUS"]] + [
            [tp.topic, str(tp.partition), "Successful" if code == 0 else f"Error: {errors.error_name(code)}"]
            for tp, code in sorted(results.items(), key=lambda kv: (kv[0].topic, kv[0].partition))])
        return 1 if any(results.values()) else 0


def parse_datetime(text: str) -> int:
    s = text.strip()
    if s.endswith("Z"):
        s = s[:-1] + "+00:00"
    for fmt in ("%Y-%m-%dT%H:%M:%S.%f%z", "%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%dT%H:%M:%S.%f", "%Y-%m-%dT%H:%M:%S"):
        try:
            dt = datetime.strptime(s, fmt)
        except ValueError:
            continue
        if dt.tzinfo is None:
            dt = dt.astimezone()  # Kafka reads a datetime without zone in the local time zone
        return int(dt.timestamp() * 1000)
    raise UsageError(f"Error parsing timestamp {text}: expected YYYY-MM-DDTHH:mm:SS.sss[Z|+hh:mm]")


def parse_duration(text: str) -> int:
    m = re.fullmatch(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?", text.strip())
    if not m or text.strip() in ("P", "PT"):
        raise UsageError(f"Error parsing duration {text}: expected PnDTnHnMnS")
    d, h, mi, s = (float(x) if x else 0 for x in m.groups())
    return int(((d * 24 + h) * 60 + mi) * 60_000 + s * 1000)


async def run(opts: argparse.Namespace) -> int:
    config = admin_config(opts, "samsa-consumer-groups")
    config.setdefault("request.timeout.ms", str(opts.timeout))
    config.setdefault("default.api.timeout.ms", str(opts.timeout))
    admin = AsyncAdmin(config)
    try:
        tool = Tool(admin, opts)
        action = next(a for a in ("list", "describe", "delete", "delete_offsets", "reset_offsets") if getattr(opts, a))
        return await getattr(tool, action)() or 0
    finally:
        await admin.close()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    if not argv:
        print(DESCRIPTION, file=sys.stderr)
        parser.print_help(sys.stderr)
        return 1
    try:
        opts = parser.parse_args(argv)
        check_args(opts)
        return asyncio.run(run(opts))
    except UsageError as e:
        print(e, file=sys.stderr)
        return 1
    except (errors.KafkaError, ValueError) as e:
        print(f"Error: Executing consumer group command failed due to {error_message(e)}", file=sys.stderr)
        return 1
