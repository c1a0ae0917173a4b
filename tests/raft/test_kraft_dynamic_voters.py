"""KRaft dynamic voters (KIP-853) between real Samsa processes over TCP, operated with Apache
Kafka 4.4.0's own ``kafka-metadata-quorum``: a controller formatted ``--standalone``, two more
formatted ``--no-initial-controllers`` (observers until added) and a broker-only node, all with
``controller.quorum.bootstrap.servers`` alone; ``add-controller`` makes three voters,
``remove-controller`` takes one out, the answers to bad changes are Kafka's error codes, the
active controller SIGKILLed leaves two that elect a new leader while the broker keeps serving,
and the killed controller restarted on another port tells the leader (UpdateRaftVoter). Then the
same bad changes against an Apache Kafka 4.4.0 controller formatted ``--standalone``: the same
error codes; and a Samsa controller added to that Kafka quorum by Kafka's add-controller. One
Samsa cluster for the module; the tests run in order."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

import kafka_process
import one_request
from broker_process import free_port
from kraft_nodes import Node
from raft_processes import describe_quorum
from samsa.protocol import errors
from samsa.protocol.api_keys import ApiKey
from samsa.storage.kraft import decode_snapshot, parse_uuid, read_meta_props
from waiting import wait_until

if not kafka_process.available():
    pytest.skip("java or Kafka 4.4.0's jars missing (kafka-metadata-quorum)", allow_module_level=True)

QUORUM_TOOL = "org.apache.kafka.tools.MetadataQuorumCommand"
QUIET = {"log_level": 0, "logger": lambda *a: None}
# One broker: what Samsa's test settings replicate three times is replicated once here.
ONE_BROKER = {"default.replication.factor": "1", "offsets.topic.replication.factor": "1",
              "transaction.state.log.replication.factor": "1", "transaction.state.log.min.isr": "1"}


class Quorum:
    """Controllers 1-3 and broker 101, each given the three controllers as bootstrap servers."""

    def __init__(self, root: Path):
        self.cports = {i: free_port() for i in (1, 2, 3)}
        self.bootstrap_servers = ",".join(f"127.0.0.1:{p}" for p in self.cports.values())
        # Snapshots often (KIP-630): the voter set travels in them too (the new controllers may
        # start from the leader's, the restarted one from its own).
        extra = {"controller.quorum.bootstrap.servers": self.bootstrap_servers, **ONE_BROKER,
                 "metadata.log.max.record.bytes.between.snapshots": "4096"}
        self.nodes = {i: Node(root / f"c{i}", i, "controller", "", None, self.cports[i],
                              ("--standalone",) if i == 1 else ("--no-initial-controllers",), **extra)
                      for i in (1, 2, 3)}
        self.nodes[101] = Node(root / "b101", 101, "broker", "", free_port(), None, (), **extra)
        self.broker = self.nodes[101]

    def directory_id(self, i: int) -> str:
        return read_meta_props(self.nodes[i].data_dir)["directory.id"]

    def quorum(self) -> dict | None:
        """The active controller's DescribeQuorum answer, or None."""
        for i, n in self.nodes.items():
            if i > 100 or not n.alive:
                continue
            try:
                part = describe_quorum(n.controller_port, timeout_ms=2000)
            except Exception:
                continue
            if part["error_code"] == 0 and part["leader_id"] == i:
                return part
        return None

    def voters(self) -> list[int]:
        q = self.quorum()
        return sorted(v["replica_id"] for v in q["current_voters"]) if q else []

    def observers(self) -> list[int]:
        q = self.quorum()
        return sorted(v["replica_id"] for v in q["observers"]) if q else []

    def tool(self, *args: str, through_broker: bool = False):
        """kafka-metadata-quorum with --bootstrap-controller (the active controller), or with
        --bootstrap-server (the broker, which forwards to the active controller)."""
        if through_broker:
            return kafka_process.run_tool(QUORUM_TOOL, "--bootstrap-server", self.broker.bootstrap, *args)
        i = (self.quorum() or {}).get("leader_id", 1)
        return kafka_process.run_tool(QUORUM_TOOL, "--bootstrap-controller",
                                      f"127.0.0.1:{self.nodes[i].controller_port}", *args)

    def stop(self) -> None:
        for n in self.nodes.values():
            n.kill()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    q = Quorum(tmp_path_factory.mktemp("dynamic-voters"))
    try:
        for n in q.nodes.values():
            n.start()
        for n in q.nodes.values():
            n.wait_serving()
        yield q
    finally:
        q.stop()


def ask(port: int, key: int, body: dict, version: int = 0) -> dict:
    return one_request.round_trip(f"127.0.0.1:{port}", key, version, body, timeout=20)


def add_voter(cluster_id: str, voter: int, directory_id: bytes, port: int, timeout_ms: int = 5000) -> dict:
    return {"cluster_id": cluster_id, "timeout_ms": timeout_ms, "voter_id": voter, "voter_directory_id": directory_id,
            "listeners": [{"name": "CONTROLLER", "host": "127.0.0.1", "port": port}]}


def remove_voter(cluster_id: str, voter: int, directory_id: bytes) -> dict:
    return {"cluster_id": cluster_id, "voter_id": voter, "voter_directory_id": directory_id}


def _replication(c: Quorum) -> dict[int, str]:
    r = c.tool("describe", "--replication")
    assert r.returncode == 0, r.stderr
    rows = [line.split() for line in r.stdout.splitlines()[1:] if line.strip()]
    return {int(row[0]): row[-1] for row in rows}


def _status_voters(c: Quorum) -> list[dict]:
    r = c.tool("describe", "--status")
    assert r.returncode == 0, r.stderr
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("CurrentVoters:"))
    return json.loads(line.split(":", 1)[1])


def _add_controller(c: Quorum, i: int, through_broker: bool = False) -> None:
    """Kafka's add-controller with the new controller's server.properties, once it is a caught-up
    observer (until then the leader answers REQUEST_TIMED_OUT, and the tool fails)."""
    wait_until(lambda: i in c.observers(), f"controller {i} fetching as an observer", 30)
    out = []

    def added() -> bool:
        r = c.tool("--command-config", str(c.nodes[i].conf), "add-controller", through_broker=through_broker)
        out.append(r)
        return r.returncode == 0
    wait_until(added, f"kafka-metadata-quorum add-controller of {i}", 90)
    assert re.search(rf"Added controller {i} with directory id {c.directory_id(i)} and endpoints: "
                     rf"CONTROLLER://127.0.0.1:{c.nodes[i].controller_port}", out[-1].stdout), out[-1].stdout


def test_kafkas_add_controller_grows_a_standalone_controller_to_three_voters(cluster):
    c = cluster
    wait_until(lambda: c.voters() == [1], "controller 1, formatted --standalone, leading alone", 30)
    _add_controller(c, 2)
    _add_controller(c, 3)
    assert c.voters() == [1, 2, 3]
    roles = _replication(c)
    assert sorted(roles[i] for i in (1, 2, 3)) == ["Follower", "Follower", "Leader"]
    assert roles.get(101) == "Observer"
    voters = _status_voters(c)
    assert [(v["id"], v["directoryId"], v["endpoints"]) for v in voters] == [
        (i, c.directory_id(i), [f"CONTROLLER://127.0.0.1:{c.cports[i]}"]) for i in (1, 2, 3)]


def test_a_broker_finds_the_quorum_through_the_bootstrap_servers_and_serves(cluster):
    c = cluster
    admin = AdminClient({"bootstrap.servers": c.broker.bootstrap, **QUIET})
    wait_until(lambda: [b.id for b in admin.describe_cluster().result(10).nodes] == [101],
               "broker 101 registered and unfenced", 60)
    _produce_and_read(c, "dv-before")


def _produce_and_read(c: Quorum, topic: str, n: int = 50) -> None:
    admin = AdminClient({"bootstrap.servers": c.broker.bootstrap, **QUIET})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(60)
    p = Producer({"bootstrap.servers": c.broker.bootstrap, "acks": "all", **QUIET})
    for k in range(n):
        p.produce(topic, value=f"{topic}-{k}".encode(), partition=k % 2)
    assert p.flush(60) == 0
    consumer = Consumer({"bootstrap.servers": c.broker.bootstrap, "group.id": f"g-{topic}",
                         "auto.offset.reset": "earliest", **QUIET})
    consumer.subscribe([topic])
    got: list[bytes] = []
    try:
        def read() -> bool:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                got.append(msg.value())
            return len(got) >= n
        wait_until(read, f"{n} records of {topic} read back", 60)
    finally:
        consumer.close()
    assert sorted(got) == sorted(f"{topic}-{k}".encode() for k in range(n))


CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"
OTHER_DIR = bytes(range(16))


def bad_changes(leader: int, leader_dir: bytes, leader_port: int, epoch: int) -> list[tuple[str, int, dict]]:
    """Voter changes a leader refuses, with what Kafka 4.4.0 answers each (checked against it below)."""
    cid = CLUSTER_ID
    update = {"cluster_id": cid, "current_leader_epoch": epoch, "voter_id": leader, "voter_directory_id": leader_dir,
              "listeners": [{"name": "CONTROLLER", "host": "127.0.0.1", "port": leader_port}],
              "k_raft_version_feature": {"min_supported_version": 0, "max_supported_version": 1}}
    return [
        ("a voter added again", ApiKey.ADD_RAFT_VOTER, add_voter(cid, leader, leader_dir, leader_port)),
        ("an unknown voter removed", ApiKey.REMOVE_RAFT_VOTER, remove_voter(cid, 9, OTHER_DIR)),
        ("a voter removed by another directory id", ApiKey.REMOVE_RAFT_VOTER, remove_voter(cid, leader, OTHER_DIR)),
        ("a replica that is not an observer added", ApiKey.ADD_RAFT_VOTER, add_voter(cid, 7, OTHER_DIR, 1)),
        ("another cluster's", ApiKey.ADD_RAFT_VOTER, add_voter("another-cluster", 7, OTHER_DIR, 1)),
        ("no endpoint for the controller listener", ApiKey.ADD_RAFT_VOTER,
         {**add_voter(cid, 7, OTHER_DIR, 1), "listeners": []}),
        ("an unknown voter updated", ApiKey.UPDATE_RAFT_VOTER, {**update, "voter_id": 9}),
        ("an update in an old epoch", ApiKey.UPDATE_RAFT_VOTER, {**update, "current_leader_epoch": epoch - 1}),
    ]


#: What Apache Kafka 4.4.0's controller answers each of ``bad_changes`` (test_kafka_gives_the_same_errors).
EXPECTED = {
    "a voter added again": errors.E_DUPLICATE_VOTER,
    "an unknown voter removed": errors.E_VOTER_NOT_FOUND,
    "a voter removed by another directory id": errors.E_VOTER_NOT_FOUND,
    "a replica that is not an observer added": errors.E_REQUEST_TIMED_OUT,
    "another cluster's": errors.E_INCONSISTENT_CLUSTER_ID,
    "no endpoint for the controller listener": errors.E_INVALID_REQUEST,
    "an unknown voter updated": errors.E_VOTER_NOT_FOUND,
    "an update in an old epoch": errors.E_FENCED_LEADER_EPOCH,
}


def answers(port: int, leader: int, leader_dir: bytes, epoch: int) -> dict[str, int]:
    return {what: ask(port, key, body)["error_code"]
            for what, key, body in bad_changes(leader, leader_dir, port, epoch)}


def test_bad_voter_changes_get_kafkas_errors(cluster):
    c = cluster
    q = c.quorum()
    leader = q["leader_id"]
    port = c.nodes[leader].controller_port
    assert answers(port, leader, parse_uuid(c.directory_id(leader)), q["leader_epoch"]) == EXPECTED
    follower = next(i for i in (1, 2, 3) if i != leader)
    assert ask(c.nodes[follower].controller_port, ApiKey.REMOVE_RAFT_VOTER,
               remove_voter(CLUSTER_ID, 3, parse_uuid(c.directory_id(3))))["error_code"] == \
        errors.E_NOT_LEADER_OR_FOLLOWER


def test_kafkas_remove_controller_takes_a_voter_out(cluster):
    """Through the broker (--bootstrap-server), which forwards to the active controller, as Kafka's do."""
    c = cluster
    r = c.tool("remove-controller", "--controller-id", "3", "--controller-directory-id", c.directory_id(3),
               through_broker=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert c.voters() == [1, 2]
    wait_until(lambda: 3 in c.observers(), "controller 3 fetching on as an observer", 30)
    assert _replication(c)[3] == "Observer"
    _add_controller(c, 3, through_broker=True)           # and back, for what follows
    assert c.voters() == [1, 2, 3]


def test_the_active_controller_killed_two_voters_go_on_and_a_moved_one_updates_its_endpoint(cluster):
    c = cluster
    before = c.quorum()
    old = before["leader_id"]
    c.nodes[old].kill()
    after = wait_until(lambda: (q := c.quorum()) and q["leader_id"] != old and q, "a new leader of the two left", 60)
    assert after["leader_epoch"] > before["leader_epoch"]
    assert sorted(v["replica_id"] for v in after["current_voters"]) == [1, 2, 3]
    _produce_and_read(c, "dv-after")        # a new topic: the broker found the new active controller
    # The killed controller back on another port: it tells the leader (UpdateRaftVoter).
    n = c.nodes[old]
    new_port = free_port()
    n.conf.write_text(n.conf.read_text().replace(f"CONTROLLER://127.0.0.1:{n.controller_port}",
                                                 f"CONTROLLER://127.0.0.1:{new_port}"))
    n.controller_port = new_port
    n.start()
    n.wait_serving()

    def moved() -> bool:
        eps = {v["id"]: v["endpoints"] for v in _status_voters(c)}
        return eps.get(old) == [f"CONTROLLER://127.0.0.1:{new_port}"]
    wait_until(moved, f"controller {old}'s new endpoint in the voter set", 60)
    assert "UpdateRaftVoter to leader" in n.log_text()
    # The snapshots the controllers wrote carry the voter set in force at their offset (KRaftVoters),
    # which the restarted one started from: {1, 2} while 3 was out, {1, 2, 3} after.
    snaps = [p for p in (c.nodes[old].data_dir / "__cluster_metadata-0").glob("*.checkpoint")
             if not p.name.startswith("00000000000000000000-")]
    assert snaps, "no snapshot written"
    for snap in snaps:
        voters = decode_snapshot(snap.read_bytes()).voters
        assert voters is not None and sorted(v["voter_id"] for v in voters) in ([1, 2], [1, 2, 3]), snap.name
        assert all(v["voter_directory_id"] == parse_uuid(c.directory_id(v["voter_id"])) for v in voters)


def test_a_kafka_controller_answers_alike_and_adds_a_samsa_controller(tmp_path):
    """The same bad changes against an Apache Kafka 4.4.0 controller formatted --standalone: the
    same error codes. Then a Samsa controller formatted --no-initial-controllers, given Kafka's as
    bootstrap server, follows it as an observer and Kafka's add-controller makes it a voter of
    Kafka's quorum (Kafka's leader first asks its ApiVersions for kraft.version)."""
    port = free_port()
    kafka = kafka_process.KafkaProcess(tmp_path / "kafka", controller_port=port, cluster_id=CLUSTER_ID)
    kafka.props = {"process.roles": "controller", "node.id": "1", "listeners": f"CONTROLLER://127.0.0.1:{port}",
                   "controller.listener.names": "CONTROLLER", "listener.security.protocol.map": "CONTROLLER:PLAINTEXT",
                   "controller.quorum.bootstrap.servers": f"127.0.0.1:{port}", "log.dirs": str(tmp_path / "kafka-logs")}
    kafka.format_args = ("--standalone",)
    samsa = Node(tmp_path / "samsa", 2, "controller", "", None, free_port(), ("--no-initial-controllers",),
                 **{"controller.quorum.bootstrap.servers": f"127.0.0.1:{port}"})
    try:
        kafka.spawn()
        samsa.start()
        q = wait_until(lambda: (d := describe_quorum(port, timeout_ms=2000)) and d["high_watermark"] > 0 and d,
                       "Kafka's controller leading with a committed offset", 120)
        directory = parse_uuid(read_meta_props(tmp_path / "kafka-logs")["directory.id"])
        assert answers(port, 1, directory, q["leader_epoch"]) == EXPECTED

        def observing() -> bool:
            obs = describe_quorum(port, timeout_ms=2000)["observers"]
            return any(o["replica_id"] == 2 and o["log_end_offset"] > 0 for o in obs)
        wait_until(observing, "Samsa's controller fetching from Kafka's as an observer", 60)
        tool = ("--bootstrap-controller", f"127.0.0.1:{port}")
        wait_until(lambda: kafka_process.run_tool(QUORUM_TOOL, *tool, "--command-config", str(samsa.conf),
                                                  "add-controller").returncode == 0,
                   "Kafka's add-controller of Samsa's controller", 90)
        voters = describe_quorum(port, timeout_ms=2000)["current_voters"]
        assert sorted(v["replica_id"] for v in voters) == [1, 2]

        def following() -> bool:
            r = kafka_process.run_tool(QUORUM_TOOL, *tool, "describe", "--replication")
            rows = {int(row[0]): row[-1] for row in (ln.split() for ln in r.stdout.splitlines()[1:]) if row}
            return rows == {1: "Leader", 2: "Follower"}
        wait_until(following, "Samsa's controller a follower in Kafka's describe --replication", 60)
        # Samsa's controller took the voter set from the VotersRecord Kafka's leader wrote
        assert re.search(rf"voter set at offset \d+: 1@\('127.0.0.1', {port}\), 2@", samsa.log_text())
    finally:
        samsa.kill()
        kafka.stop()
