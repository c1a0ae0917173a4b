"""Network partitions (issue 24): ZooKeeper and three brokers, each in a network namespace of
its own (``nemesis.py``), under an acks=all idempotent producer, an acks=1 producer and a
transactional one on RF 3, ``min.insync.replicas=2`` topics with unclean election off.

Each scenario (``scenarios.py``) makes its fault, waits until it took effect (a new leader, a
shrunk ISR, another controller) and writes went on, heals, waits for full ISRs, and then the
checker (``checker.py``) reads everything back: nothing acknowledged lost, moved or duplicated,
order kept, replicas byte-identical below the high watermark, nothing of an aborted transaction
read by read_committed. One cluster serves the module; each scenario has its own topics.
"""

from __future__ import annotations

import pytest

import scenarios
from checker import Workload
from nemesis import available

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def nemesis_cluster(tmp_path_factory):
    why = available()
    if why is not None:
        pytest.fail(f"the network nemesis cannot run here: {why} (./test installs iproute2 and iptables)")
    network, cluster = scenarios.start_cluster(tmp_path_factory.mktemp("nemesis"))
    yield network, cluster
    scenarios.stop_cluster(network, cluster)


def run(nemesis_cluster, name: str, fault, **kw):
    network, cluster = nemesis_cluster
    w = Workload(cluster, name).start()
    what, stuck = name, None
    try:
        what = fault(network, cluster, w, **kw)
    except AssertionError as e:  # not recovered: still check what was acknowledged, and say both
        stuck = e
    finally:
        network.heal()
        w.stop()
    report = w.check()
    print(f"\n{what}:\n  " + "\n  ".join(report.lines()))
    assert report.violations() == [], report.violations() + [f"and the scenario: {stuck}"] * (stuck is not None)
    if stuck is not None:
        raise stuck
    return report


def test_leader_cut_from_zookeeper_only(nemesis_cluster):
    run(nemesis_cluster, "zkcut", scenarios.leader_cut_from_zookeeper)


def test_leader_isolated_then_healed(nemesis_cluster):
    run(nemesis_cluster, "isolated", scenarios.leader_isolated)


def test_follower_cut_from_leader(nemesis_cluster):
    run(nemesis_cluster, "followercut", scenarios.follower_cut_from_leader)


def test_controller_isolated(nemesis_cluster):
    run(nemesis_cluster, "controller", scenarios.controller_isolated)


def test_one_way_link_leader_to_follower(nemesis_cluster):
    run(nemesis_cluster, "oneway", scenarios.one_way_leader_to_follower)


def test_delay_and_loss_on_every_link(nemesis_cluster):
    """100 ms and 5 % loss on every packet every node sends (the bench keeps it a minute)."""
    run(nemesis_cluster, "slow", scenarios.slow_links, seconds=10)
