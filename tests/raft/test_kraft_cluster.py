"""Samsa clusters without ZooKeeper and without a JVM (issue 34): KRaft nodes that register
with the controller quorum and follow its metadata log.

Real processes on loopback, formatted by ``samsa storage format``: three combined nodes
(``process.roles=broker,controller``) form one cluster; real clients create, produce and consume
through any of them; Apache Kafka 4.4.0's ``kafka-metadata-quorum`` describes the quorum through a
broker and through a controller. The active controller SIGKILLed under an acks=all idempotent
load: a new one is elected, the dead broker is fenced and its partitions move, nothing
acknowledged is lost or duplicated, and the node restarted rejoins every ISR; a SIGTERM moves
leadership off the node before it exits. And controllers apart from brokers (three
``controller`` nodes, two ``broker`` nodes that observe the quorum).
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from collections import defaultdict

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                   NewTopic, ResourcePatternType, ResourceType, ScramCredentialInfo, ScramMechanism,
                                   UserScramCredentialUpsertion)

from kafka_process import TOOLS, connect_plugins_classpath, run_tool
from kraft_nodes import KRaftCluster
from raft_processes import batches
from waiting import wait_until

QUIET = {"log_level": 0}


@pytest.fixture(scope="module")
def combined(tmp_path_factory):
    # with an authorizer: nobody is refused until a resource has ACLs (allow.everyone.if.no.acl.found)
    c = KRaftCluster(tmp_path_factory.mktemp("kraft-combined"), combined=3, **{
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found": "true"})
    try:
        yield c.start()
    finally:
        c.stop()


def _create(bootstrap: str, topic: str, partitions: int, rf: int, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    admin.create_topics([NewTopic(topic, partitions, rf, config=configs)])[topic].result(30)


def _whole(c: KRaftCluster, topic: str, replicas: int = 3) -> bool:
    try:
        parts = c.partitions(topic)
    except Exception:
        return False
    return bool(parts) and all(leader is not None and leader >= 0 and len(isr) == replicas
                               for leader, _, isr in parts.values())


def test_three_combined_nodes_are_one_cluster(combined):
    c = combined
    wait_until(lambda: c.registered() == [1, 2, 3], "three brokers registered and unfenced", 30)
    view = wait_until(c.quorum, "an active controller", 30)
    assert sorted(v["replica_id"] for v in view["current_voters"]) == [1, 2, 3]
    _create(c.nodes[1].bootstrap, "kr-one", 6, 3)
    # every broker answers the same metadata: the partitions spread over the three, RF 3
    wait_until(lambda: _whole(c, "kr-one"), "kr-one led with full ISRs", 30)
    def views():   # each broker's answer (one still applying the topic answers UNKNOWN_TOPIC: asked again)
        out = []
        for n in c.brokers.values():
            try:
                with c.admin(n.bootstrap) as admin:
                    d = admin.describe_topics(["kr-one"])["kr-one"]
            except Exception:
                return None
            out.append(sorted((p.partition, p.leader, tuple(p.replicas)) for p in d.partitions))
        return out if out[0] == out[1] == out[2] else None
    views = wait_until(views, "the same kr-one from every broker", 30)
    assert {leader for _, leader, _ in views[0]} == {1, 2, 3}
    # produced through one broker, consumed through another
    p = Producer({"bootstrap.servers": c.nodes[2].bootstrap, "acks": "all", "enable.idempotence": True, **QUIET})
    for i in range(300):
        p.produce("kr-one", key=str(i).encode(), value=f"v{i}".encode())
    assert p.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": c.nodes[3].bootstrap, "group.id": "kr-g", "auto.offset.reset": "earliest",
                         **QUIET})
    consumer.subscribe(["kr-one"])
    got = set()
    deadline = time.monotonic() + 60
    while len(got) < 300 and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and not m.error():
            got.add(m.value())
    consumer.close()
    assert got == {f"v{i}".encode() for i in range(300)}
    # Kafka's own tools: the quorum through a broker (DescribeQuorum forwarded) and a controller
    for flag, address in (("--bootstrap-server", c.nodes[1].bootstrap),
                          ("--bootstrap-controller", f"127.0.0.1:{c.nodes[2].controller_port}")):
        r = run_tool("org.apache.kafka.tools.MetadataQuorumCommand", flag, address, "describe", "--status")
        assert r.returncode == 0, r.stderr
        lines = dict(line.split(":", 1) for line in r.stdout.splitlines() if ":" in line)
        assert lines["ClusterId"].strip() == "MkU3OEVBNTcwNTJENDM2Qg"
        assert int(lines["LeaderId"]) in (1, 2, 3)
        assert '"id": 1' in lines["CurrentVoters"] and '"id": 3' in lines["CurrentVoters"]
    r = run_tool(TOOLS["kafka-topics"], "--bootstrap-server", c.nodes[3].bootstrap, "--describe", "--topic", "kr-one")
    assert r.returncode == 0, r.stderr
    assert "PartitionCount: 6" in r.stdout and "ReplicationFactor: 3" in r.stdout


class _Acks(threading.Thread):
    """An acks=all idempotent producer writing numbered values until stopped; what was acknowledged."""

    def __init__(self, bootstrap: str, topic: str):
        super().__init__(daemon=True)
        self.topic = topic
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                  "linger.ms": 5, "message.timeout.ms": 120000, **QUIET})
        self.acked: dict[int, list[tuple[int, bytes]]] = defaultdict(list)   # partition -> (offset, value)
        self.last_ack = 0.0
        self.errors: list[str] = []
        self.stopping = threading.Event()

    def _done(self, err, msg) -> None:
        if err is not None:
            self.errors.append(str(err))
        else:
            self.acked[msg.partition()].append((msg.offset(), msg.value()))
            self.last_ack = time.monotonic()

    def run(self) -> None:
        i = 0
        while not self.stopping.is_set():
            try:
                self.producer.produce(self.topic, value=f"r{i}".encode(), partition=i % 3, on_delivery=self._done)
                i += 1
            except BufferError:
                pass
            self.producer.poll(0.002)
        self.producer.flush(120)

    def count(self) -> int:
        return sum(len(v) for v in self.acked.values())


def _read_all(bootstrap: str, topic: str, ends: dict[int, int]) -> dict[int, list[tuple[int, bytes]]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.monotonic()}",
                         "enable.auto.commit": False, **QUIET})
    consumer.assign([TopicPartition(topic, p, 0) for p in ends])
    out: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
    deadline = time.monotonic() + 90
    while any((out[p][-1][0] + 1 if out[p] else 0) < ends[p] for p in ends) and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and not m.error():
            out[m.partition()].append((m.offset(), m.value()))
    consumer.close()
    return out


def _data_batches(c: KRaftCluster, topic: str, partition: int) -> dict[int, list]:
    return {i: [(b, last, crc) for b, last, _, crc, _ in batches(n.data_dir / f"{topic}-{partition}")]
            for i, n in c.brokers.items()}


def test_active_controller_sigkilled_under_load_loses_nothing_acknowledged(combined):
    c = combined
    _create(c.bootstrap, "kr-all", 3, 3, **{"min.insync.replicas": "2"})
    wait_until(lambda: _whole(c, "kr-all"), "kr-all led with full ISRs", 30)
    load = _Acks(c.bootstrap, "kr-all")
    load.start()
    try:
        wait_until(lambda: load.count() > 500, "records acknowledged", 60)
        before = wait_until(c.quorum, "an active controller", 30)
        victim = before["leader_id"]
        c.nodes[victim].kill()
        killed_at = time.monotonic()
        # a new active controller in a higher epoch; the dead broker fenced and its partitions moved
        after = wait_until(lambda: (q := c.quorum()) and q["leader_id"] != victim and q, "a new active controller", 30)
        assert after["leader_epoch"] > before["leader_epoch"]
        wait_until(lambda: victim not in c.registered(), "the killed broker fenced", 30)
        wait_until(lambda: all(leader not in (victim, None, -1) and victim not in isr
                               for leader, _, isr in c.partitions("kr-all").values()),
                   "kr-all led by the others, the killed broker out of its ISRs", 30)
        wait_until(lambda: load.last_ack > killed_at + 1, "acknowledgements after the kill", 60)
        c.nodes[victim].start()
        wait_until(lambda: _whole(c, "kr-all"), "the restarted node back in every ISR", 60)
        wait_until(lambda: load.last_ack > time.monotonic() - 1, "acknowledgements with the node back", 60)
    finally:
        load.stopping.set()
        load.join(150)
    assert load.count() > 500
    ends = {p: max(o for o, _ in acked) + 1 for p, acked in load.acked.items()}
    read = _read_all(c.bootstrap, "kr-all", ends)
    for p, acked in load.acked.items():
        at = dict(read[p])
        lost = [(o, v) for o, v in acked if at.get(o) != v]
        assert not lost, f"partition {p}: {len(lost)} acknowledged records lost or moved, e.g. {lost[:3]}"
        values = [v for _, v in read[p]]
        assert len(values) == len(set(values)), f"partition {p}: duplicates"
    # the replicas' logs end identical (once the restarted one caught up)
    for p in range(3):
        wait_until(lambda: len({tuple(v) for v in _data_batches(c, "kr-all", p).values()}) == 1,
                   f"kr-all-{p} identical on every replica", 60)
    # and the metadata logs: every node's committed prefix the same
    hw = wait_until(c.quorum, "an active controller", 30)["high_watermark"]
    logs = {i: [b for b in batches(n.data_dir / "__cluster_metadata-0") if b[1] < hw] for i, n in c.nodes.items()}
    assert logs[1] == logs[2] == logs[3]


def test_sigterm_moves_leadership_off_before_exiting(combined):
    c = combined
    _create(c.bootstrap, "kr-term", 3, 3)
    wait_until(lambda: _whole(c, "kr-term"), "kr-term led with full ISRs", 30)
    parts = c.partitions("kr-term")
    node = next(i for i in (1, 2, 3) if any(leader == i for leader, _, _ in parts.values()))
    c.nodes[node].stop(30)
    assert c.nodes[node].proc.returncode == 0
    assert "controlled shutdown of broker" in c.nodes[node].log_text()
    assert "leadership moved" in c.nodes[node].log_text()
    # at once: nothing led by it, and it is out of every ISR (no session timeout to wait for)
    parts = c.partitions("kr-term")
    assert all(leader != node and node not in isr for leader, _, isr in parts.values()), parts
    c.nodes[node].start()
    wait_until(lambda: _whole(c, "kr-term"), "the node back in every ISR", 60)


def test_controllers_apart_from_brokers(tmp_path):
    c = KRaftCluster(tmp_path, combined=0, controllers=3, brokers=2)
    try:
        c.start()
        assert c.registered() == [101, 102]
        view = wait_until(lambda: (q := c.quorum()) and len(q["observers"]) == 2 and q, "two observers", 30)
        assert sorted(o["replica_id"] for o in view["observers"]) == [101, 102]
        _create(c.bootstrap, "kr-apart", 4, 2)
        wait_until(lambda: _whole(c, "kr-apart", 2), "kr-apart led with full ISRs", 30)
        p = Producer({"bootstrap.servers": c.nodes[101].bootstrap, "acks": "all", **QUIET})
        for i in range(100):
            p.produce("kr-apart", value=f"a{i}".encode(), partition=i % 4)
        assert p.flush(30) == 0
        read = _read_all(c.nodes[102].bootstrap, "kr-apart", {q: 25 for q in range(4)})
        assert sorted(v for q in read.values() for _, v in q) == sorted(f"a{i}".encode() for i in range(100))
        r = run_tool("org.apache.kafka.tools.MetadataQuorumCommand", "--bootstrap-controller",
                     f"127.0.0.1:{c.nodes[1].controller_port}", "describe", "--replication")
        assert r.returncode == 0, r.stderr
        rows = [line.split() for line in r.stdout.splitlines()[1:] if line.strip()]
        assert sorted(row[-1] for row in rows) == ["Follower", "Follower", "Leader", "Observer", "Observer"]
    finally:
        c.stop()


def test_acls_quotas_and_scram_users_are_cluster_metadata(combined):
    """Written through one broker, decided by the active controller, in force on every broker."""
    c = combined
    _create(c.bootstrap, "kr-secret", 1, 3)
    admin1 = AdminClient({"bootstrap.servers": c.nodes[1].bootstrap, **QUIET})
    alice = AclBinding(ResourceType.TOPIC, "kr-secret", ResourcePatternType.LITERAL, "User:alice", "*",
                       AclOperation.WRITE, AclPermissionType.ALLOW)
    for f in admin1.create_acls([alice]).values():
        f.result(30)

    admins = {i: AdminClient({"bootstrap.servers": n.bootstrap, **QUIET}) for i, n in c.nodes.items()}

    def acls_on(node: int) -> list:
        return admins[node].describe_acls(AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                                AclOperation.ANY, AclPermissionType.ANY)).result(30)
    wait_until(lambda: acls_on(3) == [alice], "the ACL on broker 3", 30)
    # in force on another broker: ANONYMOUS may not write kr-secret any more (it has ACLs now)
    refused = []
    p = Producer({"bootstrap.servers": c.nodes[2].bootstrap, "message.timeout.ms": 10000, **QUIET})

    def produced():
        refused.clear()
        p.produce("kr-secret", b"x", on_delivery=lambda err, _: refused.append(err))
        p.flush(15)
        return refused and refused[0] is not None and refused[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    wait_until(produced, "broker 2 to refuse ANONYMOUS on kr-secret", 30)
    deleted = admins[3].delete_acls([AclBindingFilter(
        ResourceType.TOPIC, "kr-secret", ResourcePatternType.LITERAL, None, None, AclOperation.ANY,
        AclPermissionType.ANY)])
    assert [b for f in deleted.values() for b in f.result(30)] == [alice]
    wait_until(lambda: acls_on(1) == [], "the ACL gone on broker 1", 30)

    # client quotas through broker 2, seen through broker 3
    with c.admin(c.nodes[2].bootstrap) as admin:
        admin.alter_client_quotas([({"user": "alice"}, {"producer_byte_rate": 1048576.0}),
                                   ({"client-id": None}, {"request_percentage": 200.0})])

    def quotas():
        with c.admin(c.nodes[3].bootstrap) as admin:
            return sorted((sorted(e.items(), key=str), q) for e, q in admin.describe_client_quotas())
    wait_until(lambda: quotas() == [([("client-id", None)], {"request_percentage": 200.0}),
                                    ([("user", "alice")], {"producer_byte_rate": 1048576.0})],
               "the quotas on broker 3", 30)

    # a SCRAM user through broker 3, described through broker 1
    admin3 = AdminClient({"bootstrap.servers": c.nodes[3].bootstrap, **QUIET})
    up = UserScramCredentialUpsertion("bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192), b"secret")
    for f in admin3.alter_user_scram_credentials([up]).values():
        f.result(30)

    def scram_users():
        d = admin1.describe_user_scram_credentials().result(30)
        return {u: [(i.mechanism, i.iterations) for i in desc.scram_credential_infos] for u, desc in d.items()}
    wait_until(lambda: scram_users() == {"bob": [(ScramMechanism.SCRAM_SHA_256, 8192)]}, "bob on broker 1", 30)


def test_features_and_describe_topic_partitions_from_the_metadata_log(combined):
    """Every broker reports the features the metadata log finalized (ApiVersions: the image's
    FeatureLevelRecords, as ``storage format`` wrote them) and serves DescribeTopicPartitions:
    Kafka 4.4.0's ``kafka-features describe`` and ``kafka-topics --describe`` (Elr columns)."""
    from kafka_tools import finalized_features, kafka_tool
    c = combined
    live = [n for n in c.brokers.values() if n.alive]
    levels = [finalized_features(n.bootstrap)[0] for n in live]
    assert all(lv == levels[0] for lv in levels) and levels[0]["metadata.version"] == 33, levels
    assert levels[0]["transaction.version"] == 2
    rc, lines = kafka_tool("kafka-features", live[0].bootstrap, "describe")
    assert rc == 0 and any(ln.startswith("Feature: transaction.version") and "FinalizedVersionLevel: 2" in ln
                           for ln in lines), lines
    _create(live[-1].bootstrap, "kr-dtp", 2, 3)
    wait_until(lambda: _whole(c, "kr-dtp"), "kr-dtp led with full ISRs", 30)
    rc, lines = kafka_tool("kafka-topics", live[0].bootstrap, "--describe", "--topic", "kr-dtp")
    assert rc == 0 and len(lines) == 3 and all(ln.endswith("\tElr: \tLastKnownElr:") for ln in lines[1:]), lines
    # kafka-features downgrade through one broker: decided by the active controller, seen by every broker
    rc, lines = kafka_tool("kafka-features", live[1].bootstrap, "downgrade", "--feature", "transaction.version=1")
    assert rc == 0, lines
    wait_until(lambda: all(finalized_features(n.bootstrap)[0]["transaction.version"] == 1 for n in live),
               "transaction.version 1 on every broker", 30)
    rc, lines = kafka_tool("kafka-features", live[2].bootstrap, "upgrade", "--feature", "transaction.version=2")
    assert rc == 0, lines
    wait_until(lambda: all(finalized_features(n.bootstrap)[0]["transaction.version"] == 2 for n in live),
               "transaction.version 2 again on every broker", 30)


def test_snapshots_let_the_log_go_and_a_lagging_node_fetches_one(tmp_path):
    """KIP-630: each node writes snapshots of its image; the log before one is let go; a node that
    was down meanwhile gets the snapshot with FetchSnapshot (its fetch offset is no longer in the
    leader's log); a restarted node starts from its own snapshot; Kafka's kafka-dump-log and
    kafka-metadata-shell read one (the shell at 4.3.0, the newest served here: the cluster is formatted
    at that release, metadata.version 4.3-IV0, which it knows)."""
    c = KRaftCluster(tmp_path, combined=3, format_args=("--release-version", "4.3"),
                     **{"metadata.log.max.record.bytes.between.snapshots": "4096"})
    try:
        c.start()
        c.nodes[3].kill()
        for i in range(8):   # metadata written while node 3 is down
            _create(c.nodes[1].bootstrap, f"snap-{i}", 2, 2)

        def snapshot_ends(node) -> list[int]:
            return sorted(int(p.name.split("-")[0]) for p in (node.data_dir / "__cluster_metadata-0").glob("*.checkpoint")
                          if int(p.name.split("-")[0]) > 0)
        down_end = max(b[1] for b in batches(c.nodes[3].data_dir / "__cluster_metadata-0")) + 1
        wait_until(lambda: all(snapshot_ends(c.nodes[i]) and snapshot_ends(c.nodes[i])[-1] > down_end
                               for i in (1, 2)), "snapshots past node 3's log end on nodes 1 and 2", 60)
        # the leader's log now starts at its snapshot: node 3's next fetch is answered with a SnapshotId
        c.nodes[3].start()
        c.nodes[3].wait_serving()
        wait_until(lambda: "installed snapshot" in c.nodes[3].log_text(), "node 3 to install a fetched snapshot", 60)
        wait_until(lambda: c.registered() == [1, 2, 3], "node 3 registered again", 60)
        md = AdminClient({"bootstrap.servers": c.nodes[3].bootstrap, **QUIET}).list_topics(timeout=10)
        assert {f"snap-{i}" for i in range(8)} <= set(md.topics)
        # a restarted node starts from its own latest snapshot
        c.nodes[1].stop(30)
        c.nodes[1].start()
        c.nodes[1].wait_serving()
        assert "loaded snapshot" in c.nodes[1].log_text()
        wait_until(lambda: c.registered() == [1, 2, 3], "node 1 registered again", 60)
        md = AdminClient({"bootstrap.servers": c.nodes[1].bootstrap, **QUIET}).list_topics(timeout=10)
        assert {f"snap-{i}" for i in range(8)} <= set(md.topics)
        # Kafka's dump-log reads a Samsa snapshot
        newest = sorted((c.nodes[2].data_dir / "__cluster_metadata-0").glob("*.checkpoint"))[-1]
        snap = tmp_path / newest.name    # a copy: a newer snapshot may replace it meanwhile
        shutil.copyfile(newest, snap)
        r = run_tool(TOOLS["kafka-dump-log"], "--cluster-metadata-decoder", "--files", str(snap))
        assert r.returncode == 0 and "Exception" not in r.stdout + r.stderr, r.stdout + r.stderr
        assert '"type":"TOPIC_RECORD"' in r.stdout and '"name":"snap-7"' in r.stdout
        assert "SnapshotHeader" in r.stdout and "SnapshotFooter" in r.stdout
        shell = ["java", "-cp", connect_plugins_classpath(), "org.apache.kafka.shell.MetadataShell", "--snapshot",
                 str(snap)]

        def shell_ls(path: str) -> list[str]:   # its own log lines ("... ERROR ... Ignoring control record") apart
            r = subprocess.run([*shell, "ls", path], capture_output=True, text=True, timeout=300)
            assert r.returncode == 0 and "shell fault" not in r.stdout + r.stderr, r.stdout + r.stderr[-2000:]
            return [ln.strip() for ln in r.stdout.splitlines() if ln.strip() and "] " not in ln]
        # (the shell answers a command given on its command line at times before its image is loaded:
        # an empty listing, asked again)
        wait_until(lambda: {f"snap-{i}" for i in range(8)} <= set(shell_ls("/image/topics/byName")),
                   "kafka-metadata-shell to list the topics", 600)
        wait_until(lambda: shell_ls("/image/cluster/brokers") == ["1", "2", "3"],
                   "kafka-metadata-shell to list the brokers", 600)
    finally:
        c.stop()


def test_transactions_in_a_kraft_cluster(combined):
    """Producer ids from the controller (AllocateProducerIds), __transaction_state created through it:
    a transaction committed and one aborted, a read_committed consumer through another broker."""
    c = combined
    _create(c.bootstrap, "kr-txn", 3, 3)
    p = Producer({"bootstrap.servers": c.nodes[1].bootstrap, "transactional.id": "kr-tx", **QUIET})
    p.init_transactions(60)
    p.begin_transaction()
    for i in range(30):
        p.produce("kr-txn", value=f"ok-{i}".encode(), partition=i % 3)
    p.commit_transaction(60)
    p.begin_transaction()
    for i in range(30):
        p.produce("kr-txn", value=f"no-{i}".encode(), partition=i % 3)
    p.abort_transaction(60)
    consumer = Consumer({"bootstrap.servers": c.nodes[3].bootstrap, "group.id": "kr-txn-g",
                         "isolation.level": "read_committed", "auto.offset.reset": "earliest", **QUIET})
    consumer.subscribe(["kr-txn"])
    got = []
    deadline = time.monotonic() + 60
    while len(got) < 30 and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and not m.error():
            got.append(m.value())
    extra = consumer.poll(2)
    consumer.close()
    assert sorted(got) == sorted(f"ok-{i}".encode() for i in range(30))
    assert extra is None or extra.error() is not None
