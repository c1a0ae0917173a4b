"""An Apache Kafka 4.4.0 controller as the third voter of a Samsa controller quorum (static voters,
``process.roles=controller``): the three elect one leader, whichever it is, and replicate one log,
byte for byte on Kafka's and Samsa's disks. Kafka's controller also asks its leader for
ControllerRegistration, which a Samsa leader does not serve yet (Kafka logs
UnsupportedVersionException and goes on following), and UpdateRaftVoter (answered with success,
nothing written with static voters, as Kafka's leader answers). Then Kafka's controller leads and
Samsa's follow it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from broker_process import free_port
from raft_processes import (CLUSTER_ID, Controller, batches, controller_props, describe_quorum, format_controller,
                            leader_view)
from waiting import wait_until

if os.environ.get("SAMSA_DIFF_SIDE", "both") == "samsa":
    pytest.skip("SAMSA_DIFF_SIDE=samsa: Kafka's side is not run", allow_module_level=True)
import kafka_process  # noqa: E402

if not kafka_process.available():
    pytest.skip("java or Kafka 4.4.0's jars missing", allow_module_level=True)

IDS = (1, 2, 3)   # 1 and 2 Samsa, 3 Kafka


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    base = tmp_path_factory.mktemp("mixed")
    ports = {i: free_port() for i in IDS}
    voters = ",".join(f"{i}@127.0.0.1:{ports[i]}" for i in IDS)
    # Samsa's followers wait longer than Kafka's before standing (controller.quorum.fetch.timeout.ms),
    # so that with no leader Kafka's controller stands first (the second test).
    # No NoOpRecords from a Samsa leader (metadata.max.idle.interval.ms=0): the log stands still
    # once written, so the second test can see every voter at its end before it kills.
    nodes: dict = {i: Controller(base / f"samsa{i}", i, ports[i], voters,
                                 **{"controller.quorum.fetch.timeout.ms": "8000",
                                    "metadata.max.idle.interval.ms": "0"}) for i in (1, 2)}
    kafka = kafka_process.KafkaProcess(base / "kafka3", node_id=3, controller_port=ports[3], cluster_id=CLUSTER_ID)
    kafka.props = controller_props(base / "kafka3", 3, ports[3], voters)
    kafka.port = ports[3]
    nodes[3] = kafka
    try:
        kafka.spawn()      # kafka-storage format, then the JVM
        for i in (1, 2):
            format_controller(nodes[i].conf)
            nodes[i].start()
        yield nodes
    finally:
        for n in nodes.values():
            n.stop(30)


def _dir(node) -> Path:
    return node.partition_dir if isinstance(node, Controller) else node.log_dir / "__cluster_metadata-0"


def test_a_kafka_controller_votes_and_replicates_in_a_samsa_quorum(mixed):
    def all_caught_up():
        v = leader_view(mixed)
        if v is None or sorted(r["replica_id"] for r in v["current_voters"]) != list(IDS):
            return None
        hw = v["high_watermark"]
        return v if all(r["log_end_offset"] >= hw for r in v["current_voters"]) else None
    view = wait_until(all_caught_up, "a leader with all three voters caught up", 180)
    hw = view["high_watermark"]
    lead = [b for b in batches(_dir(mixed[view["leader_id"]])) if b[1] < hw]
    assert lead and any(control for *_, control in lead)     # a LeaderChange among them

    def same_prefix():
        return all([b for b in batches(_dir(n)) if b[1] < hw] == lead for n in mixed.values())
    wait_until(same_prefix, "the same batches below the high watermark on Kafka's and Samsa's disks", 60)
    # the quorum-state file and partition.metadata as Kafka's controller writes them beside its log
    kafkas = json.loads((_dir(mixed[3]) / "quorum-state").read_text())
    ours = json.loads((_dir(mixed[1]) / "quorum-state").read_text())
    assert list(ours) == list(kafkas) and ours["currentVoters"] == kafkas["currentVoters"]
    assert ((_dir(mixed[1]) / "partition.metadata").read_bytes() == (_dir(mixed[3]) / "partition.metadata").read_bytes())


def test_samsa_controllers_follow_a_kafka_leader(mixed):
    def level():  # a leader, and every voter at the end of its log: no Samsa log ahead of Kafka's
        v = leader_view(mixed)
        if v is None:
            return None
        end = max(r["log_end_offset"] for r in v["current_voters"])
        return v if all(r["log_end_offset"] == end for r in v["current_voters"]) else None
    view = wait_until(level, "a leader and every voter at the end of its log", 60)
    epoch = view["leader_epoch"]
    mixed[1].kill()
    mixed[2].kill()
    # Kafka's controller alone cannot be elected; with a Samsa node back that was not the leader
    # it is, before that node would stand: a follower that has not heard from a leader since its
    # restart grants a pre-vote to a log as long as its own, and stands only after its 8 s fetch
    # timeout (a restarted leader would stand at once, as Resigned).
    back = 1 if view["leader_id"] == 2 else 2
    mixed[back].start()
    seen: dict = {}

    def kafka_leads_now():
        for i in (back, 3):  # what each live voter says, for the message if Kafka's never leads
            try:
                seen[i] = {k: v for k, v in describe_quorum(mixed[i].port, timeout_ms=2000).items()
                           if k in ("leader_id", "leader_epoch", "high_watermark", "current_voters")}
            except Exception as e:  # noqa: BLE001 - a node between states
                seen[i] = repr(e)
        v = leader_view(mixed, [3])
        return v if v and v["leader_id"] == 3 and v["leader_epoch"] > epoch else None
    try:
        kafka_leads = wait_until(kafka_leads_now, "Kafka's controller to lead", 120)
    except AssertionError as e:
        raise AssertionError(f"{e}; epoch {epoch} before; the live voters' last answers: {seen}") from None
    mixed[3 - back].start()

    def all_caught_up():
        v = leader_view(mixed, [3])
        if v is None or v["leader_epoch"] != kafka_leads["leader_epoch"]:
            return None
        return v if all(r["log_end_offset"] >= v["high_watermark"] for r in v["current_voters"]) else None
    view = wait_until(all_caught_up, "Samsa's controllers caught up with Kafka's leader", 120)
    hw = view["high_watermark"]
    lead = [b for b in batches(_dir(mixed[3])) if b[1] < hw]
    assert any(control and e == view["leader_epoch"] for _, _, e, _, control in lead)   # Kafka's LeaderChange
    wait_until(lambda: all([b for b in batches(_dir(mixed[i])) if b[1] < hw] == lead for i in (1, 2)),
               "Kafka's batches on Samsa's disks", 60)
    for i in (1, 2):
        state = mixed[i].quorum_state()
        assert state["leaderId"] == 3 and state["leaderEpoch"] == view["leader_epoch"]
