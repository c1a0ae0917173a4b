"""A network nemesis: each node (ZooKeeper, each broker) in a network namespace of its own on a
bridge, and faults made by iptables rules inside those namespaces.

The test host's side of the bridge has the subnet's first address, so clients in the root
namespace reach every node; nothing else on the host is touched: a fresh 10.x.y.0/24 subnet
no route of the host uses, and names unique to this run (a crashed run cannot collide).
Faults (each undone by :meth:`Network.heal`):

- :meth:`isolate` a node from everything (clients included);
- :meth:`cut` the link between two nodes (both directions);
- :meth:`drop` one direction of a link (packets from ``src`` to ``dst``);
- :meth:`slow` every link: delay and loss, by an NFQUEUE rule and ``nfq_delay.py`` in each
  namespace (this kernel has neither ``tc netem`` nor tc's drop action).

Needs root, iproute2 and iptables (``./test`` installs them).
"""

from __future__ import annotations

import ipaddress
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CLIENT = "client"  # the root namespace (the test's clients), as a node name for cut/drop


def _run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {r.stderr.strip()}")
    return r


def available() -> str | None:
    """Why the nemesis cannot run here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "iptables"):
        if _run("sh", "-c", f"command -v {tool}", check=False).returncode != 0:
            return f"{tool} is not installed"
    return None


def _free_subnet() -> ipaddress.IPv4Network:
    used = [ipaddress.ip_network(line.split()[0], strict=False)
            for line in _run("ip", "-4", "route", "show", "table", "all").stdout.splitlines()
            if line and line.split()[0][0].isdigit()]
    used += [ipaddress.ip_interface(line.split()[3]).network
             for line in _run("ip", "-4", "-o", "addr").stdout.splitlines()]
    rnd = random.Random()
    for _ in range(1000):
        net = ipaddress.ip_network(f"10.{rnd.randrange(64, 128)}.{rnd.randrange(256)}.0/24")
        if not any(net.overlaps(u) for u in used if u.prefixlen > 0):
            return net
    raise RuntimeError("no free 10.x.y.0/24 subnet")


class Node:
    def __init__(self, name: str, netns: str, host: str):
        self.name, self.netns, self.host = name, netns, host

    def prefix(self) -> list[str]:
        """The command prefix that runs a process inside this node's namespace."""
        return ["ip", "netns", "exec", self.netns]

    def iptables(self, *rule: str) -> None:
        _run("ip", "netns", "exec", self.netns, "iptables", "-w", *rule)


class Network:
    def __init__(self, names: list[str]):
        self.tag = f"{os.getpid() % 100000:05d}{random.randrange(16 ** 3):03x}"  # 8 chars: interface names <= 15
        self.subnet = _free_subnet()
        hosts = list(self.subnet.hosts())
        self.gateway = str(hosts[0])  # the root namespace's address on the bridge
        self.bridge = f"snb{self.tag}"
        self.nodes = {n: Node(n, f"samsa-{self.tag}-{n}", str(hosts[i + 1])) for i, n in enumerate(names)}
        self._veths = {n: f"snv{self.tag}{i}" for i, n in enumerate(names)}
        self._delayers: list[subprocess.Popen] = []
        self.faults: list[str] = []  # what is in force now, for reports

    def __getitem__(self, name: str) -> Node:
        return self.nodes[name]

    def create(self) -> "Network":
        try:
            _run("ip", "link", "add", self.bridge, "type", "bridge")
            _run("ip", "addr", "add", f"{self.gateway}/{self.subnet.prefixlen}", "dev", self.bridge)
            _run("ip", "link", "set", self.bridge, "up")
            for name, node in self.nodes.items():
                veth = self._veths[name]
                _run("ip", "netns", "add", node.netns)
                _run("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", node.netns)
                _run("ip", "link", "set", veth, "master", self.bridge, "up")
                _run("ip", "-n", node.netns, "addr", "add", f"{node.host}/{self.subnet.prefixlen}", "dev", "eth0")
                _run("ip", "-n", node.netns, "link", "set", "eth0", "up")
                _run("ip", "-n", node.netns, "link", "set", "lo", "up")
        except Exception:
            self.destroy()
            raise
        return self

    def destroy(self) -> None:
        """Remove the namespaces (their veths and rules go with them) and the bridge."""
        self._stop_delayers()
        for name, node in self.nodes.items():
            _run("ip", "link", "del", self._veths[name], check=False)  # both ends of the pair
            _run("ip", "netns", "del", node.netns, check=False)
        _run("ip", "link", "del", self.bridge, check=False)

    # ---------------------------------------------------------------- faults

    def _host(self, name: str) -> str:
        return self.gateway if name == CLIENT else self.nodes[name].host

    def isolate(self, name: str) -> None:
        node = self.nodes[name]
        node.iptables("-A", "INPUT", "-i", "eth0", "-j", "DROP")
        node.iptables("-A", "OUTPUT", "-o", "eth0", "-j", "DROP")
        self.faults.append(f"{name} isolated")

    def drop(self, src: str, dst: str) -> None:
        """Packets from ``src`` to ``dst`` are lost (the other direction still flows)."""
        if src != CLIENT:
            self.nodes[src].iptables("-A", "OUTPUT", "-d", self._host(dst), "-j", "DROP")
        else:
            self.nodes[dst].iptables("-A", "INPUT", "-s", self.gateway, "-j", "DROP")
        self.faults.append(f"{src}->{dst} dropped")

    def cut(self, a: str, b: str) -> None:
        self.drop(a, b)
        self.drop(b, a)

    def slow(self, delay_ms: float, loss: float, seed: int = 1) -> None:
        """Every packet a node sends waits ``delay_ms`` and is lost with probability ``loss``."""
        for i, node in enumerate(self.nodes.values()):
            queue = 10 + i
            self._delayers.append(subprocess.Popen(
                node.prefix() + [sys.executable, str(HERE / "nfq_delay.py"), "--queue", str(queue),
                                 "--delay-ms", str(delay_ms), "--loss", str(loss), "--seed", str(seed + i)],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
            line = self._delayers[-1].stdout.readline()  # bound to its queue before the rule sends packets there
            if not line.startswith("nfq_delay:"):
                raise RuntimeError(f"the delayer in {node.netns} did not start: {line}")
            node.iptables("-A", "OUTPUT", "-o", "eth0", "-j", "NFQUEUE", "--queue-num", str(queue), "--queue-bypass")
        self.faults.append(f"every link {delay_ms:g} ms, {loss:.0%} loss")

    def heal(self) -> None:
        for node in self.nodes.values():
            node.iptables("-F")
        self._stop_delayers()
        self.faults.clear()

    def _stop_delayers(self) -> None:
        for p in self._delayers:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(5)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(5)
        self._delayers.clear()
