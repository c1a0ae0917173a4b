"""Every tool run with no arguments prints what it does and its usage, and exits 1, as Kafka's do."""

from __future__ import annotations

import importlib

import pytest

TOOLS = ["configs", "console", "console_consumer", "console_producer", "consumer_groups", "consumer_perf_test", "dump_log",
         "pipeline", "producer_perf_test", "topics"]


@pytest.mark.parametrize("tool", TOOLS)
def test_no_arguments_print_the_description_and_usage(tool, capsys):
    module = importlib.import_module(f"samsa.cli.{tool}")
    assert module.main([]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(module.DESCRIPTION.strip().splitlines()[0])
    assert "usage: " in err
