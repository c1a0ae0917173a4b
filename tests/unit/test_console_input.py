"""The console's reading of form input: one clear sentence for each mistake."""

from __future__ import annotations

import pytest

from samsa.console.browse import Query, decode, parse_time
from samsa.console.reset import parse_duration
from samsa.console.service import ConsoleError


def test_durations_as_the_cli_takes_them():
    assert parse_duration("PT30M") == 30 * 60_000
    assert parse_duration("P1DT2H") == 26 * 3_600_000
    assert parse_duration("PT1.5S") == 1500
    assert parse_duration("pt30m") == 30 * 60_000  # Java's Duration.parse ignores case
    for bad in ("P1DT", "PT", "P", "P1W"):  # as Duration.parse refuses them
        with pytest.raises(ConsoleError, match="is not a duration"):
            parse_duration(bad)
    with pytest.raises(ConsoleError, match="'an hour' is not a duration: write it as PnDTnHnMnS"):
        parse_duration("an hour")


def test_times_iso_or_milliseconds():
    assert parse_time("1764064800000") == 1764064800000
    assert parse_time("2025-11-25T10:00:00") == 1764064800000
    assert parse_time("2025-11-25T11:00:00+01:00") == 1764064800000
    assert parse_time(" ") is None
    with pytest.raises(ConsoleError, match="'yesterday' is not a time"):
        parse_time("yesterday")


@pytest.mark.parametrize("params, message", [
    ({"partition": "3"}, "Partition 3 does not exist: the topic has partitions 0 to 1."),
    ({"offset": "-1"}, "The offset must be 0 or more."),
    ({"offset": "x"}, "The offset must be a whole number, not 'x'."),
    ({"limit": "0"}, "The number of messages must be between 1 and 500."),
    ({"decode": "avro"}, "Unknown decoding 'avro': choose text, json or hex."),
])
def test_browser_query_mistakes(params, message):
    with pytest.raises(ConsoleError) as e:
        Query.parse(params, partitions=2)
    assert str(e.value) == message


def test_decodings():
    assert decode(b'{"a":1}', "json") == '{\n  "a": 1\n}'
    assert decode(b"plain", "json") == "plain   (not JSON)"
    assert decode(b"\x00\xff", "hex") == "00 ff"
    assert decode(None, "text") is None
