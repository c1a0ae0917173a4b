"""Python function calls per Produce + Fetch pair of ``handler_bench``'s loop, counted with
cProfile: a measure of the request path's work that a loaded machine cannot disturb.

    .venv/bin/python bench/handler_calls.py --trees .,/tmp/baseline
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def count() -> float:
    sys.path.insert(0, str(ROOT / "bench"))
    import handler_bench
    calls = {}
    for n in (1000, 3000):
        profile = cProfile.Profile()
        profile.enable()
        handler_bench.measure(n, 100)
        profile.disable()
        calls[n] = pstats.Stats(profile).total_calls
    return (calls[3000] - calls[1000]) / 2000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", default=".", help="comma list of Samsa source trees")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(count())
        return 0
    for tree in args.trees.split(","):
        path = str(Path(tree).resolve())
        out = subprocess.run([sys.executable, __file__, "--child"], capture_output=True, text=True, check=True,
                             env={**os.environ, "PYTHONPATH": path}, cwd=path)
        print(f"{Path(path).name:24} {float(out.stdout.split()[-1]):8.1f} calls per Produce + Fetch")
    return 0


if __name__ == "__main__":
    sys.exit(main())
