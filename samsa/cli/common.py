"""What every tool shares: the runner of its ``main()``, one-line usage errors, Kafka-style
error text, --command-config."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable, Sequence

from samsa.configdef import parse_properties
from samsa.protocol import errors


class UsageError(Exception):
    """A bad command line: printed as one line to stderr, exit status 1."""


class Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line instead of argparse's usage + exit 2
        raise UsageError(message)


def arguments(argv: list[str] | None, parser: argparse.ArgumentParser, description: str) -> list[str] | None:
    """The tool's arguments (``sys.argv`` when None); with none at all, as Kafka's tools, print
    the tool's description and help instead and give None."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        print(description, file=sys.stderr)
        parser.print_help(sys.stderr)
        return None
    return argv


Failures = Sequence[tuple["type[BaseException] | tuple[type[BaseException], ...]", str]]


def run_tool(argv: list[str] | None, parser: argparse.ArgumentParser,
             run: Callable[[argparse.Namespace], "int | None"], *, description: str | None = None,
             failures: Failures = (), usage: str = "{}") -> int:
    """Every ``samsa`` tool's ``main()``: its arguments (``sys.argv`` when None; with a
    ``description`` and no argument at all, as Kafka's tools, the description and the help),
    a bad command line (argparse's complaint or a UsageError from ``run``) as one line on
    stderr formatted by ``usage``, the tool's own failures as one line each (``failures``: the
    exception types and the format of their :func:`error_message`, first match wins), exit
    status 1 for any of these; else ``run(opts)``'s exit status (None: 0)."""
    if description is not None:
        argv = arguments(argv, parser, description)
        if argv is None:
            return 1
    elif argv is None:
        argv = sys.argv[1:]
    try:
        opts = parser.parse_args(argv)
        code = run(opts)
    except UsageError as e:
        print(usage.format(e), file=sys.stderr)
        return 1
    except Exception as e:
        for types, text in failures:
            if isinstance(e, types):
                print(text.format(error_message(e)), file=sys.stderr)
                return 1
        raise
    return 0 if code is None else code


def error_message(e: BaseException) -> str:
    """An exception's message as Kafka's tools print it: the broker's words, no class name."""
    if isinstance(e, errors.KafkaError):
        return str(e.args[0]) if e.args and e.args[0] else e.name
    return str(e) or type(e).__name__


def read_properties(path: str, what: str = "") -> dict[str, str]:
    """A properties file (``--producer.config`` and the like), or a one-line UsageError."""
    try:
        return parse_properties(Path(path).read_text())
    except OSError as e:
        raise UsageError(f"Cannot read {what}{path}: {e.strerror}") from None


def admin_config(opts: argparse.Namespace, client_id: str) -> dict[str, str]:
    """The --command-config properties, with --bootstrap-server on top."""
    config: dict[str, str] = {}
    if opts.command_config:
        config.update(read_properties(opts.command_config, "command config file "))
    config["bootstrap.servers"] = opts.bootstrap_server
    config.setdefault("client.id", client_id)
    return config
