"""Running ``samsa`` tools as subprocesses, as a user would."""

from __future__ import annotations

import subprocess
import sys


def samsa(*args: str, timeout: float = 60, input: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "samsa.cli.main", *args], capture_output=True, text=True,
                          timeout=timeout, input=input)


def one_error_line(r: subprocess.CompletedProcess) -> str:
    """A failed run: non-zero exit, exactly one line on stderr (returned)."""
    assert r.returncode != 0, r
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    return lines[0]


UNREACHABLE = "could not be established. Node may not be available."


def error_after_unreachable_warning(r: subprocess.CompletedProcess) -> str:
    """A failed run against a server nobody listens on: Kafka's warning at the first failed
    connection, then exactly one error line (returned)."""
    assert r.returncode != 0, r
    *warnings, line = r.stderr.strip().splitlines()
    assert len(warnings) == 1 and UNREACHABLE in warnings[0], r.stderr
    return line
