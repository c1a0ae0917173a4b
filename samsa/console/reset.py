"""Offset resets from the console, with the choices of ``samsa consumer-groups --reset-offsets``:
to the earliest, latest or current offset, to an offset, shifted by N, to a date-time, or by
a duration back from now; refused while the group has members, as the CLI refuses it."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from samsa.client.types import TopicPartition
from samsa.console.browse import parse_time
from samsa.console.service import INACTIVE, ClusterService, ConsoleError

CHOICES = {
    "to-earliest": "the earliest offset",
    "to-latest": "the latest offset",
    "to-current": "the current committed offset",
    "to-offset": "a given offset",
    "shift-by": "the committed offset shifted by N (negative: back)",
    "to-datetime": "the first offset at or after a date-time",
    "by-duration": "the first offset at or after now less a duration (PnDTnHnMnS)",
}

_DURATION = re.compile(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?")


@dataclass
class Plan:
    group_id: str
    offsets: dict[TopicPartition, int]
    notes: list[str]


def parse_duration(text: str) -> int:
    """An ISO 8601 duration (as the CLI's --by-duration takes it) in milliseconds."""
    m = _DURATION.fullmatch(text.strip())
    if not m or not any(m.groups()):
        raise ConsoleError(f"'{text}' is not a duration: write it as PnDTnHnMnS, e.g. PT30M or P1DT2H.")
    days, hours, minutes, seconds = (float(g) if g else 0.0 for g in m.groups())
    return int((((days * 24 + hours) * 60 + minutes) * 60 + seconds) * 1000)


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
    view = await service.group(group_id) if topic == "" else None
    described = view.description if view else (await service.admin.describe_consumer_groups([group_id]))[group_id]
    if described.state not in INACTIVE:
        raise ConsoleError(f"Offsets can only be reset while the group '{group_id}' is inactive, but it is "
                           f"{described.state} with {len(described.members)} member(s): stop its consumers first.", 409)
    admin = service.admin
    committed = await admin.list_consumer_group_offsets(group_id)
    if topic:
        tps = [TopicPartition(topic, p.partition) for p in await service.partitions(topic)]
    else:
        tps = sorted(committed)
    if not tps:
        raise ConsoleError(f"The group '{group_id}' has no committed offsets: name a topic to reset.")
    earliest = {tp: r.offset for tp, r in (await admin.list_offsets({tp: "earliest" for tp in tps})).items()}
    latest = {tp: r.offset for tp, r in (await admin.list_offsets({tp: "latest" for tp in tps})).items()}
    notes: list[str] = []

    def clamp(tp: TopicPartition, offset: int) -> int:
        if offset > latest[tp]:
            notes.append(f"New offset ({offset}) is higher than latest offset for {tp}: set to {latest[tp]}.")
            return latest[tp]
        if offset < earliest[tp]:
            notes.append(f"New offset ({offset}) is lower than earliest offset for {tp}: set to {earliest[tp]}.")
            return earliest[tp]
        return offset

    if choice == "to-earliest":
        new = dict(earliest)
    elif choice == "to-latest":
        new = dict(latest)
    elif choice == "to-current":
        new = {tp: committed[tp].offset if tp in committed else latest[tp] for tp in tps}
    elif choice == "to-offset":
        target = _number(value, "The offset")
        new = {tp: clamp(tp, target) for tp in tps}
    elif choice == "shift-by":
        shift = _number(value, "The shift")
        missing = [str(tp) for tp in tps if tp not in committed]
        if missing:
            raise ConsoleError(f"Cannot shift the offsets of {', '.join(missing)}: the group has no committed offset "
                               "there.")
        new = {tp: clamp(tp, committed[tp].offset + shift) for tp in tps}
    else:
        if choice == "to-datetime":
            when = parse_time(value)
            if when is None:
                raise ConsoleError("Give the date-time to reset to.")
        else:
            when = int(time.time() * 1000) - parse_duration(value)
        found = await admin.list_offsets({tp: max(when, 0) for tp in tps})
        new = {tp: found[tp].offset if tp in found and found[tp].offset >= 0 else latest[tp] for tp in tps}
    return Plan(group_id, {tp: new[tp] for tp in tps}, notes)


async def execute(service: ClusterService, p: Plan) -> None:
    await service.admin.alter_consumer_group_offsets(p.group_id, p.offsets)
