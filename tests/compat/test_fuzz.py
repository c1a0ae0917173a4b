"""A seeded fuzzing run in CI: ``bench/fuzz_bench.py``'s 10,000 mutated frames against a real
broker over TCP (every API key and version the broker handles; bit flips, truncation, lying
size prefixes, corrupted varints, random headers, inserted and removed bytes, edge values
such as -1 and 2^30 over lengths and counts), with an acks=all canary every 1,000 frames.

The broker must still run, every canary it acknowledged must read back, and its log must
hold no traceback: bad input gets an error code or that one connection closed, never an
internal error. The seed is fixed, so a failure here reproduces with
``.venv/bin/python bench/fuzz_bench.py --frames 10000 --seed 24``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import fuzz_bench  # noqa: E402


def test_seeded_fuzzing_run(tmp_path):
    result = fuzz_bench.run(tmp_path, frames=10000, seed=24, burst_size=200, threads=8, slow_clients=0)
    report = result.report()
    assert result.alive, f"the broker died\n{report}\n{result.log[-3000:]}"
    assert result.acked == 12 and result.lost == 0, report
    assert result.outcomes.get("timeout", 0) == 0, report
    assert result.burst_answered == 200, report
    if result.tracebacks:
        first = result.log.index("Traceback")
        raise AssertionError(f"{report}\nfirst traceback:\n{result.log[max(0, first - 300):first + 3000]}")
