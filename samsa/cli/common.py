"""What every tool shares: one-line usage errors, Kafka-style error text, --command-config."""

from __future__ import annotations

import argparse
from pathlib import Path

from samsa.configdef import parse_properties
from samsa.protocol import errors


class UsageError(Exception):
    """A bad command line: printed as one line to stderr, exit status 1."""


class Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line instead of argparse's usage + exit 2
        raise UsageError(message)


def error_message(e: BaseException) -> str:
    """An exception's message as Kafka's tools print it: the broker's words, no class name."""
    if isinstance(e, errors.KafkaError):
        return str(e.args[0]) if e.args and e.args[0] else e.name
    return str(e) or type(e).__name__


def admin_config(opts: argparse.Namespace, client_id: str) -> dict[str, str]:
    """The --command-config properties, with --bootstrap-server on top."""
    config: dict[str, str] = {}
    if opts.command_config:
        try:
            config.update(parse_properties(Path(opts.command_config).read_text()))
        except OSError as e:
            raise UsageError(f"Cannot read command config file {opts.command_config}: {e.strerror}") from None
    config["bootstrap.servers"] = opts.bootstrap_server
    config.setdefault("client.id", client_id)
    return config
