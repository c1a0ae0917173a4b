"""DescribeQuorum (55) and DescribeCluster (60, controller endpoints) on a KRaft controller
listener, and the Raft RPCs' answers to bad input (another cluster's id, another topic or
partition): Apache Kafka 4.4.0's controller and Samsa's (``process.roles=controller``, one voter),
the same requests, the answers compared after normalising what differs by run (epochs, offsets,
times, ports)."""

from __future__ import annotations

import re
import os
import subprocess
import sys
from pathlib import Path

import pytest

import one_request
from broker_process import ROOT, ChildProcess, free_port, wait_for_port
from waiting import wait_until
from samsa.protocol.api_keys import ApiKey

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"

if os.environ.get("SAMSA_DIFF_SIDE", "both") == "samsa":
    pytest.skip("SAMSA_DIFF_SIDE=samsa: Kafka's side is not run", allow_module_level=True)
import kafka_process  # noqa: E402

if not kafka_process.available():
    pytest.skip("java or Kafka 4.4.0's jars missing", allow_module_level=True)


def _props(d: Path, port: int) -> dict[str, str]:
    return {"process.roles": "controller", "node.id": "1", "controller.quorum.voters": f"1@127.0.0.1:{port}",
            "listeners": f"CONTROLLER://127.0.0.1:{port}", "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT", "log.dirs": str(d / "logs")}


class SamsaController(ChildProcess):
    def __init__(self, d: Path):
        self.port = free_port()
        d.mkdir(parents=True, exist_ok=True)
        self.conf = d / "server.properties"
        self.conf.write_text("".join(f"{k}={v}\n" for k, v in _props(d, self.port).items()))
        self.log_path = d / "controller.log"

    def start(self) -> "SamsaController":
        r = subprocess.run([sys.executable, "-m", "samsa.cli.main", "storage", "format", "-t", CLUSTER_ID, "-c",
                            str(self.conf)], capture_output=True, text=True, cwd=ROOT, timeout=60)
        assert r.returncode == 0, r.stderr
        self.proc = subprocess.Popen([sys.executable, "-m", "samsa.cli.main", "server", "start", str(self.conf)],
                                     stdout=open(self.log_path, "ab"), stderr=subprocess.STDOUT, cwd=ROOT)
        wait_for_port(self.port, self.proc)
        return self


def ask(port: int, key: int, version: int, body: dict) -> dict:
    return one_request.round_trip(f"127.0.0.1:{port}", key, version, body)


def quorum_body(topic: str = "__cluster_metadata", partition: int = 0) -> dict:
    return {"topics": [{"topic_name": topic, "partitions": [{"partition_index": partition}]}]}


@pytest.fixture(scope="module")
def sides(tmp_path_factory):
    base = tmp_path_factory.mktemp("describe-quorum")
    kport = free_port()
    kafka = kafka_process.KafkaProcess(base / "kafka", controller_port=kport, cluster_id=CLUSTER_ID)
    kafka.props = _props(base / "kafka", kport)
    kafka.port = kport
    samsa = SamsaController(base / "samsa")
    try:
        kafka.spawn()
        samsa.start()
        for port in (kport, samsa.port):
            wait_until(lambda: ask(port, ApiKey.DESCRIBE_QUORUM, 2, quorum_body())["topics"][0]["partitions"][0]
                       ["high_watermark"] > 0, f"a leader with a committed offset on {port}", 120)
        yield {"kafka": kport, "samsa": samsa.port}
    finally:
        samsa.stop(10)
        kafka.stop()


def _norm(value, port: int):
    """Run-dependent values as their kind: positive numbers, timestamps, the port."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k in ("leader_epoch", "high_watermark", "log_end_offset") and isinstance(v, int) and v > 0:
                v = "<positive>"
            elif k in ("last_fetch_timestamp", "last_caught_up_timestamp") and isinstance(v, int) and v > 0:
                v = "<time>"
            elif k == "port" and v == port:
                v = "<port>"
            out[k] = _norm(v, port)
        return out
    if isinstance(value, list):
        return [_norm(v, port) for v in value]
    return value


CASES = {
    "v0": (ApiKey.DESCRIBE_QUORUM, 0, quorum_body()),
    "v1": (ApiKey.DESCRIBE_QUORUM, 1, quorum_body()),
    "v2": (ApiKey.DESCRIBE_QUORUM, 2, quorum_body()),
    "unknown-topic": (ApiKey.DESCRIBE_QUORUM, 2, quorum_body("other")),
    "unknown-partition": (ApiKey.DESCRIBE_QUORUM, 2, quorum_body(partition=1)),
    "unknown-partition-v0": (ApiKey.DESCRIBE_QUORUM, 0, quorum_body(partition=1)),
    "two-topics": (ApiKey.DESCRIBE_QUORUM, 2, {"topics": [quorum_body()["topics"][0], quorum_body("x")["topics"][0]]}),
    "describe-cluster-controllers": (ApiKey.DESCRIBE_CLUSTER, 1, {"include_cluster_authorized_operations": False,
                                                                  "endpoint_type": 2}),
}


def _vote(cluster_id="MkU3OEVBNTcwNTJENDM2Qg", topic="__cluster_metadata", partition=0) -> dict:
    return {"cluster_id": cluster_id, "voter_id": 1, "topics": [{"topic_name": topic, "partitions": [{
        "partition_index": partition, "replica_epoch": 0, "replica_id": 7, "replica_directory_id": bytes(16),
        "voter_directory_id": bytes(16), "last_offset_epoch": 0, "last_offset": 0, "pre_vote": True}]}]}


def _begin(cluster_id="MkU3OEVBNTcwNTJENDM2Qg", topic="__cluster_metadata") -> dict:
    return {"cluster_id": cluster_id, "voter_id": 1, "topics": [{"topic_name": topic, "partitions": [{
        "partition_index": 0, "voter_directory_id": bytes(16), "leader_id": 7, "leader_epoch": 0}]}],
        "leader_endpoints": []}


def _end(cluster_id="MkU3OEVBNTcwNTJENDM2Qg", topic="__cluster_metadata") -> dict:
    return {"cluster_id": cluster_id, "topics": [{"topic_name": topic, "partitions": [{
        "partition_index": 0, "leader_id": 7, "leader_epoch": 0, "preferred_candidates": []}]}],
        "leader_endpoints": []}


def _fetch(cluster_id="MkU3OEVBNTcwNTJENDM2Qg", topic_id=bytes(15) + b"\x01", replica_id=7) -> dict:
    return {"cluster_id": cluster_id, "replica_state": {"replica_id": replica_id, "replica_epoch": -1},
            "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0, "session_id": 0,
            "session_epoch": -1, "topics": [{"topic_id": topic_id, "partitions": [{
                "partition": 0, "current_leader_epoch": 0, "fetch_offset": 0, "last_fetched_epoch": -1,
                "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}], "forgotten_topics_data": [], "rack_id": ""}


# Bad input on the Raft RPCs: refused before any state changes, with Kafka's error codes.
CASES.update({
    "vote-other-cluster": (ApiKey.VOTE, 2, _vote(cluster_id="other")),
    "vote-other-topic": (ApiKey.VOTE, 2, _vote(topic="other")),
    "vote-other-partition": (ApiKey.VOTE, 2, _vote(partition=3)),
    "begin-other-cluster": (ApiKey.BEGIN_QUORUM_EPOCH, 1, _begin(cluster_id="other")),
    "begin-other-topic": (ApiKey.BEGIN_QUORUM_EPOCH, 1, _begin(topic="other")),
    "end-other-cluster": (ApiKey.END_QUORUM_EPOCH, 1, _end(cluster_id="other")),
    "end-other-topic": (ApiKey.END_QUORUM_EPOCH, 1, _end(topic="other")),
    "fetch-other-cluster": (ApiKey.FETCH, 17, _fetch(cluster_id="other")),
    "fetch-other-topic": (ApiKey.FETCH, 17, _fetch(topic_id=bytes(15) + b"\x07")),
})


def _register(broker_id=7, cluster_id=CLUSTER_ID, features=True, log_dir=b"\x5a" * 16) -> dict:
    ranges = {"metadata.version": (7, 33), "kraft.version": (0, 1), "group.version": (0, 1), "share.version": (0, 2),
              "streams.version": (0, 1), "transaction.version": (0, 2), "eligible.leader.replicas.version": (0, 1)}
    feats = [{"name": n, "min_supported_version": lo, "max_supported_version": hi} for n, (lo, hi) in ranges.items()
             if features]
    return {"broker_id": broker_id, "cluster_id": cluster_id, "incarnation_id": bytes(15) + b"\x09",
            "listeners": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": 19999, "security_protocol": 0}],
            "features": feats, "rack": None, "is_migrating_zk_broker": False, "log_dirs": [log_dir],
            "previous_broker_epoch": -1}


def _heartbeat(broker_id=7, epoch=0, offset=0) -> dict:
    return {"broker_id": broker_id, "broker_epoch": epoch, "current_metadata_offset": offset, "want_fence": False,
            "want_shut_down": False, "offline_log_dirs": []}


def _alter_partition(broker_id=7, epoch=0) -> dict:
    return {"broker_id": broker_id, "broker_epoch": epoch, "topics": [{"topic_id": bytes(15) + b"\x03", "partitions": [{
        "partition_index": 0, "leader_epoch": 0, "new_isr_with_epochs": [{"broker_id": broker_id, "broker_epoch": epoch}],
        "leader_recovery_state": 0, "partition_epoch": 0}]}]}


# What a broker sends its controller (KIP-631, KIP-497), with bad input: refused with Kafka's codes.
CASES.update({
    "register-other-cluster": (ApiKey.BROKER_REGISTRATION, 4, _register(cluster_id="other")),
    "register-reserved-log-dir": (ApiKey.BROKER_REGISTRATION, 4, _register(log_dir=bytes(15) + b"\x05")),
    "register-no-metadata-version": (ApiKey.BROKER_REGISTRATION, 4, _register(features=False)),
    "register-no-log-dirs": (ApiKey.BROKER_REGISTRATION, 4, {**_register(), "log_dirs": []}),
    "heartbeat-unregistered": (ApiKey.BROKER_HEARTBEAT, 1, _heartbeat()),
    "alter-partition-unregistered": (ApiKey.ALTER_PARTITION, 3, _alter_partition()),
})


@pytest.mark.parametrize("case", list(CASES))
def test_describe_quorum_answers_as_kafka(sides, case):
    key, version, body = CASES[case]
    theirs = _norm(ask(sides["kafka"], key, version, body), sides["kafka"])
    ours = _norm(ask(sides["samsa"], key, version, body), sides["samsa"])
    assert ours == theirs


def _tool_norm(text: str, port: int) -> str:
    text = text.replace(str(port), "<port>")
    text = re.sub(r"(LeaderEpoch|HighWatermark|MaxFollowerLagTimeMs):(\s+)\d+", r"\1:\2<n>", text)
    return re.sub(r"\b1\d{12}\b", "<time>", text)   # epoch milliseconds


@pytest.mark.parametrize("what", ["--status", "--replication"])
def test_kafka_metadata_quorum_prints_the_same(sides, what):
    tool = "org.apache.kafka.tools.MetadataQuorumCommand"
    out = {}
    for side, port in sides.items():
        r = kafka_process.run_tool(tool, "--bootstrap-controller", f"127.0.0.1:{port}", "describe", what)
        assert r.returncode == 0, r.stderr
        text = _tool_norm(r.stdout, port)
        if what == "--replication":   # LogEndOffset of the one voter: a count that differs by run
            lines = text.splitlines()
            text = "\n".join(lines[:1] + [re.sub(r"^(1\s+\S+\s+)\d+", r"\1<n>", ln) for ln in lines[1:]])
        out[side] = text
    assert out["samsa"] == out["kafka"]


def test_a_broker_registers_and_is_unfenced_as_with_kafka(sides):
    """A registration, a heartbeat behind the log, one caught up, one with a stale epoch: the
    same answers from both controllers (the broker epoch itself differs by run)."""
    out = {}
    for side, port in sides.items():
        reg = ask(port, ApiKey.BROKER_REGISTRATION, 4, _register(broker_id=8))
        epoch = reg["broker_epoch"]
        steps = [reg | {"broker_epoch": "<epoch>" if epoch > 0 else epoch}]
        steps.append(ask(port, ApiKey.BROKER_HEARTBEAT, 1, _heartbeat(8, epoch, 0)))
        hw = ask(port, ApiKey.DESCRIBE_QUORUM, 2, quorum_body())["topics"][0]["partitions"][0]["high_watermark"]
        steps.append(wait_until(lambda: (a := ask(port, ApiKey.BROKER_HEARTBEAT, 1, _heartbeat(8, epoch, hw)))
                                ["is_fenced"] is False and a, f"broker 8 unfenced by {side}", 30))
        steps.append(ask(port, ApiKey.BROKER_HEARTBEAT, 1, _heartbeat(8, epoch - 1, hw)))
        out[side] = steps
    assert out["samsa"] == out["kafka"]


VOTER_CHANGES = {   # with static voters (kraft.version 0), as both sides here are formatted
    "add-voter": (ApiKey.ADD_RAFT_VOTER, {"cluster_id": CLUSTER_ID, "timeout_ms": 5000, "voter_id": 2,
                                          "voter_directory_id": bytes(range(16)), "listeners": [
                                              {"name": "CONTROLLER", "host": "127.0.0.1", "port": 1}]}),
    "remove-voter": (ApiKey.REMOVE_RAFT_VOTER, {"cluster_id": CLUSTER_ID, "voter_id": 1,
                                                "voter_directory_id": bytes(range(16))}),
    "add-voter-another-cluster": (ApiKey.ADD_RAFT_VOTER, {"cluster_id": "x", "timeout_ms": 5000, "voter_id": 2,
                                                          "voter_directory_id": bytes(range(16)), "listeners": []}),
}


@pytest.mark.parametrize("case", [*VOTER_CHANGES, "update-voter"])
def test_voter_changes_with_static_voters_are_refused_as_by_kafka(sides, case):
    """AddRaftVoter/RemoveRaftVoter/UpdateRaftVoter (KIP-853) on a kraft.version 0 quorum: the
    same error codes (UpdateRaftVoter in the leader's epoch, for a voter it does not have: one
    naming the leader itself makes Apache Kafka 4.4.0's controller halt, "Received a FETCH/
    FETCH_SNAPSHOT request from the leader itself", seen here)."""
    codes = {}
    for side, port in sides.items():
        if case == "update-voter":
            epoch = ask(port, ApiKey.DESCRIBE_QUORUM, 2, quorum_body())["topics"][0]["partitions"][0]["leader_epoch"]
            key, body = ApiKey.UPDATE_RAFT_VOTER, {
                "cluster_id": CLUSTER_ID, "current_leader_epoch": epoch, "voter_id": 9,
                "voter_directory_id": bytes(range(16)),
                "listeners": [{"name": "CONTROLLER", "host": "127.0.0.1", "port": port}],
                "k_raft_version_feature": {"min_supported_version": 0, "max_supported_version": 1}}
        else:
            key, body = VOTER_CHANGES[case]
        codes[side] = ask(port, key, 0, body)["error_code"]
    assert codes["samsa"] == codes["kafka"], codes
    assert case == "update-voter" or codes["kafka"] != 0, codes
