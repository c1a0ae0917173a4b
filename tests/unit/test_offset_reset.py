"""The one offset-reset planner (CLI and console): durations as Java's Duration.parse reads
them (the values below are what java.time.Duration.parse(...).toMillis() gives, checked with
OpenJDK), and the plan of each reset."""

from __future__ import annotations

import pytest

from samsa.client.offset_reset import ResetError, new_offsets, parse_duration
from samsa.client.types import TopicPartition

JAVA = {"pt30m": 1_800_000, "PT30M": 1_800_000, "P1DT2H": 93_600_000, "P1D": 86_400_000, "p1d": 86_400_000,
        "-PT1H": -3_600_000, "PT-1H": -3_600_000, "P1DT2H3M4.5S": 93_784_500, "PT0,5S": 500, "+PT1S": 1000}
JAVA_REFUSES = ("P1DT", "PT", "P", "P1W", "PT1.1234567891S", "1h", "")


@pytest.mark.parametrize("text, ms", JAVA.items())
def test_durations_as_java_reads_them(text, ms):
    assert parse_duration(text) == ms


@pytest.mark.parametrize("text", JAVA_REFUSES)
def test_durations_java_refuses(text):
    with pytest.raises(ResetError, match="Error parsing duration"):
        parse_duration(text)


A, B = TopicPartition("t", 0), TopicPartition("t", 1)
EARLIEST, LATEST = {A: 2, B: 0}, {A: 10, B: 5}


def test_plans():
    committed = {A: 4}
    assert new_offsets("to-earliest", [A, B], committed, EARLIEST, LATEST) == ({A: 2, B: 0}, [])
    assert new_offsets("to-current", [A, B], committed, EARLIEST, LATEST) == ({A: 4, B: 5}, [])
    new, clamped = new_offsets("to-offset", [A, B], committed, EARLIEST, LATEST, offset=7)
    assert new == {A: 7, B: 5} and [(c.tp, c.asked, c.bound, c.higher) for c in clamped] == [(B, 7, 5, True)]
    new, clamped = new_offsets("shift-by", [A], committed, EARLIEST, LATEST, shift=-3)
    assert new == {A: 2} and not clamped[0].higher
    with pytest.raises(ResetError, match="Cannot shift offset for partition t-1"):
        new_offsets("shift-by", [A, B], committed, EARLIEST, LATEST, shift=1)
    assert new_offsets("by-duration", [A, B], committed, EARLIEST, LATEST, by_time={A: 3, B: -1})[0] == {A: 3, B: 5}
