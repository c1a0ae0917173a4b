"""The network nemesis of ``tests/cluster/`` on KRaft clusters (issue 34): every node in a network
namespace of its own (``nemesis.Network``), three combined nodes, or three controllers and three
brokers, under the checker's workload (``checker.Workload``: an acks=all idempotent producer, an
acks=1 one and a transactional one on RF 3, ``min.insync.replicas=2`` topics, unclean election
off), with the faults a controller quorum has to survive, one after another:

- the active controller isolated: a new one is elected in a higher epoch, the cluster writes on,
  and healed, the old one rejoins the quorum as a follower and catches up;
- a voter (not the active controller) cut from the other voters: metadata is still written
  (a topic created), the cut voter never bumps its epoch (pre-vote, KIP-996), and healed it
  catches up (combined: its broker is fenced and its partitions move; writes going on are not
  asserted, the cut node being a zombie leader to the clients that still reach it);
- each controller SIGKILLed in turn and restarted: metadata written with the other two, the
  restarted one caught up before the next;
- a majority of the controllers SIGKILLed: no active controller, no metadata written (CreateTopics
  fails), while the brokers whose partitions' leaders are alive keep serving produce and fetch
  (combined: the survivor's acks=1 partitions); restarted, a controller is elected and the
  cluster is whole and writing again.

Then the checker reads everything back: nothing acknowledged lost, moved or duplicated, replicas
byte-identical below the high watermark, nothing of an aborted transaction read; and the view
(``kraft_nodes.KRaftView``) compares the nodes' ``__cluster_metadata-0``: below the quorum's high
watermark every node's log the same, each a prefix of the active controller's; and no node
logged an unhandled exception.

Found by it, each with a test of its own below and in ``test_kraft_channel.py``: a broker whose
controller quorum was gone stopped serving everyone for 35 s when a client looked for a group's
coordinator before ``__consumer_offsets`` existed; and a request failing on a deposed active
controller closed the connection another request had just opened to the new one.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "cluster"))

from checker import QUIET, Workload  # noqa: E402
from kraft_nodes import KRaftCluster, metadata_log_differences  # noqa: E402
from nemesis import Network, available  # noqa: E402
from samsa.client.connection import BrokerConnection  # noqa: E402
from samsa.protocol.api_keys import ApiKey  # noqa: E402
from waiting import wait_until  # noqa: E402

pytestmark = pytest.mark.timeout(400)

NEMESIS_KRAFT = {
    "replica.socket.timeout.ms": "3000",
    "min.insync.replicas": "2",
    "unclean.leader.election.enable": "false",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
}
FAULT_TIMEOUT = 60
SHAPES = {"combined": {"combined": 3}, "controllers-and-brokers": {"combined": 0, "controllers": 3, "brokers": 3}}


@pytest.fixture(params=list(SHAPES))
def nemesis_kraft(request, tmp_path):
    why = available()
    if why is not None:
        pytest.fail(f"the network nemesis cannot run here: {why} (./test installs iproute2 and iptables)")
    shape = SHAPES[request.param]
    network = Network(KRaftCluster.node_names(**shape)).create()
    cluster = None
    try:
        cluster = KRaftCluster(tmp_path, network=network, **shape, **NEMESIS_KRAFT)
        yield network, cluster.start()
    finally:
        try:
            if cluster is not None:
                cluster.stop()
        finally:
            network.destroy()


# ---------------------------------------------------------------- helpers

def _active(cluster: KRaftCluster, among=None) -> dict:
    return wait_until(lambda: cluster.quorum(among), "an active controller", FAULT_TIMEOUT)


def _caught_up(cluster: KRaftCluster, voter: int, offset: int) -> bool:
    """The active controller sees ``voter`` in the quorum with its log at ``offset`` or past it."""
    q = cluster.quorum()
    return q is not None and any(v["replica_id"] == voter and v["log_end_offset"] >= offset
                                 for v in q["current_voters"])


def _epoch(cluster: KRaftCluster, voter: int) -> int:
    """The epoch in a voter's quorum-state file."""
    return json.loads((cluster.nodes[voter].metadata_dir / "quorum-state").read_text())["leaderEpoch"]


def _rejoined(cluster: KRaftCluster, voter: int) -> None:
    hw = _active(cluster)["high_watermark"]
    wait_until(lambda: _caught_up(cluster, voter, hw), f"voter {voter} caught up to offset {hw}", FAULT_TIMEOUT)


_probes = iter(range(1, 1 << 30))


def _create_topic(cluster: KRaftCluster, timeout: float) -> None:
    """A metadata write: a topic created (raises when the controller does not answer in time)."""
    name = f"probe-{next(_probes)}"
    admin = AdminClient({"bootstrap.servers": cluster.live_bootstrap(), **QUIET})
    admin.create_topics([NewTopic(name, 1, 1)], request_timeout=timeout)[name].result(timeout + 5)


def _metadata_written(cluster: KRaftCluster) -> None:
    wait_until(lambda: _create_topic(cluster, 5) or True, "a topic created (metadata written)", FAULT_TIMEOUT)


def _writes_go_on(w: Workload) -> None:
    t = time.monotonic()
    wait_until(lambda: w.acked_since(t), "acks=all records of every partition acknowledged under the fault",
               FAULT_TIMEOUT)


def _broker_gone(cluster: KRaftCluster, w: Workload, node: int) -> None:
    """A broker unreachable by the quorum: fenced, and no partition of the workload led by it."""
    if node not in cluster.brokers:
        return
    wait_until(lambda: node not in w.registered(), f"broker {node} fenced", FAULT_TIMEOUT)
    def moved() -> bool:
        alive = w.registered()
        return all(s["leader"] != node and s["leader"] in alive for s in w.states().values())
    wait_until(moved, f"every partition led by a registered broker other than {node}", FAULT_TIMEOUT)


# ---------------------------------------------------------------- the faults

def active_controller_isolated(network: Network, cluster: KRaftCluster, w: Workload) -> str:
    before = _active(cluster)
    old = before["leader_id"]
    others = [i for i in cluster.voters if i != old]
    network.isolate(f"n{old}")
    try:
        after = wait_until(lambda: (q := cluster.quorum(others)) and q["leader_epoch"] > before["leader_epoch"] and q,
                           "a new active controller in a higher epoch", FAULT_TIMEOUT)
        _broker_gone(cluster, w, old)
        _metadata_written(cluster)
        _writes_go_on(w)
    finally:
        network.heal()
    _rejoined(cluster, old)
    w.wait_whole_and_writing()
    return f"active controller {old} isolated: {after['leader_id']} elected in epoch {after['leader_epoch']}"


def voter_cut(network: Network, cluster: KRaftCluster, w: Workload) -> str:
    before = _active(cluster)
    leader = before["leader_id"]
    voter = next(i for i in cluster.voters if i != leader)
    for other in cluster.voters:
        if other != voter:
            network.cut(f"n{voter}", f"n{other}")
    cut_epoch = wait_until(lambda: _epoch(cluster, voter), f"voter {voter}'s epoch", FAULT_TIMEOUT)
    try:
        _broker_gone(cluster, w, voter)  # combined: its broker cannot heartbeat either
        if voter not in cluster.brokers:
            _writes_go_on(w)
        # else (combined) the cut node still answers its clients, as the leader its old metadata
        # says it is, and cannot learn otherwise: a producer that asks it for metadata stalls on
        # it until the heal (a zombie leader, as scenarios.leader_cut_from_zookeeper's)
        _metadata_written(cluster)
        hw = _active(cluster)["high_watermark"]  # past the topic's records, which the cut voter cannot have
        assert not _caught_up(cluster, voter, hw), f"voter {voter} cut, yet at the high watermark {hw}"
        # KIP-996: the voter that lost its leader asks for pre-votes (none granted) before it
        # would stand in a new epoch: cut off, it never bumps its epoch, so it cannot depose
        # the leader with a higher one when the link heals
        assert _epoch(cluster, voter) == cut_epoch, f"voter {voter} cut off went from epoch {cut_epoch} " \
            f"to {_epoch(cluster, voter)}"
    finally:
        network.heal()
    _rejoined(cluster, voter)
    w.wait_whole_and_writing()
    return f"voter {voter} cut from the other voters"


def controllers_killed_one_at_a_time(network: Network, cluster: KRaftCluster, w: Workload) -> str:
    leader = _active(cluster)["leader_id"]
    order = [leader] + [i for i in cluster.voters if i != leader]  # the active one first
    for victim in order:
        epoch = _active(cluster)["leader_epoch"]
        cluster.nodes[victim].kill()
        others = [i for i in cluster.voters if i != victim]
        q = wait_until(lambda: cluster.quorum(others), f"an active controller with {victim} killed", FAULT_TIMEOUT)
        assert victim != leader or q["leader_epoch"] > epoch
        _metadata_written(cluster)
        _broker_gone(cluster, w, victim)
        _writes_go_on(w)
        cluster.nodes[victim].start()
        _rejoined(cluster, victim)
        w.wait_whole_and_writing()
        leader = _active(cluster)["leader_id"]
    return f"controllers {order} SIGKILLed and restarted one at a time"


def _fetched(cluster: KRaftCluster, topic: str, partition: int) -> bool:
    """A record of ``topic-partition`` read from its start (Fetch served)."""
    c = Consumer({"bootstrap.servers": cluster.live_bootstrap(), "group.id": "nemesis-fetch",
                  "enable.auto.commit": False, **QUIET})
    try:
        c.assign([TopicPartition(topic, partition, 0)])
        return any(not m.error() for m in c.consume(10, 5))
    finally:
        c.close()


def majority_lost(network: Network, cluster: KRaftCluster, w: Workload) -> str:
    leader = _active(cluster)["leader_id"]
    states = w.states()
    one = {int(tp.rsplit("-", 1)[1]): s["leader"] for tp, s in states.items()
           if tp.rsplit("-", 1)[0] == w.topics["one"]}
    # combined: the survivor is a broker leading a partition (it keeps taking acks=1 writes);
    # rather not the active controller, so that the victims take it with them
    survivor = min(cluster.voters, key=lambda i: (i in cluster.brokers and i not in one.values(), i == leader))
    victims = [i for i in cluster.voters if i != survivor]
    for v in victims:
        cluster.nodes[v].kill()
    lost_at = time.monotonic()
    try:
        wait_until(lambda: cluster.quorum() is None, "no active controller", FAULT_TIMEOUT)
        try:
            _create_topic(cluster, 5)
            created = True
        except (KafkaException, TimeoutError):
            created = False
        assert not created, "a topic created without a quorum"
        assert cluster.quorum() is None
        if not set(victims) & set(cluster.brokers):
            _writes_go_on(w)  # every broker alive, every ISR as it was: acks=all goes on
        else:
            # combined: the survivor's own partitions take acks=1 writes (acks=all waits for the
            # dead followers, which no controller can take out of the ISRs)
            led = [p for p, b in one.items() if b == survivor]
            wait_until(lambda: all(w.one.last_ack.get(p, 0) > lost_at for p in led),
                       f"acks=1 records of partitions {led} led by {survivor} acknowledged", FAULT_TIMEOUT)
        p = next(p for p, b in one.items() if b not in victims)
        wait_until(lambda: _fetched(cluster, w.topics["one"], p), f"{w.topics['one']}-{p} fetched", FAULT_TIMEOUT)
    finally:
        for v in victims:
            cluster.nodes[v].start()
    _active(cluster)
    _metadata_written(cluster)
    for v in victims:
        _rejoined(cluster, v)
    w.wait_whole_and_writing()
    return f"controllers {victims} SIGKILLed (a majority), restarted"


FAULTS = [active_controller_isolated, voter_cut, controllers_killed_one_at_a_time, majority_lost]


def test_kraft_quorum_under_the_nemesis(nemesis_kraft):
    network, cluster = nemesis_kraft
    w = Workload(cluster, "kn").start()
    done, stuck = [], None
    try:
        for fault in FAULTS:
            t0 = time.monotonic()
            what = fault(network, cluster, w)
            done.append(f"{what} ({time.monotonic() - t0:.0f} s)")
    except AssertionError as e:  # not recovered: still check what was acknowledged, and say both
        stuck = e
    finally:
        network.heal()
        for n in cluster.nodes.values():
            if not n.alive:
                n.start()
        w.stop()
    report = w.check()
    # as the ZooKeeper campaign counts them (scenarios.run_campaign): an exception nothing handled
    report.broker_log_problems = [f"node {i}: {line}" for i, n in cluster.nodes.items()
                                  for line in n.log_text().splitlines()
                                  if "Traceback" in line or "never retrieved" in line]
    print("\n" + "\n".join(done) + "\n  " + "\n  ".join(report.lines()))
    assert report.violations() == [], report.violations() + [f"and the scenario: {stuck}"] * (stuck is not None)
    if stuck is not None:
        raise stuck
    assert report.broker_log_problems == [], report.broker_log_problems


def test_metadata_logs_compared_as_one_log():
    """The checker's comparison of the nodes' metadata logs: (base, last, epoch, crc, control)."""
    log = [(0, 0, 1, 11, True), (1, 3, 1, 12, False), (4, 4, 2, 13, True), (5, 9, 2, 14, False)]
    assert metadata_log_differences({1: log, 2: log, 101: log[:3]}, leader=1, high_watermark=4) == []
    # a node behind below the high watermark, one with a batch of its own, one longer than the leader
    assert metadata_log_differences({1: log, 2: log[:1]}, 1, 4)[0].startswith("the committed metadata")
    other = log[:1] + [(1, 3, 1, 99, False)] + log[2:]
    assert len(metadata_log_differences({1: log, 101: other}, 1, 4)) == 2
    assert metadata_log_differences({1: log, 2: log, 3: log[:3]}, 1, 10)[0].startswith("the committed")
    extra = log + [(10, 10, 2, 15, False)]
    assert metadata_log_differences({1: log, 101: extra}, 1, 4) == [
        "node 101's metadata log (5 batches) is not a prefix of the active controller 1's (4 batches)"]
    diverged = log[:3] + [(5, 9, 1, 77, False)]  # an uncommitted suffix of an old epoch, not truncated
    assert metadata_log_differences({1: log, 2: diverged}, 1, 4)[0].startswith("node 2's")
    # a node whose log starts later (it let it go below a snapshot): compared from there
    assert metadata_log_differences({1: log, 2: log[2:], 101: log[1:3]}, 1, 6) == []
    assert metadata_log_differences({1: log, 2: log[2:3] + [(5, 9, 2, 66, False)]}, 1, 6) != []


def test_broker_serves_while_no_controller_answers(tmp_path):
    """A majority of the controllers gone: a broker asked for a group's coordinator before
    ``__consumer_offsets`` exists cannot create it (no controller answers); it says
    COORDINATOR_NOT_AVAILABLE, and meanwhile answers everyone else. (Found by the scenario
    above: the broker's event loop waited on the controller for 35 s, serving no one.)"""
    c = KRaftCluster(tmp_path, combined=3)
    try:
        c.start()
        leader = _active(c)["leader_id"]
        survivor = next(i for i in c.voters if i != leader)
        for i in c.voters:
            if i != survivor:
                c.nodes[i].kill()
        node = c.nodes[survivor]
        wait_until(lambda: "heartbeat failed" in node.log_text(), "the survivor's heartbeats failing", FAULT_TIMEOUT)

        async def ask() -> tuple[dict, dict]:
            slow = BrokerConnection(node.host, node.port, request_timeout_ms=60000)
            other = BrokerConnection(node.host, node.port, request_timeout_ms=10000)
            await slow.connect()
            await other.connect()
            try:
                coordinator = asyncio.ensure_future(slow.request(ApiKey.FIND_COORDINATOR, {
                    "key_type": 0, "coordinator_keys": ["nemesis-group"]}, 4))
                await asyncio.sleep(0)  # sent first
                md = await other.request(ApiKey.METADATA, {"topics": None, "allow_auto_topic_creation": False,
                                                           "include_topic_authorized_operations": False}, 12)
                return md, await coordinator
            finally:
                coordinator.cancel()
                slow.close()
                other.close()
        md, coordinator = asyncio.run(ask())
        assert sorted(b["node_id"] for b in md["brokers"]) == [1, 2, 3]
        assert coordinator["coordinators"][0]["error_code"] == 15, coordinator  # COORDINATOR_NOT_AVAILABLE
    finally:
        c.stop()
