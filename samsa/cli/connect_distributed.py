"""``samsa connect-distributed``: a worker of a Connect cluster (connect-distributed.sh).

    samsa connect-distributed connect-distributed.properties
"""

from __future__ import annotations

import argparse

from samsa.cli.common import Parser, read_properties, run_tool

USAGE = "USAGE: samsa connect-distributed [-daemon] connect-distributed.properties"


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="samsa connect-distributed")
    parser.add_argument("-daemon", action="store_true", help="accepted as connect-distributed.sh takes it")
    parser.add_argument("config", metavar="connect-distributed.properties")
    return run_tool(argv, parser, _tool, description=USAGE, failures=[(ValueError, "{}")])


def _tool(opts: argparse.Namespace) -> int:
    from samsa.connect.config import worker_config
    from samsa.connect.runner import serve, setup_logging, worker_id
    config = worker_config(read_properties(opts.config, "worker config "))
    setup_logging()
    from samsa.connect.distributed import DistributedHerder
    herder = DistributedHerder(config, worker_id(config["listeners"], config.get("rest.advertised.host.name"),
                                                 config.get("rest.advertised.port")))
    return serve(herder, config["listeners"])
