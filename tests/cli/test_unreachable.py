"""A wrong --bootstrap-server: a warning at the first failed connection and a clear end, as Kafka's tools."""

from __future__ import annotations

import subprocess
import sys

from broker_process import free_port

from cli_tools import UNREACHABLE as UNREACHABLE_WARNING


def started(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "samsa.cli.main", *args], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def first_stderr_line(proc: subprocess.Popen) -> str:
    """The first line a tool writes to stderr (readline blocks until it comes; the test timeout bounds it)."""
    try:
        return proc.stderr.readline()
    finally:
        proc.kill()
        proc.wait()


def test_each_tool_warns_at_the_first_failed_connection():
    port = free_port()  # nothing listens there
    for args in (["topics", "--bootstrap-server", f"localhost:{port}", "--list"],
                 ["console-consumer", "--bootstrap-server", f"localhost:{port}", "--topic", "t"],
                 ["console-producer", "--bootstrap-server", f"localhost:{port}", "--topic", "t"]):
        proc = started(*args)
        if args[0] == "console-producer":
            proc.stdin.write("hello\n")
            proc.stdin.flush()
        line = first_stderr_line(proc)
        assert f"Connection to node -1 (localhost/127.0.0.1:{port}) {UNREACHABLE_WARNING}" in line, (args, line)


def test_an_unresolvable_host_fails_at_once():
    for args in (["topics", "--list"], ["console-consumer", "--topic", "t"]):
        r = subprocess.run([sys.executable, "-m", "samsa.cli.main", *args,
                            "--bootstrap-server", "nosuchhost.invalid:9092"], capture_output=True, text=True, timeout=30)
        assert r.returncode != 0, r
        assert "No resolvable bootstrap urls given in bootstrap.servers (nosuchhost.invalid:9092)" in r.stderr
        assert "Unknown error" not in r.stderr
