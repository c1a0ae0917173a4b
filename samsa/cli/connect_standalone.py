"""``samsa connect-standalone``: a standalone Connect worker (connect-standalone.sh).

    samsa connect-standalone connect-standalone.properties [connector1.properties connector2.json ...]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from samsa.cli.common import Parser, UsageError, read_properties, run_tool

USAGE = "USAGE: samsa connect-standalone [-daemon] connect-standalone.properties [connector1.properties " \
        "connector2.json ...]"


def connector_file(path: str) -> dict[str, str]:
    """A connector's .properties file, or a JSON file as POST /connectors takes it (or its config alone)."""
    if path.endswith(".json"):
        try:
            doc = json.loads(Path(path).read_text())
        except (OSError, ValueError) as e:
            raise UsageError(f"Cannot read connector config {path}: {e}") from None
        config = doc.get("config", doc) if isinstance(doc, dict) else None
        if not isinstance(config, dict):
            raise UsageError(f"Connector config {path} is not a JSON object")
        if "name" in doc and "config" in doc:
            config = {**config, "name": doc["name"]}
        return {k: str(v) for k, v in config.items()}
    return read_properties(path, "connector config ")


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="samsa connect-standalone")
    parser.add_argument("-daemon", action="store_true", help="accepted as connect-standalone.sh takes it")
    parser.add_argument("config", metavar="connect-standalone.properties")
    parser.add_argument("connectors", nargs="*", metavar="connector.properties|connector.json")
    return run_tool(argv, parser, _tool, description=USAGE, failures=[(ValueError, "{}")])


def _tool(opts: argparse.Namespace) -> int:
    from samsa.connect.config import worker_config
    from samsa.connect.runner import serve, setup_logging, worker_id
    config = worker_config(read_properties(opts.config, "worker config "))
    connectors = [connector_file(p) for p in opts.connectors]
    setup_logging()
    from samsa.connect.standalone import StandaloneHerder
    herder = StandaloneHerder(config, worker_id(config["listeners"], config.get("rest.advertised.host.name"),
                                                config.get("rest.advertised.port")))

    def add_connectors() -> None:
        for c in connectors:
            name = c.get("name", "")
            herder.put_connector_config(name, c, allow_replace=True)
            print(f"Created connector {name}", file=sys.stderr, flush=True)
    return serve(herder, config["listeners"], add_connectors)
