"""``samsa connect-distributed``: a worker of a Connect cluster (connect-distributed.sh).

    samsa connect-distributed connect-distributed.properties
"""

from __future__ import annotations

import sys

from samsa.cli.common import UsageError, read_properties

USAGE = "USAGE: samsa connect-distributed [-daemon] connect-distributed.properties"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] == "-daemon":
        argv = argv[1:]
    if len(argv) != 1 or argv[0] in ("-h", "--help"):
        print(USAGE, file=sys.stderr)
        return 1
    from samsa.connect.config import worker_config
    from samsa.connect.runner import serve, setup_logging, worker_id
    try:
        config = worker_config(read_properties(argv[0], "worker config "))
    except UsageError as e:
        print(e, file=sys.stderr)
        return 1
    setup_logging()
    from samsa.connect.distributed import DistributedHerder
    try:
        herder = DistributedHerder(config, worker_id(config["listeners"], config.get("rest.advertised.host.name"),
                                                     config.get("rest.advertised.port")))
    except ValueError as e:
        print(e, file=sys.stderr)
        return 1
    return serve(herder, config["listeners"])
