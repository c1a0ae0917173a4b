"""``samsa mirror-maker``: MirrorMaker 2 from connect-mirror-maker.sh's properties file.

    samsa mirror-maker mm2.properties [--clusters B [C ...]]
"""

from __future__ import annotations

import argparse
import signal
import sys

from samsa.cli.common import Parser, read_properties, run_tool


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="samsa mirror-maker", description="MirrorMaker 2.0 driver")
    parser.add_argument("config", metavar="mm2.properties", help="MM2 configuration file.")
    parser.add_argument("--clusters", nargs="+", metavar="CLUSTER", help="Target cluster to use for this node.")
    return run_tool(argv, parser, _tool, failures=[(ValueError, "{}")])


def _tool(args: argparse.Namespace) -> int:
    from samsa.connect.mirror.maker import MirrorMaker, MirrorMakerConfig
    from samsa.connect.runner import setup_logging
    config = MirrorMakerConfig(read_properties(args.config, "MirrorMaker config "))
    setup_logging()
    maker = MirrorMaker(config, args.clusters)
    if not maker.flows:
        print("No replication flow enabled (set A->B.enabled = true)", file=sys.stderr)
        return 1
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: maker.stopped.set())
    try:
        maker.start()
        maker.stopped.wait()
    finally:
        maker.stop()
    return 0
