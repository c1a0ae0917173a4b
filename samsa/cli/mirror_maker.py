"""``samsa mirror-maker``: MirrorMaker 2 from connect-mirror-maker.sh's properties file.

    samsa mirror-maker mm2.properties [--clusters B [C ...]]
"""

from __future__ import annotations

import argparse
import signal
import sys

from samsa.cli.common import UsageError, read_properties


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="samsa mirror-maker", description="MirrorMaker 2.0 driver")
    parser.add_argument("config", metavar="mm2.properties", help="MM2 configuration file.")
    parser.add_argument("--clusters", nargs="+", metavar="CLUSTER", help="Target cluster to use for this node.")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    from samsa.connect.mirror.maker import MirrorMaker, MirrorMakerConfig
    from samsa.connect.runner import setup_logging
    try:
        config = MirrorMakerConfig(read_properties(args.config, "MirrorMaker config "))
    except (UsageError, ValueError) as e:
        print(e, file=sys.stderr)
        return 1
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
