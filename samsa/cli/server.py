"""``samsa server start [-daemon] server.properties [--override k=v ...]`` and ``samsa server stop``."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from samsa.cli.common import Parser, run_tool
from samsa.configdef import ConfigError, parse_properties

USAGE = """usage: samsa server start [-daemon] server.properties [--override property=value]*
       samsa server start --local-nodes N server.properties [--override property=value]*
       samsa server stop [--node-id id]

  start      run a broker with the given Kafka-format server.properties
  -daemon    run in the background, logging to $LOG_DIR/server.log (default ./logs)
  --override property=value   overrides a value of server.properties
  --local-nodes N   run a KRaft cluster of N combined nodes on this machine, one process each
             (ports: the listener's, then +2 each; controllers one above), formatted on the first run
  stop       stop the brokers this installation started on this machine (SIGTERM, clean
             shutdown), or with --node-id only the one with that node.id; says which it stops"""


START_FLAGS = ("-daemon", "--daemon", "--override", "--local-nodes", "-h", "--help")


def _overrides(values: list[str]) -> dict[str, str]:
    out = {}
    for item in values:
        if "=" not in item:
            raise ConfigError(f"--override expects property=value, got {item!r}")
        k, v = item.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def start(argv: list[str]) -> int:
    parser = Parser(prog="samsa server start", add_help=True)
    parser.add_argument("-daemon", "--daemon", action="store_true", dest="daemon")
    parser.add_argument("properties")
    parser.add_argument("--override", action="append", default=[])
    parser.add_argument("--local-nodes", type=int, default=0)
    unknown = [a for i, a in enumerate(argv) if a.startswith("-") and a.split("=")[0] not in START_FLAGS
               and (i == 0 or argv[i - 1] not in ("--override", "--local-nodes"))]
    if unknown:  # named first, before argparse complains about what is missing
        print(f"samsa server start: unrecognized option {unknown[0]} (run 'samsa server' for the usage)",
              file=sys.stderr)
        return 1

    def go(args: argparse.Namespace) -> int:
        from samsa.broker_config import BrokerConfig
        from samsa.server.runner import run
        if args.local_nodes:
            from samsa.cli import local_nodes
            if args.daemon:
                raise ConfigError("--local-nodes runs in the foreground (it supervises the nodes); drop -daemon")
            base = parse_properties(Path(args.properties).read_text()) | _overrides(args.override)
            return local_nodes.run(base, args.local_nodes)
        config = BrokerConfig.from_file(args.properties, _overrides(args.override))
        return run(config, daemon=args.daemon)
    return run_tool(argv, parser, go, usage="samsa server start: {}", failures=[(ConfigError, "samsa server: {}")])


@dataclass(frozen=True)
class RunningBroker:
    pid: int
    node_id: int | None  # None when its properties cannot be read any more
    properties: str


def running_brokers() -> list[RunningBroker]:
    """Brokers on this machine started by ``samsa server start`` of this installation.

    "This installation" is the Python environment running this command: a broker started
    from another virtualenv or another Python is not ours to stop.
    """
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                args = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
            exe, cwd = os.readlink(f"/proc/{entry}/exe"), os.readlink(f"/proc/{entry}/cwd")
        except OSError:
            continue
        i = args.index("start") if "start" in args else 0
        if i == 0 or args[i - 1] != "server" or not _ours(args, exe, cwd):
            continue
        found.append(_describe(int(entry), args[i + 1:], cwd))
    return sorted(found, key=lambda b: b.pid)


def _ours(args: list[str], exe: str, cwd: str) -> bool:
    if not any(a.endswith("/samsa") or a == "samsa" or a.startswith("samsa.cli") for a in args):
        return False
    if os.path.realpath(exe) != os.path.realpath(sys.executable):
        return False
    if "/" in args[0]:  # the same virtualenv: its bin/ holds the interpreter both were started with
        return os.path.dirname(os.path.join(cwd, args[0])) == os.path.dirname(sys.executable)
    return True


def _describe(pid: int, start_args: list[str], cwd: str) -> RunningBroker:
    """The node id a broker was started with: its properties file under its own overrides."""
    positional = [a for i, a in enumerate(start_args) if not a.startswith("-")
                  and (i == 0 or start_args[i - 1] != "--override")]
    path = os.path.join(cwd, positional[0]) if positional else ""
    try:
        props = parse_properties(Path(path).read_text())
        props.update(_overrides([v for i, v in enumerate(start_args) if i and start_args[i - 1] == "--override"]))
        node_id = int(props.get("broker.id", "-1"))
        if node_id < 0:
            node_id = max(int(props.get("node.id", "-1")), 0)
    except (OSError, ValueError, ConfigError):
        node_id = None
    return RunningBroker(pid, node_id, path)


def stop(argv: list[str]) -> int:
    parser = Parser(prog="samsa server stop")
    parser.add_argument("--node-id", type=int, help="stop only the broker with this node.id (broker.id)")
    return run_tool(argv, parser, _stop, usage="samsa server stop: {}")


def _stop(args: argparse.Namespace) -> int:
    brokers = [b for b in running_brokers() if args.node_id is None or b.node_id == args.node_id]
    if not brokers:
        which = f" with node.id {args.node_id}" if args.node_id is not None else ""
        print(f"No samsa server{which} to stop", file=sys.stderr)
        return 1
    for b in brokers:
        print(f"Stopping samsa broker node.id={b.node_id if b.node_id is not None else '?'} "
              f"(pid {b.pid}, {b.properties or 'no properties file'})")
        os.kill(b.pid, signal.SIGTERM)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and any(os.path.exists(f"/proc/{b.pid}") for b in brokers):
        time.sleep(0.1)
    left = [str(b.pid) for b in brokers if os.path.exists(f"/proc/{b.pid}")]
    if left:
        print(f"samsa server stop: still running after 60 s: pid {', '.join(left)}", file=sys.stderr)
        return 1
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
