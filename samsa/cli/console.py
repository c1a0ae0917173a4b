"""``samsa console``: the web console (topics, messages, consumer groups, live figures).

    samsa console --bootstrap-server localhost:9092 [--port 8080] [--command-config client.properties]
                  [--metrics-url http://localhost:9404/metrics ...] [--schema-registry-url http://localhost:8081]
                  [--read-only]

It is a client of the cluster like any other (Samsa's Admin and Consumer over the wire), so
it works against Apache Kafka and other Kafka-compatible brokers too.
"""

from __future__ import annotations

import argparse

from samsa.cli.common import Parser, UsageError, read_properties, run_tool

DESCRIPTION = "A web console for a Kafka cluster: brokers, topics, messages, consumer groups and their lag."


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="samsa console", description=DESCRIPTION)
    p.add_argument("--bootstrap-server", required=True, help="REQUIRED: The server(s) to connect to.")
    p.add_argument("--host", default="127.0.0.1", help="The address to serve the console on (default 127.0.0.1).")
    p.add_argument("--port", type=int, default=8080, help="The port to serve the console on (default 8080).")
    p.add_argument("--command-config", help="Property file with configs for the console's Admin and Consumer.")
    p.add_argument("--metrics-url", action="append", default=[],
                   help="A broker's Prometheus /metrics URL, for live figures (repeat for each broker).")
    p.add_argument("--schema-registry-url", help="A Schema Registry's URL: its subjects, versions and schemas "
                   "on the Schemas page.")
    p.add_argument("--read-only", action="store_true", help="Show only: no creating, deleting or resetting.")
    return p


def main(argv: list[str] | None = None) -> int:
    return run_tool(argv, build_parser(), _tool, description=DESCRIPTION)


def _tool(opts: argparse.Namespace) -> int:
    if not 0 <= opts.port <= 65535:
        raise UsageError(f"--port must be between 0 and 65535, not {opts.port}")
    client_config = read_properties(opts.command_config, "command config file ") if opts.command_config else {}
    urls = [u for value in opts.metrics_url for u in value.split(",") if u]
    for url in urls:
        if not url.startswith(("http://", "https://")):
            raise UsageError(f"--metrics-url must be an http:// URL, not {url}")
    if opts.schema_registry_url and not opts.schema_registry_url.startswith(("http://", "https://")):
        raise UsageError(f"--schema-registry-url must be an http:// URL, not {opts.schema_registry_url}")
    import uvicorn

    from samsa.console.app import Settings, create_app
    app = create_app(Settings(opts.bootstrap_server, client_config, urls, opts.read_only, opts.schema_registry_url))
    print(f"Samsa console for {opts.bootstrap_server} on http://{opts.host}:{opts.port}/"
          f"{' (read-only)' if opts.read_only else ''}", flush=True)
    uvicorn.run(app, host=opts.host, port=opts.port, log_level="warning")
    return 0


