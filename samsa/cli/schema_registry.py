"""``samsa schema-registry``: the Schema Registry (schema-registry-start).

    samsa schema-registry schema-registry.properties [--override key=value ...]
"""

from __future__ import annotations

import sys

from samsa.cli.common import UsageError, read_properties

USAGE = "USAGE: samsa schema-registry [-daemon] schema-registry.properties [--override key=value ...]"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] == "-daemon":
        argv = argv[1:]
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, file=sys.stderr)
        return 1
    from samsa.schema_registry.config import RegistryConfigError, registry_config
    try:
        props = read_properties(argv[0], "schema registry config ")
        rest = argv[1:]
        while rest:
            if rest[0] != "--override" or len(rest) < 2 or "=" not in rest[1]:
                raise UsageError(f"Unexpected argument {rest[0]!r}. {USAGE}")
            k, _, v = rest[1].partition("=")
            props[k.strip()] = v.strip()
            rest = rest[2:]
        config = registry_config(props)
    except (UsageError, RegistryConfigError) as e:
        print(e, file=sys.stderr)
        return 1
    from samsa.schema_registry.runner import serve, setup_logging
    setup_logging()
    try:
        return serve(config)
    except OSError as e:
        print(f"Schema registry failed to start: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # noqa: BLE001 - one line, as every tool
        print(f"Schema registry failed to start: {e}", file=sys.stderr)
        return 1
