"""Offset resets from the console, planned by the one planner ``samsa consumer-groups
--reset-offsets`` uses (:mod:`samsa.client.offset_reset`): to the earliest, latest or current
offset, to an offset, shifted by N, to a date-time, or by a duration back from now; refused
while the group has members, as the CLI refuses it. A share group's start offsets are reset
the same way (AlterShareGroupOffsets, as ``samsa share-groups --reset-offsets``; "current" is
its start offset)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from samsa.client import offset_reset
from samsa.client.offset_reset import ResetError
from samsa.client.types import TopicPartition
from samsa.console.browse import parse_time
from samsa.console.service import INACTIVE, ClusterService, ConsoleError

CHOICES = {k: v for k, v in offset_reset.CHOICES.items() if k != "from-file"}


@dataclass
class Plan:
    group_id: str
    offsets: dict[TopicPartition, int]
    notes: list[str]
    share: bool = False  # a share group's start offsets


def parse_duration(text: str) -> int:
    """A duration as the CLI's --by-duration takes it (Java's Duration.parse), in milliseconds."""
    try:
        return offset_reset.parse_duration(text)
    except ResetError:
        raise ConsoleError(f"'{text}' is not a duration: write it as PnDTnHnMnS, e.g. PT30M or P1DT2H.") from None


def _number(text: str, what: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise ConsoleError(f"{what} must be a whole number, not '{text}'.") from None


async def plan(service: ClusterService, group_id: str, choice: str, value: str, topic: str) -> Plan:
    """The new offset of each partition the reset covers (the group's committed partitions, or
    every partition of ``topic``)."""
    if choice not in CHOICES:
        raise ConsoleError(f"Unknown reset '{choice}': choose one of {', '.join(CHOICES)}.")
    admin = service.admin
    share = await service.share_group(group_id)
    if share is not None:
        described = share.description
        committed = {TopicPartition(r.topic, r.partition): r.start for r in share.offsets if r.start is not None}
    else:
        view = await service.group(group_id) if topic == "" else None
        described = view.description if view else (await admin.describe_consumer_groups([group_id]))[group_id]
        committed = {tp: o.offset for tp, o in (await admin.list_consumer_group_offsets(group_id)).items()}
    if described.state not in INACTIVE:
        raise ConsoleError(f"Offsets can only be reset while the group '{group_id}' is inactive, but it is "
                           f"{described.state} with {len(described.members)} member(s): stop its consumers first.", 409)
    if topic:
        tps = [TopicPartition(topic, p.partition) for p in await service.partitions(topic)]
    else:
        tps = sorted(committed)
    if not tps:
        raise ConsoleError(f"The group '{group_id}' has no committed offsets: name a topic to reset.")
    offset = _number(value, "The offset") if choice == "to-offset" else None
    shift = _number(value, "The shift") if choice == "shift-by" else None
    by_time = None
    if choice == "to-datetime":
        when = parse_time(value)
        if when is None:
            raise ConsoleError("Give the date-time to reset to.")
    elif choice == "by-duration":
        when = int(time.time() * 1000) - parse_duration(value)
    earliest = {tp: r.offset for tp, r in (await admin.list_offsets({tp: "earliest" for tp in tps})).items()}
    latest = {tp: r.offset for tp, r in (await admin.list_offsets({tp: "latest" for tp in tps})).items()}
    if choice in offset_reset.BY_TIME:
        by_time = {tp: r.offset for tp, r in (await admin.list_offsets({tp: max(when, 0) for tp in tps})).items()}
    try:
        new, clamped = offset_reset.new_offsets(choice, tps, committed, earliest, latest, offset=offset, shift=shift,
                                                by_time=by_time)
    except ResetError as e:
        raise ConsoleError(f"{e}.") from None
    notes = [f"New offset ({c.asked}) is {'higher' if c.higher else 'lower'} than "
             f"{'latest' if c.higher else 'earliest'} offset for {c.tp}: set to {c.bound}." for c in clamped]
    return Plan(group_id, {tp: new[tp] for tp in tps}, notes, share is not None)


async def execute(service: ClusterService, p: Plan) -> None:
    if not p.share:
        await service.admin.alter_consumer_group_offsets(p.group_id, p.offsets)
        return
    failed = {tp: e for tp, e in (await service.admin.alter_share_group_offsets(p.group_id, p.offsets)).items() if e}
    if failed:
        raise ConsoleError("The start offsets were not all reset: " + "; ".join(
            f"{tp.topic}-{tp.partition}: {e.args[0] if e.args else e.name}" for tp, e in sorted(failed.items())))
