"""``samsa server start [-daemon] server.properties [--override k=v ...]`` and ``samsa server stop``."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time

from samsa.server.config import ConfigError

USAGE = """usage: samsa server start [-daemon] server.properties [--override property=value]*
       samsa server stop

  start      run a broker with the given Kafka-format server.properties
  -daemon    run in the background, logging to $LOG_DIR/server.log (default ./logs)
  --override property=value   overrides a value of server.properties
  stop       stop every broker started on this machine (SIGTERM, clean shutdown)"""


def _overrides(values: list[str]) -> dict[str, str]:
    out = {}
    for item in values:
        if "=" not in item:
            raise ConfigError(f"--override expects property=value, got {item!r}")
        k, v = item.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def start(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="samsa server start", add_help=True)
    parser.add_argument("-daemon", "--daemon", action="store_true", dest="daemon")
    parser.add_argument("properties")
    parser.add_argument("--override", action="append", default=[])
    args = parser.parse_args(argv)
    from samsa.server.config import BrokerConfig
    from samsa.server.runner import run
    try:
        config = BrokerConfig.from_file(args.properties, _overrides(args.override))
    except ConfigError as e:
        print(f"samsa server: {e}", file=sys.stderr)
        return 1
    return run(config, daemon=args.daemon)


def broker_pids() -> list[int]:
    """Processes on this machine running ``samsa server start`` (other than this one)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue
        if b"server" in args and b"start" in args and any(a.endswith(b"samsa") or b"samsa.cli" in a for a in args):
            pids.append(int(entry))
    return pids


def stop(argv: list[str]) -> int:
    pids = broker_pids()
    if not pids:
        print("No samsa server to stop", file=sys.stderr)
        return 1
    for pid in pids:
        os.kill(pid, signal.SIGTERM)
    deadline = time.time() + 30
    while time.time() < deadline and any(os.path.exists(f"/proc/{p}") for p in pids):
        time.sleep(0.1)
    return 0


def main(argv: list[str]) -> int:
    if not argv:
        print(USAGE)
        return 1
    if argv[0] == "start":
        return start(argv[1:])
    if argv[0] == "stop":
        return stop(argv[1:])
    print(f"samsa server: unknown command {argv[0]!r}\n\n{USAGE}", file=sys.stderr)
    return 1
