"""Three KRaft controller processes (``process.roles=controller``) as one quorum (issue 34, step 3).

Real processes on loopback, formatted by ``samsa storage format``: they elect one leader, the
leader's records (the bootstrap records, NoOps, LeaderChange control batches) replicate to the
others in Kafka's log format, Apache Kafka 4.4.0's ``kafka-metadata-quorum`` describes the quorum;
the leader SIGKILLed, a new one is elected in a higher epoch with the committed prefix kept; the
old one restarted rejoins and catches up. Processes are stopped by their pid.
"""

from __future__ import annotations

import json
import os

import pytest

from broker_process import free_port
from raft_processes import CLUSTER_ID, Controller, describe_quorum, format_controller, leader_view
from waiting import wait_until

IDS = (1, 2, 3)


@pytest.fixture(scope="module")
def quorum(tmp_path_factory):
    base = tmp_path_factory.mktemp("quorum")
    ports = {i: free_port() for i in IDS}
    voters = ",".join(f"{i}@127.0.0.1:{ports[i]}" for i in IDS)
    nodes = {i: Controller(base / f"node{i}", i, ports[i], voters) for i in IDS}
    for n in nodes.values():
        format_controller(n.conf)
    try:
        for n in nodes.values():
            n.start()
        yield nodes
    finally:
        for n in nodes.values():
            n.stop(10)


def test_three_controllers_elect_one_leader_and_replicate(quorum):
    view = wait_until(lambda: leader_view(quorum), "a leader with a committed offset", 60)
    leader, epoch = view["leader_id"], view["leader_epoch"]
    assert sorted(v["replica_id"] for v in view["current_voters"]) == list(IDS) and view["observers"] == []
    assert [n["node_id"] for n in view["nodes"]] == list(IDS)
    # Every voter's quorum-state names that leader and epoch (Kafka's JSON, data_version 1).
    wait_until(lambda: all(n.quorum_state()["leaderId"] == leader and n.quorum_state()["leaderEpoch"] == epoch
                           for n in quorum.values()), "every quorum-state to name the leader", 30)
    # static voters (kraft.version 0): version 0 of the file, as Kafka 4.4.0 writes it then
    state = quorum[leader].quorum_state()
    assert list(state) == ["clusterId", "leaderId", "leaderEpoch", "votedId", "appliedOffset", "currentVoters",
                           "data_version"]
    assert state["data_version"] == 0 and state["currentVoters"] == [{"voterId": i} for i in IDS]
    # Non-leaders answer DescribeQuorum with NOT_LEADER_OR_FOLLOWER (6), as Kafka's do.
    other = next(i for i in IDS if i != leader)
    assert describe_quorum(quorum[other].port)["error_code"] == 6
    # The leader's batches reach every voter byte for byte: the bootstrap records, the LeaderChange
    # control batch of its epoch, NoOps; followers' logs are a prefix of the leader's.
    hw = view["high_watermark"]

    def replicated():
        lead = [b for b in quorum[leader].batches() if b[1] < hw]
        return lead if all([b for b in n.batches() if b[1] < hw] == lead for n in quorum.values()) else None
    batches = wait_until(replicated, "the committed batches on every voter", 30)
    assert any(control and e == epoch for _, _, e, _, control in batches)   # LeaderChange
    assert any(not control for *_, control in batches)                     # bootstrap records
    # and the log keeps growing (NoOpRecord every metadata.max.idle.interval.ms)
    wait_until(lambda: leader_view(quorum)["high_watermark"] > hw, "the high watermark to move on", 30)


def _closed_after(port: int, frame: bytes) -> bool:
    """Send one request frame; True when the controller closes the connection without an answer."""
    import socket
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(frame)
        return s.recv(4) == b""


def test_bad_input_closes_that_connection_only(quorum):
    from samsa.protocol import api
    port = quorum[1].port
    produce = b"".join(bytes(c) for c in api.encode_request(0, 9, 1, "t", {
        "transactional_id": None, "acks": 1, "timeout_ms": 1000, "topic_data": []}))
    assert _closed_after(port, produce)                                   # not a controller API
    assert _closed_after(port, (10).to_bytes(4, "big") + b"\x03\xe7" + bytes(8))   # unknown API key 999
    assert _closed_after(port, (6).to_bytes(4, "big") + b"\x00\x34\x00\x63\x00\x00")   # Vote v99
    assert "not served on a KRaft controller listener" in quorum[1].log_text()
    wait_until(lambda: leader_view(quorum), "the quorum still serving", 30)


def _kafka():
    if os.environ.get("SAMSA_DIFF_SIDE", "both") == "samsa":
        pytest.skip("SAMSA_DIFF_SIDE=samsa: Kafka's side is not run")
    import kafka_process
    if not kafka_process.available():
        pytest.skip("java or Kafka 4.4.0's jars missing")
    return kafka_process


def test_kafkas_metadata_quorum_tool_describes_the_quorum(quorum):
    kp = _kafka()
    view = wait_until(lambda: leader_view(quorum), "a leader", 60)
    follower = next(i for i in IDS if i != view["leader_id"])
    tool = "org.apache.kafka.tools.MetadataQuorumCommand"
    r = kp.run_tool(tool, "--bootstrap-controller", f"127.0.0.1:{quorum[follower].port}", "describe", "--status")
    assert r.returncode == 0, r.stderr
    status = dict(line.split(":", 1) for line in r.stdout.splitlines() if line.strip())
    status = {k.strip(): v.strip() for k, v in status.items()}
    assert list(status) == ["ClusterId", "LeaderId", "LeaderEpoch", "HighWatermark", "MaxFollowerLag",
                            "MaxFollowerLagTimeMs", "CurrentVoters", "CurrentObservers"]
    assert status["ClusterId"] == CLUSTER_ID and int(status["LeaderId"]) in IDS
    assert int(status["LeaderEpoch"]) >= view["leader_epoch"] and int(status["HighWatermark"]) > 0
    voters = json.loads(status["CurrentVoters"])   # the leader first, as Kafka's leader lists them
    assert voters[0]["id"] == int(status["LeaderId"]) and sorted(v["id"] for v in voters) == list(IDS)
    assert all(v["endpoints"] == [f"CONTROLLER://127.0.0.1:{quorum[v['id']].port}"] for v in voters)
    assert json.loads(status["CurrentObservers"]) == []

    r = kp.run_tool(tool, "--bootstrap-controller", f"127.0.0.1:{quorum[follower].port}", "describe",
                    "--replication")
    assert r.returncode == 0, r.stderr
    rows = [line.split() for line in r.stdout.splitlines() if line.strip()]
    assert rows[0] == ["NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp",
                       "LastCaughtUpTimestamp", "Status"]
    assert sorted(int(row[0]) for row in rows[1:]) == list(IDS)
    statuses = {int(row[0]): row[6] for row in rows[1:]}
    assert sorted(statuses.values()) == ["Follower", "Follower", "Leader"]
    for row in rows[1:]:
        assert int(row[2]) > 0 and int(row[3]) >= 0 and int(row[4]) > 1_600_000_000_000


def test_kafkas_dump_log_reads_a_followers_replicated_log(quorum):
    kp = _kafka()
    view = wait_until(lambda: leader_view(quorum), "a leader", 60)
    follower = quorum[next(i for i in IDS if i != view["leader_id"])]
    segment = follower.partition_dir / "00000000000000000000.log"
    r = kp.run_tool(kp.TOOLS["kafka-dump-log"], "--cluster-metadata-decoder", "--files", str(segment))
    assert r.returncode == 0 and "Exception" not in r.stdout + r.stderr, r.stdout + r.stderr
    assert 'LeaderChange: {"version":0,"leaderId":' in r.stdout and '"voters":[{"voterId":1},' in r.stdout
    assert '{"type":"FEATURE_LEVEL_RECORD","version":0,"data":{"name":"metadata.version"' in r.stdout
    assert '{"type":"NO_OP_RECORD","version":0,"data":{}}' in r.stdout


def test_leader_killed_a_new_one_is_elected_and_the_old_one_rejoins(quorum):
    view = wait_until(lambda: leader_view(quorum), "a leader", 60)
    old, epoch = view["leader_id"], view["leader_epoch"]
    committed = view["high_watermark"]
    quorum[old].kill()
    rest = [i for i in IDS if i != old]
    new = wait_until(lambda: (lambda v: v if v and v["leader_epoch"] > epoch else None)(leader_view(quorum, rest)),
                     "a new leader in a higher epoch", 60)
    assert new["leader_id"] in rest
    # The committed prefix is kept: every batch below the old high watermark, on each survivor,
    # is the one the killed leader wrote (same offsets, epoch, CRC).
    before = [b for b in quorum[old].batches() if b[1] < committed]
    assert before and before[-1][1] == committed - 1
    for i in rest:
        assert [b for b in quorum[i].batches() if b[1] < committed] == before
    # Restarted, the old leader follows the new one and catches up.
    quorum[old].start()

    def caught_up():
        v = leader_view(quorum, rest)
        if v is None or v["leader_epoch"] <= epoch:
            return None
        row = next(r for r in v["current_voters"] if r["replica_id"] == old)
        return v if row["log_end_offset"] >= v["high_watermark"] > committed else None
    after = wait_until(caught_up, "the restarted node to catch up with the new leader", 60)
    state = quorum[old].quorum_state()
    assert state["leaderId"] == after["leader_id"] and state["leaderEpoch"] == after["leader_epoch"]
    mine = [b for b in quorum[old].batches() if b[1] < after["high_watermark"]]
    lead = [b for b in quorum[after["leader_id"]].batches() if b[1] < after["high_watermark"]]
    assert mine == lead


def test_a_leader_stopped_gracefully_resigns(quorum):
    view = wait_until(lambda: leader_view(quorum), "a leader", 60)
    old, epoch = view["leader_id"], view["leader_epoch"]
    quorum[old].stop(30)      # SIGTERM
    assert quorum[old].proc.returncode == 0
    rest = [i for i in IDS if i != old]
    told = f"EndQuorumEpoch from {old}: it ends epoch {epoch}"
    wait_until(lambda: all(told in quorum[i].log_text() for i in rest), "EndQuorumEpoch at the other voters", 30)
    wait_until(lambda: (lambda v: v and v["leader_epoch"] > epoch)(leader_view(quorum, rest)), "a new leader", 60)
    quorum[old].start()
    wait_until(lambda: (lambda v: v and all(r["log_end_offset"] >= v["high_watermark"] for r in v["current_voters"]))(
        leader_view(quorum)), "all three caught up again", 60)


def test_a_deposed_leaders_uncommitted_records_are_truncated(quorum):
    """The followers paused (SIGSTOP), the leader's NoOps stay uncommitted until it resigns (check
    quorum); it is killed, the followers resumed elect one of them, and the old leader restarted
    finds its log diverging (Fetch's DivergingEpoch), truncates it and takes the new leader's."""
    import signal
    view = wait_until(lambda: leader_view(quorum), "a leader", 60)
    old, epoch, hw = view["leader_id"], view["leader_epoch"], view["high_watermark"]
    rest = [i for i in IDS if i != old]
    for i in rest:
        quorum[i].proc.send_signal(signal.SIGSTOP)
    try:
        wait_until(lambda: quorum[old].batches()[-1][1] >= hw + 2, "uncommitted NoOps on the lone leader", 30)
        wait_until(lambda: _resigned_in(quorum[old], epoch), "the lone leader to resign (check quorum)", 30)
        quorum[old].kill()
    finally:
        for i in rest:
            quorum[i].proc.send_signal(signal.SIGCONT)
    uncommitted = [b for b in quorum[old].batches() if b[1] >= hw]
    assert uncommitted and all(e == epoch for _, _, e, _, _ in uncommitted)
    new = wait_until(lambda: (lambda v: v if v and v["leader_epoch"] > epoch else None)(leader_view(quorum, rest)),
                     "a new leader among the resumed", 60)
    quorum[old].start()

    def caught_up():
        v = leader_view(quorum, rest)
        if v is None or v["leader_epoch"] != new["leader_epoch"]:
            return None
        row = next(r for r in v["current_voters"] if r["replica_id"] == old)
        return v if row["log_end_offset"] >= v["high_watermark"] else None
    after = wait_until(caught_up, "the old leader to catch up", 60)
    assert "truncating the metadata log to" in quorum[old].log_text()
    top = after["high_watermark"]
    mine = [b for b in quorum[old].batches() if b[1] < top]
    assert mine == [b for b in quorum[after["leader_id"]].batches() if b[1] < top]
    assert not any(b in mine for b in uncommitted if b[0] >= hw)   # its uncommitted batches are gone


def _resigned_in(node, epoch: int) -> bool:
    return f"leader {node.node_id} in epoch {epoch} (this node: Resigned)" in node.log_text()
