"""What every tool shares: one-line usage errors, Kafka-style error text, --command-config."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

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
