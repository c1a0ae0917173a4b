"""The KRaft controller's decisions and the metadata image, without sockets or clocks.

Every decision's records go through Kafka's record format (``metadata_records`` encode and
decode) into the image, as they do through the log; the answers are checked against the image
the records make."""

from __future__ import annotations

import asyncio
import uuid

from samsa.broker_config import BrokerConfig
from samsa.cluster.kraft_controller import ControllerLogic, Decision
from samsa.cluster.kraft_image import Changes, MetadataImage
from samsa.protocol import errors
from samsa.protocol import metadata_records as mr
from samsa.raft import messages as m
from samsa.server.controller_node import ControllerServer
from waiting import wait_until_async

CLUSTER = "MkU3OEVBNTcwNTJENDM2Qg"
MV = [{"name": "metadata.version", "min_supported_version": 7, "max_supported_version": 33}]
DIRS = [b"\x5a" * 16]


class World:
    def __init__(self) -> None:
        self.image = MetadataImage()
        self.logic = ControllerLogic(self.image, CLUSTER, session_timeout_ms=3000)
        self.logic.became_active(0)
        self.offset = -1

    def apply(self, d: Decision) -> Decision:
        changes = Changes()
        for name, version, data in d.records:
            self.offset += 1
            n, _, decoded = mr.decode(mr.encode(name, version, data))
            self.image.apply(self.offset, n, decoded, changes)
        d.offset = self.offset
        return d

    def register(self, bid: int, now: int = 0) -> int:
        d = self.apply(self.logic.register({"broker_id": bid, "cluster_id": CLUSTER, "incarnation_id": uuid.uuid4().bytes,
                                            "listeners": [{"name": "PLAINTEXT", "host": "h", "port": 9000 + bid,
                                                           "security_protocol": 0}], "rack": None,
                                            "features": MV, "log_dirs": DIRS}, now))
        assert d.answer["error_code"] == 0
        self.logic.registered(bid, d.offset)
        return d.answer["broker_epoch"]

    def heartbeat(self, bid: int, now: int = 0, **flags) -> dict:
        epoch = self.image.brokers[bid].epoch
        return self.apply(self.logic.heartbeat({"broker_id": bid, "broker_epoch": epoch,
                                                "current_metadata_offset": self.offset, **flags}, now)).answer

    def brokers(self, *ids: int) -> None:
        for i in ids:
            self.register(i)
        for i in ids:
            assert self.heartbeat(i)["is_fenced"] is False

    def topic(self, name: str, assignments: dict[int, list[int]]) -> dict:
        d = self.apply(self.logic.create_topics({"topics": [{
            "name": name, "num_partitions": -1, "replication_factor": -1, "configs": [],
            "assignments": [{"partition_index": p, "broker_ids": r} for p, r in assignments.items()]}]}))
        return d.answer["topics"][0]

    def state(self, name: str, p: int = 0):
        return self.image.topics[name].partitions[p]


def test_registration_fenced_until_caught_up_then_unfenced():
    w = World()
    epoch = w.register(1)
    b = w.image.brokers[1]
    assert b.fenced and b.epoch == epoch
    # a heartbeat behind the registration: not caught up, stays fenced
    behind = w.apply(w.logic.heartbeat({"broker_id": 1, "broker_epoch": epoch, "current_metadata_offset": -1}, 0))
    assert behind.records == [] and behind.answer["is_fenced"] and not behind.answer["is_caught_up"]
    a = w.heartbeat(1)
    assert a == {"error_code": 0, "is_caught_up": True, "is_fenced": False, "should_shut_down": False}
    assert not w.image.brokers[1].fenced
    # stale epochs and unknown brokers are refused with Kafka's codes
    assert w.logic.heartbeat({"broker_id": 1, "broker_epoch": epoch - 1, "current_metadata_offset": 9}, 0).answer[
        "error_code"] == errors.E_STALE_BROKER_EPOCH
    assert w.logic.heartbeat({"broker_id": 7, "broker_epoch": 0, "current_metadata_offset": 9}, 0).answer[
        "error_code"] == errors.E_STALE_BROKER_EPOCH    # as Kafka 4.4.0 answers an unknown broker
    bad = w.logic.register({"broker_id": 2, "cluster_id": "other", "incarnation_id": bytes(16), "listeners": []}, 0)
    assert bad.answer["error_code"] == errors.E_INCONSISTENT_CLUSTER_ID and bad.records == []


def test_a_second_live_incarnation_is_a_duplicate_registration():
    w = World()
    w.brokers(1)
    d = w.logic.register({"broker_id": 1, "cluster_id": CLUSTER, "incarnation_id": uuid.uuid4().bytes,
                          "listeners": [], "features": MV, "log_dirs": DIRS}, 1000)
    assert d.answer["error_code"] == errors.E_DUPLICATE_BROKER_REGISTRATION
    # after a clean shutdown it names the epoch it had (KIP-966's PreviousBrokerEpoch): taken at once
    old = w.image.brokers[1].epoch
    again = w.logic.register({"broker_id": 1, "cluster_id": CLUSTER, "incarnation_id": uuid.uuid4().bytes,
                              "listeners": [], "previous_broker_epoch": old, "features": MV,
                              "log_dirs": DIRS}, 1000)
    assert again.answer["error_code"] == 0
    # and without it, once its session is over, the new incarnation takes over with a higher epoch
    assert w.register(1, now=5000) > old


def test_session_timeout_fences_and_moves_leadership():
    w = World()
    w.brokers(1, 2, 3)
    w.topic("t", {0: [1, 2, 3], 1: [2, 3, 1]})
    w.heartbeat(2, now=2000)
    w.heartbeat(3, now=2000)
    assert w.logic.fence_expired(2999).records == []
    d = w.apply(w.logic.fence_expired(3000))
    assert d.answer["fenced"] == [1]
    assert w.image.brokers[1].fenced and w.image.unfenced() == {2, 3}
    s0, s1 = w.state("t", 0), w.state("t", 1)
    assert (s0.leader, s0.isr, s0.leader_epoch) == (2, [2, 3], 1)       # led by 1: the next in-sync replica
    assert (s1.leader, s1.isr, s1.leader_epoch) == (2, [2, 3], 0)       # followed by 1: out of the ISR only
    # back: registers again (fenced), caught up -> unfenced; it rejoins ISRs through AlterPartition
    w.register(1, now=4000)
    assert w.heartbeat(1, now=4000)["is_fenced"] is False
    assert w.state("t", 0).isr == [2, 3]


def test_last_in_sync_replica_fenced_leaves_the_partition_offline_then_leads_again():
    w = World()
    w.brokers(1, 2)
    w.topic("solo", {0: [1]})
    w.heartbeat(2, now=3000)
    w.apply(w.logic.fence_expired(3000))
    s = w.state("solo")
    assert s.leader == -1 and s.isr == [1]                              # offline, its last ISR kept
    w.register(1, now=3100)
    w.heartbeat(1, now=3100)
    assert w.state("solo").leader == 1


def test_alter_partition_checks_epochs_and_eligibility():
    w = World()
    w.brokers(1, 2, 3)
    w.topic("t", {0: [1, 2, 3]})
    s = w.state("t")

    def alter(broker: int, isr: list[int], leader_epoch: int, partition_epoch: int) -> dict:
        d = w.apply(w.logic.alter_partition({"broker_id": broker, "broker_epoch": w.image.brokers[broker].epoch,
                                             "topics": [{"topic_id": w.image.topics["t"].topic_id, "partitions": [{
                                                 "partition_index": 0, "leader_epoch": leader_epoch,
                                                 "partition_epoch": partition_epoch,
                                                 "new_isr_with_epochs": [{"broker_id": b, "broker_epoch": -1}
                                                                         for b in isr]}]}]}))
        return d.answer["topics"][0]["partitions"][0]

    assert alter(2, [2, 3], s.leader_epoch, s.partition_epoch)["error_code"] == errors.E_NOT_LEADER_OR_FOLLOWER
    assert alter(1, [1, 2], s.leader_epoch + 1, s.partition_epoch)["error_code"] == errors.E_FENCED_LEADER_EPOCH
    assert alter(1, [1, 2], s.leader_epoch, s.partition_epoch + 1)["error_code"] == errors.E_INVALID_UPDATE_VERSION
    ok = alter(1, [1, 2], s.leader_epoch, s.partition_epoch)
    assert ok["error_code"] == 0
    now = w.state("t")
    assert (ok["isr"], ok["partition_epoch"], ok["leader_id"], ok["leader_epoch"]) == \
        (now.isr, now.partition_epoch, now.leader, now.leader_epoch) == ([1, 2], 1, 1, 0)
    # a fenced broker cannot join the ISR (KIP-497's INELIGIBLE_REPLICA)
    w.apply(w.logic.heartbeat({"broker_id": 3, "broker_epoch": w.image.brokers[3].epoch,
                               "current_metadata_offset": w.offset, "want_fence": True}, 0))
    assert alter(1, [1, 2, 3], 0, 1)["error_code"] == errors.E_INELIGIBLE_REPLICA


def test_controlled_shutdown_moves_leadership_then_says_shut_down():
    w = World()
    w.brokers(1, 2)
    w.topic("t", {0: [1, 2], 1: [2, 1]})
    a = w.heartbeat(1, want_shut_down=True)
    assert a["should_shut_down"] is True and a["is_fenced"] is True
    assert w.state("t", 0).leader == 2 and w.state("t", 0).isr == [2]
    assert w.state("t", 1).isr == [2]
    assert w.image.brokers[1].in_controlled_shutdown


def test_create_delete_and_grow_topics():
    w = World()
    w.brokers(1, 2)
    t = w.topic("t", {0: [1, 2], 1: [2, 1]})
    assert t["error_code"] == 0 and t["num_partitions"] == 2 and t["replication_factor"] == 2
    assert w.image.topics["t"].topic_id == t["topic_id"]
    assert w.topic("t", {0: [1]})["error_code"] == errors.E_TOPIC_ALREADY_EXISTS
    assert w.topic("u", {0: [1, 9]})["error_code"] == errors.E_INVALID_REPLICA_ASSIGNMENT
    grown = w.apply(w.logic.create_partitions({"topics": [{"name": "t", "count": 3,
                                                           "assignments": [{"broker_ids": [1, 2]}]}]}))
    assert grown.answer["results"][0]["error_code"] == 0 and sorted(w.image.topics["t"].partitions) == [0, 1, 2]
    w.apply(w.logic.alter_configs({"resources": [{"resource_type": 2, "resource_name": "t", "configs": [
        {"name": "retention.ms", "config_operation": 0, "value": "1000"}]}]}))
    assert w.image.topics["t"].configs == {"retention.ms": "1000"}
    gone = w.apply(w.logic.delete_topics({"topic_names": ["t", "nope"]}))
    assert [r["error_code"] for r in gone.answer["responses"]] == [0, errors.E_UNKNOWN_TOPIC_OR_PARTITION]
    assert "t" not in w.image.topics and w.image.configs == {}


def test_producer_id_blocks_never_overlap():
    w = World()
    w.brokers(1, 2)
    starts = []
    for b in (1, 2, 1):
        d = w.apply(w.logic.allocate_producer_ids({"broker_id": b, "broker_epoch": w.image.brokers[b].epoch}))
        starts.append((d.answer["producer_id_start"], d.answer["producer_id_len"]))
    assert starts == [(0, 1000), (1000, 1000), (2000, 1000)]


def test_unclean_election_only_when_asked():
    w = World()
    w.brokers(1, 2)
    w.topic("t", {0: [1, 2]})
    alter = {"broker_id": 1, "broker_epoch": w.image.brokers[1].epoch, "topics": [{
        "topic_id": w.image.topics["t"].topic_id, "partitions": [{
            "partition_index": 0, "leader_epoch": 0, "partition_epoch": 0,
            "new_isr_with_epochs": [{"broker_id": 1, "broker_epoch": -1}]}]}]}
    w.apply(w.logic.alter_partition(alter))
    w.heartbeat(2, now=3000)
    w.apply(w.logic.fence_expired(3000))                # 1, the only in-sync replica, is gone
    assert w.state("t").leader == -1
    e = w.apply(w.logic.elect_leaders({"election_type": 1, "topic_partitions": [{"topic": "t", "partitions": [0]}]}))
    assert e.answer["replica_election_results"][0]["partition_result"][0]["error_code"] == 0
    assert w.state("t").leader == 2 and w.state("t").isr == [2]


def test_registration_needs_the_finalized_metadata_version():
    w = World()
    w.apply(Decision([("FeatureLevelRecord", 0, {"name": "metadata.version", "feature_level": 33})]))
    body = {"broker_id": 1, "cluster_id": CLUSTER, "incarnation_id": uuid.uuid4().bytes, "listeners": [],
            "log_dirs": DIRS}
    assert w.logic.register(body, 0).answer["error_code"] == errors.E_INVALID_REGISTRATION      # none declared
    no_dirs = body | {"features": MV, "log_dirs": []}
    assert w.logic.register(no_dirs, 0).answer["error_code"] == errors.E_INVALID_REGISTRATION   # no log dirs
    old = [{"name": "metadata.version", "min_supported_version": 7, "max_supported_version": 30}]
    assert w.logic.register(body | {"features": old}, 0).answer["error_code"] == errors.E_UNSUPPORTED_VERSION
    reserved = body | {"features": MV, "log_dirs": [bytes(15) + b"\x01"]}
    assert w.logic.register(reserved, 0).answer["error_code"] == errors.E_INVALID_REGISTRATION
    assert w.logic.register(body | {"features": MV}, 0).answer["error_code"] == 0


def test_a_snapshot_of_the_image_builds_the_same_image():
    """snapshot_records (what a .checkpoint holds) through Kafka's record format into a new image."""
    from samsa.cluster.kraft_image import snapshot_records
    w = World()
    w.apply(Decision([("FeatureLevelRecord", 0, {"name": "metadata.version", "feature_level": 33})]))
    w.brokers(1, 2, 3)
    w.topic("t", {0: [1, 2, 3], 1: [2, 3, 1]})
    w.heartbeat(1, want_fence=True)
    w.apply(w.logic.alter_configs({"resources": [{"resource_type": 2, "resource_name": "t", "configs": [
        {"name": "retention.ms", "config_operation": 0, "value": "1000"}]}, {"resource_type": 32,
        "resource_name": "g", "configs": [{"name": "consumer.session.timeout.ms", "config_operation": 0,
                                           "value": "50000"}]}]}))
    w.apply(w.logic.allocate_producer_ids({"broker_id": 2, "broker_epoch": w.image.brokers[2].epoch}))
    w.apply(w.logic.create_acls({"creations": [{"resource_type": 2, "resource_name": "t", "resource_pattern_type": 3,
                                                "principal": "User:a", "host": "*", "operation": 3,
                                                "permission_type": 3}]}))
    w.apply(w.logic.alter_client_quotas({"entries": [
        {"entity": [{"entity_type": "user", "entity_name": None}], "ops": [
            {"key": "producer_byte_rate", "value": 1024.0, "remove": False}]},
        {"entity": [{"entity_type": "user", "entity_name": "a"}, {"entity_type": "client-id", "entity_name": "c"}],
         "ops": [{"key": "request_percentage", "value": 50.0, "remove": False}]}]}))
    w.apply(w.logic.alter_scram({"deletions": [], "upsertions": [{"name": "a", "mechanism": 1, "iterations": 4096,
                                                                   "salt": b"salt", "salted_password": b"x" * 32}]}))
    again = MetadataImage()
    for i, (name, version, data) in enumerate(snapshot_records(w.image)):
        n, _, decoded = mr.decode(mr.encode(name, version, data))
        again.apply(i, n, decoded, Changes())
    for attr in ("topics", "names", "brokers", "configs", "features", "next_producer_id", "acls", "quotas", "scram"):
        assert getattr(again, attr) == getattr(w.image, attr), attr


# ---- the active controller's writes (ControllerServer._write, its log a stub)

class _StubLog:
    """Appends get the next offsets; nothing commits unless the test says so."""
    def __init__(self) -> None:
        self.end = 0

    def append(self, records: list) -> m.Appended:
        base, self.end = self.end, self.end + len(records)
        return m.Appended(base, self.end - 1, 5)


def test_a_write_that_timed_out_uncommitted_holds_back_the_next_decision():
    """An active controller whose write timed out before it committed (a quorum slow or cut off)
    decides nothing more until that write is applied: a decision made on an image without it
    could contradict it (a deposed leader's ISR applied after its partition's leader moved).
    Nor does it answer a write as committed once it is no longer the active controller."""
    config = BrokerConfig({"process.roles": "controller", "node.id": 1, "controller.quorum.voters": "1@h:1",
                           "controller.listener.names": "CONTROLLER", "listeners": "CONTROLLER://h:1",
                           "log.dirs": "/nonexistent", "controller.quorum.request.timeout.ms": 20})
    server = ControllerServer(config)
    server.driver = _StubLog()
    server.active_epoch = 5
    decided: list[int] = []

    def decide() -> Decision:
        decided.append(len(decided))
        return Decision([("NoOpRecord", 0, {})], {"error_code": 0})

    def waiting() -> bool:  # a write waits for the image to reach an offset
        return any(not fut.done() for _, fut in server._waiters)

    async def run() -> None:
        assert await server._write(decide) is None             # not applied within 40 ms: no answer
        assert decided == [0] and server._unapplied == 0
        assert await server._write(decide) is None             # still not applied: nothing decided
        assert decided == [0]
        second = asyncio.ensure_future(server._write(decide))
        await wait_until_async(waiting, "the write waiting for the first one")
        assert decided == [0]
        server.image.offset = 0                                # the first write committed and applied
        server._wake_waiters()
        await wait_until_async(lambda: decided == [0, 1], "a decision on an image with the first write")
        server.image.offset = 1
        server._wake_waiters()
        assert (await second).offset == 1
        third = asyncio.ensure_future(server._write(decide))
        await wait_until_async(waiting, "the third write waiting to be applied")
        server.active_epoch = -1                               # deposed while it waited
        server.image.offset = 2                                # a new leader's record at that offset
        server._wake_waiters()
        assert await third is None
    asyncio.run(run())
