"""Network partition scenarios on a three-broker cluster whose nodes live in network namespaces
(``nemesis.Network``), each under a running ``checker.Workload``: the fault, the condition that
shows it took effect, the heal, and the cluster whole and writing again.

``test_partitions.py`` runs each once; ``bench/nemesis_bench.py`` mixes them with kills and
pauses in a long campaign.
"""

from __future__ import annotations

import json
import random
import re
import signal
import time
from pathlib import Path

from checker import Workload
from cluster_harness import Cluster
from nemesis import Network
from waiting import wait_until

NEMESIS_CLUSTER = {
    "zookeeper.session.timeout.ms": 3000,
    "zookeeper.connection.timeout.ms": 6000,
    "replica.lag.time.max.ms": 2000,
    "replica.socket.timeout.ms": 3000,
    "min.insync.replicas": 2,
    "unclean.leader.election.enable": "false",
    "transaction.state.log.replication.factor": 3,
    "transaction.state.log.min.isr": 2,
    "transaction.state.log.num.partitions": 4,
}
FAULT_TIMEOUT = 60


def start_cluster(root: Path, **overrides) -> tuple[Network, Cluster]:
    """A bridge, namespaces zk, b0, b1, b2, and the cluster in them (the caller stops both,
    see :func:`stop_cluster`)."""
    network = Network(["zk", "b0", "b1", "b2"]).create()
    try:
        cluster = Cluster(root, network=network, **{**NEMESIS_CLUSTER, **overrides}).start()
    except Exception:
        network.destroy()
        raise
    return network, cluster


def stop_cluster(network: Network, cluster: Cluster) -> None:
    try:
        cluster.stop()
    finally:
        network.destroy()


def _zk_read(cluster: Cluster, fn):
    zk = cluster.zookeeper()
    try:
        return fn(zk)
    finally:
        zk.stop()
        zk.close()


def controller(cluster: Cluster) -> int:
    def read(zk) -> int:
        try:
            return json.loads(zk.get("/controller")[0])["brokerid"]
        except Exception:
            return -1
    return _zk_read(cluster, read)


def state(w: Workload, partition: int = 0) -> dict:
    return w.states()[f"{w.topics['all']}-{partition}"]


def _new_leader(w: Workload, old: int, partition: int = 0) -> bool:
    s = state(w, partition)
    return s["leader"] not in (old, -1) and s["leader"] in w.registered()


def _writes_go_on(w: Workload) -> None:
    t = time.monotonic()
    wait_until(lambda: w.acked_since(t), what="acks=all records of every partition acknowledged under the fault",
               timeout=FAULT_TIMEOUT)


def expansion_proposals(cluster: Cluster, broker: int) -> int:
    """How many times any leader proposed adding ``broker`` to an ISR (the brokers' logs)."""
    pattern = re.compile(rf"expanding ISR of .* to \[[\d, ]*\b{broker}\]")
    return sum(len(pattern.findall(b.log_text())) for b in cluster.brokers.values())


# ---------------------------------------------------------------- the faults

def leader_cut_from_zookeeper(network: Network, cluster: Cluster, w: Workload, hold_s: float = 4) -> str:
    """The leader of a partition (not the controller) loses ZooKeeper but still reaches its
    clients and followers: its session expires, another ISR member leads, the zombie cannot
    complete an acks=all write; healed, it registers again and follows. No leader proposes the
    cut-off broker back into an ISR while it is not registered."""
    ctrl = controller(cluster)
    p = next((i for i in range(w.partitions) if state(w, i)["leader"] != ctrl), 0)
    leader = state(w, p)["leader"]
    network.cut(f"b{leader}", "zk")
    try:
        wait_until(lambda: _new_leader(w, leader, p), what=f"a new leader of partition {p}", timeout=FAULT_TIMEOUT)
        wait_until(lambda: leader not in w.registered(), what=f"broker {leader} unregistered", timeout=FAULT_TIMEOUT)
        before = expansion_proposals(cluster, leader)
        # The zombie still answers its clients (its stale metadata names it the leader), so an
        # idempotent producer may stall on it until the heal: hold the fault a while instead of
        # waiting for writes to go on, while it fetches as a follower from the other leaders.
        time.sleep(hold_s)
        proposals = expansion_proposals(cluster, leader) - before
    finally:
        network.heal()
    w.wait_whole_and_writing()
    assert proposals == 0, f"leaders proposed unregistered broker {leader} for the ISR {proposals} times"
    return f"leader {leader} of partition {p} cut from ZooKeeper"


def leader_isolated(network: Network, cluster: Cluster, w: Workload) -> str:
    leader = state(w)["leader"]
    network.isolate(f"b{leader}")
    try:
        wait_until(lambda: _new_leader(w, leader), what="a new leader of partition 0", timeout=FAULT_TIMEOUT)
        _writes_go_on(w)
    finally:
        network.heal()
    w.wait_whole_and_writing()
    return f"leader {leader} isolated"


def _follower_behind(network: Network, w: Workload, fault) -> str:
    s = state(w)
    leader, follower = s["leader"], next(r for r in s["isr"] if r != s["leader"])
    fault(f"b{leader}", f"b{follower}")
    try:
        wait_until(lambda: follower not in state(w)["isr"], what=f"broker {follower} out of the ISR of partition 0",
                   timeout=FAULT_TIMEOUT)
        _writes_go_on(w)  # with two replicas in sync, min.insync.replicas=2
    finally:
        network.heal()
    w.wait_whole_and_writing()  # the follower truncated, caught up and is back in the ISR
    return f"{leader}->{follower}"


def follower_cut_from_leader(network: Network, cluster: Cluster, w: Workload) -> str:
    return "link cut " + _follower_behind(network, w, network.cut)


def one_way_leader_to_follower(network: Network, cluster: Cluster, w: Workload) -> str:
    return "one way dropped " + _follower_behind(network, w, network.drop)


def controller_isolated(network: Network, cluster: Cluster, w: Workload) -> str:
    ctrl = controller(cluster)
    network.isolate(f"b{ctrl}")
    try:
        wait_until(lambda: controller(cluster) not in (ctrl, -1), what="another controller", timeout=FAULT_TIMEOUT)
        alive = lambda: w.registered()  # noqa: E731
        wait_until(lambda: all(s["leader"] in alive() and s["leader"] != ctrl for s in w.states().values()),
                   what="every partition led by a registered broker", timeout=FAULT_TIMEOUT)
        _writes_go_on(w)
    finally:
        network.heal()
    w.wait_whole_and_writing()
    return f"controller {ctrl} isolated"


def slow_links(network: Network, cluster: Cluster, w: Workload, seconds: float = 60, delay_ms: float = 100,
               loss: float = 0.05, seed: int = 1) -> str:
    network.slow(delay_ms, loss, seed)
    try:
        t = time.monotonic()
        _writes_go_on(w)
        time.sleep(max(0.0, seconds - (time.monotonic() - t)))  # the fault lasts this long
    finally:
        network.heal()
    w.wait_whole_and_writing()
    return f"every link {delay_ms:g} ms and {loss:.0%} loss for {seconds:g} s"


# ---------------------------------------------------------------- the campaign (bench/nemesis_bench.py)

def run_campaign(root: Path, faults: int, seed: int = 1, slow_s: float = 60, log=print) -> tuple[dict, object]:
    """``faults`` random faults, one at a time, under one workload: a node isolated (ZooKeeper
    too), a broker cut from ZooKeeper, a link between two brokers cut, one direction of a link
    dropped, delay and loss on every link, a broker SIGKILLed and restarted, a broker paused
    past its session. Each lasts 1-6 s (delay and loss: ``slow_s`` every tenth time), then
    heals; the next begins once every partition is led, fully in sync and written again.
    Returns the count of each kind of fault and the checker's report."""
    rnd = random.Random(seed)
    network, cluster = start_cluster(root)
    counts: dict[str, int] = {}
    try:
        w = Workload(cluster, "campaign").start()
        brokers = [f"b{i}" for i in cluster.brokers]
        try:
            for i in range(faults):
                kind = rnd.choice(["isolate", "isolate", "zk-cut", "link-cut", "one-way", "one-way", "kill",
                                   "pause", "slow"])
                a, b = rnd.sample(brokers, 2)
                hold = rnd.uniform(1, 6)
                t0 = time.monotonic()
                if kind == "isolate":
                    a = rnd.choice(brokers + ["zk"])
                    network.isolate(a)
                    what = f"{a} isolated"
                elif kind == "zk-cut":
                    network.cut(a, "zk")
                    what = f"{a} cut from zk"
                elif kind == "link-cut":
                    network.cut(a, b)
                    what = f"{a}<->{b} cut"
                elif kind == "one-way":
                    network.drop(a, b)
                    what = f"{a}->{b} dropped"
                elif kind == "slow":
                    hold = slow_s if counts.get("slow", 0) % 10 == 0 else hold
                    network.slow(100, 0.05, seed + i)
                    what = "every link 100 ms, 5% loss"
                elif kind == "kill":
                    cluster.brokers[int(a[1:])].kill()
                    what = f"{a} SIGKILLed"
                else:
                    cluster.brokers[int(a[1:])].proc.send_signal(signal.SIGSTOP)
                    hold = NEMESIS_CLUSTER["zookeeper.session.timeout.ms"] / 1000 + rnd.uniform(1, 2)
                    what = f"{a} paused"
                counts[kind] = counts.get(kind, 0) + 1
                time.sleep(hold)  # the fault lasts this long
                network.heal()
                if kind == "kill":
                    cluster.brokers[int(a[1:])].start()
                elif kind == "pause":
                    cluster.brokers[int(a[1:])].proc.send_signal(signal.SIGCONT)
                try:
                    w.wait_whole_and_writing(timeout=180)
                except AssertionError as e:
                    log(f"fault {i + 1} ({what}): the cluster did not recover: {e}")
                    counts["not recovered"] = counts.get("not recovered", 0) + 1
                    break
                log(f"fault {i + 1}/{faults}: {what} for {hold:.1f} s, whole and writing again "
                    f"{time.monotonic() - t0 - hold:.1f} s after the heal")
        finally:
            network.heal()
            w.stop()
        report = w.check()
        report.broker_log_problems = [line for b in cluster.brokers.values() for line in b.log_text().splitlines()
                                      if "Traceback" in line or "never retrieved" in line]
        return counts, report
    finally:
        stop_cluster(network, cluster)
