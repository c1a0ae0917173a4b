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


@pytest.mark.parametrize("tool, argv", [
    ("acls", ["--bogus"]), ("configs", ["--bogus"]), ("consumer_groups", ["--bogus"]), ("topics", ["--bogus"]),
    ("console_consumer", ["--bogus"]), ("console_producer", ["--bogus"]), ("consumer_perf_test", ["--bogus"]),
    ("producer_perf_test", ["--bogus"]), ("dump_log", ["--bogus"]), ("transactions", ["--bogus"]),
    ("leader_election", ["--bogus"]), ("reassign_partitions", ["--bogus"]), ("mirror_maker", []),
    ("mirror_maker", ["/nonexistent/mm2.properties"]), ("server", ["start"]), ("server", ["stop", "--node-id", "x"]),
    ("connect_distributed", ["/nonexistent/worker.properties"]), ("connect_distributed", ["a", "b"]),
    ("connect_standalone", ["/nonexistent/worker.properties"]),
])
def test_a_bad_command_line_is_one_line_and_exit_1(tool, argv, capsys):
    """The one tool runner: argparse's complaint as one line, exit status 1 (not argparse's 2)."""
    module = importlib.import_module(f"samsa.cli.{tool}")
    assert module.main(argv) == 1
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1, err
