"""The one offset-reset planner, used by ``samsa consumer-groups --reset-offsets`` and by
``samsa console``: from the reset the user chose and the offsets the cluster holds, the new
offset of each partition, with the ones clamped to the log's bounds noted.

Durations (``--by-duration``) are read as Kafka's tool reads them, with Java's
``Duration.parse``: ``PnDTnHnMn.nS``, any case, an optional sign, at least one part, and a
``T`` only when an hour, minute or second part follows it (``PT30M``, ``pt30m``, ``P1DT2H``;
not ``P1DT``, ``PT`` or ``P1W``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping

from samsa.client.types import TopicPartition

# Kafka's reset specifications, in the console's words.
CHOICES = {
    "to-earliest": "the earliest offset",
    "to-latest": "the latest offset",
    "to-current": "the current committed offset",
    "to-offset": "a given offset",
    "shift-by": "the committed offset shifted by N (negative: back)",
    "to-datetime": "the first offset at or after a date-time",
    "by-duration": "the first offset at or after now less a duration (PnDTnHnMnS)",
    "from-file": "the offsets of a CSV file",
}
BY_TIME = ("to-datetime", "by-duration")

_DURATION = re.compile(r"([-+]?)P(?:([-+]?\d+)D)?(T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?"
                       r"(?:([-+]?)(\d+)(?:[.,](\d{0,9}))?S)?)?", re.IGNORECASE)


class ResetError(ValueError):
    """The reset cannot be planned; the message says why."""


def parse_duration(text: str) -> int:
    """A duration as Java's ``Duration.parse`` reads it, in milliseconds (ResetError if it is not one)."""
    m = _DURATION.fullmatch(text.strip())
    if m:
        sign, days, t, hours, minutes, s_sign, seconds, fraction = m.groups()
        if (days or t) and (t is None or hours or minutes or seconds):
            ms = ((int(days or 0) * 24 + int(hours or 0)) * 60 + int(minutes or 0)) * 60_000
            if seconds:
                second_ms = int(seconds) * 1000 + int((fraction or "0").ljust(3, "0")[:3])
                ms += -second_ms if s_sign == "-" else second_ms
            return -ms if sign == "-" else ms
    raise ResetError(f"Error parsing duration '{text}': expected the format PnDTnHnMnS, e.g. PT30M or P1DT2H")


@dataclass(frozen=True)
class Clamped:
    """A new offset outside the log, moved to its bound."""

    tp: TopicPartition
    asked: int
    bound: int

    @property
    def higher(self) -> bool:
        return self.asked > self.bound


def new_offsets(choice: str, tps: list[TopicPartition], committed: Mapping[TopicPartition, int],
                earliest: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int], *,
                offset: int | None = None, shift: int | None = None,
                from_file: Mapping[TopicPartition, int] | None = None,
                by_time: Mapping[TopicPartition, int] | None = None
                ) -> tuple[dict[TopicPartition, int], list[Clamped]]:
    """Each partition's new offset for ``choice`` (one of :data:`CHOICES`) and the offsets clamped.
    ``committed`` is the group's committed offset of each partition that has one; ``by_time``
    the first offset at or after the time of a ``to-datetime``/``by-duration`` reset (-1: none,
    and the partition goes to the log end, as in Kafka)."""
    if choice not in CHOICES:
        raise ResetError(f"Unknown reset '{choice}': choose one of {', '.join(CHOICES)}.")
    clamped: list[Clamped] = []

    def clamp(tp: TopicPartition, asked: int) -> int:
        bound = latest[tp] if asked > latest[tp] else earliest[tp] if asked < earliest[tp] else asked
        if bound != asked:
            clamped.append(Clamped(tp, asked, bound))
        return bound

    if choice == "to-earliest":
        new = {tp: earliest[tp] for tp in tps}
    elif choice == "to-latest":
        new = {tp: latest[tp] for tp in tps}
    elif choice == "to-current":  # a partition without a committed offset goes to the log end
        new = {tp: committed[tp] if tp in committed else latest[tp] for tp in tps}
    elif choice == "to-offset":
        assert offset is not None
        new = {tp: clamp(tp, offset) for tp in tps}
    elif choice == "from-file":
        assert from_file is not None
        new = {tp: clamp(tp, from_file[tp]) for tp in tps}
    elif choice == "shift-by":
        assert shift is not None
        missing = [tp for tp in tps if tp not in committed]
        if missing:
            raise ResetError(f"Cannot shift offset for partition {missing[0]} since there is no current "
                             "committed offset")
        new = {tp: clamp(tp, committed[tp] + shift) for tp in tps}
    else:
        assert by_time is not None
        new = {tp: by_time[tp] if by_time.get(tp, -1) >= 0 else latest[tp] for tp in tps}
    return new, clamped
