"""``samsa connect-standalone``: a standalone Connect worker (connect-standalone.sh).

    samsa connect-standalone connect-standalone.properties [connector1.properties connector2.json ...]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from samsa.cli.common import UsageError, read_properties

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
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] == "-daemon":
        argv = argv[1:]
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, file=sys.stderr)
        return 1
    from samsa.connect.config import worker_config
    from samsa.connect.runner import serve, setup_logging, worker_id
    try:
        config = worker_config(read_properties(argv[0], "worker config "))
        connectors = [connector_file(p) for p in argv[1:]]
    except UsageError as e:
        print(e, file=sys.stderr)
        return 1
    setup_logging()
    from samsa.connect.standalone import StandaloneHerder
    try:
        herder = StandaloneHerder(config, worker_id(config["listeners"], config.get("rest.advertised.host.name"),
                                                    config.get("rest.advertised.port")))
    except ValueError as e:
        print(e, file=sys.stderr)
        return 1

    def add_connectors() -> None:
        for c in connectors:
            name = c.get("name", "")
            herder.put_connector_config(name, c, allow_replace=True)
            print(f"Created connector {name}", file=sys.stderr, flush=True)
    return serve(herder, config["listeners"], add_connectors)
