"""``samsa schema-registry``: the Schema Registry (schema-registry-start).

    samsa schema-registry schema-registry.properties [--override key=value ...]
"""

from __future__ import annotations

import argparse

from samsa.cli.common import Parser, UsageError, read_properties, run_tool
from samsa.protocol import errors

USAGE = "USAGE: samsa schema-registry [-daemon] schema-registry.properties [--override key=value ...]"


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="samsa schema-registry")
    parser.add_argument("-daemon", action="store_true", help="accepted as schema-registry-start takes it")
    parser.add_argument("config", metavar="schema-registry.properties")
    parser.add_argument("--override", action="append", default=[], metavar="key=value",
                        help="a property that takes precedence over the file's")
    return run_tool(argv, parser, _tool, description=USAGE,
                    failures=[((ValueError, OSError, errors.KafkaError, TimeoutError),
                               "Schema registry failed to start: {}")])


def _tool(opts: argparse.Namespace) -> int:
    from samsa.schema_registry.config import registry_config
    props = read_properties(opts.config, "schema registry config ")
    for item in opts.override:
        key, sep, value = item.partition("=")
        if not sep:
            raise UsageError(f"Invalid --override {item!r}: key=value expected")
        props[key.strip()] = value.strip()
    config = registry_config(props)   # RegistryConfigError (a ValueError): one line
    from samsa.schema_registry.runner import serve, setup_logging
    setup_logging()
    return serve(config)
