"""The share coordinator (KIP-932) on a three-broker ZooKeeper cluster: a share group whose group
coordinator and share coordinator are different brokers, so the group coordinator's persister
speaks the share-state RPCs to the other broker (AlterShareGroupOffsets initialises the share
partitions there, DescribeShareGroupOffsets reads their summaries, DeleteGroups deletes them);
the share coordinator's broker is SIGKILLed and the state is read back from the broker that
takes over its ``__share_group_state`` partition."""

from __future__ import annotations

import base64
import sys
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "groups"))

from group_helpers import Raw, wait_until  # noqa: E402

SETTINGS = {"share.coordinator.state.topic.num.partitions": 4, "share.coordinator.state.topic.replication.factor": 3,
            "share.coordinator.state.topic.min.isr": 2}


def _find(raw: Raw, key: str, key_type: int) -> int:
    c = raw.call(10, 6, {"key_type": key_type, "coordinator_keys": [key]})["coordinators"][0]
    return c["node_id"] if c["error_code"] == 0 else -1


def test_remote_share_state_survives_its_coordinator(cluster_factory):
    cluster = cluster_factory(**SETTINGS)
    topic = "share-cluster-jobs"
    a = AdminClient({"bootstrap.servers": cluster.bootstrap})
    a.create_topics([NewTopic(topic, 1, 3, config={"min.insync.replicas": "2"})])[topic].result(30)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(12):
        p.produce(topic, b"job-%d" % i, partition=0)
    assert p.flush(30) == 0
    raws = {i: Raw(b.port) for i, b in cluster.brokers.items()}
    try:
        raw = raws[0]
        tid = wait_until(lambda: raw.call(3, 12, {"topics": [{"topic_id": b"\0" * 16, "name": topic}],
                                                  "allow_auto_topic_creation": False,
                                                  "include_topic_authorized_operations": False})["topics"][0]["topic_id"],
                         what="the topic's id")
        tid_text = base64.urlsafe_b64encode(tid).decode().rstrip("=")
        # a group whose share partition is coordinated by another broker than the group
        for n in range(200):
            group = f"share-cluster-{n}"
            gc = wait_until(lambda: (b := _find(raw, group, 0)) >= 0 and (b,), what="a group coordinator")[0]
            sc = wait_until(lambda: (b := _find(raw, f"{group}:{tid_text}:0", 2)) >= 0 and (b,),
                            what="a share coordinator")[0]
            if gc != sc:
                break
        assert gc != sc

        def altered():  # (retriable COORDINATOR_NOT_AVAILABLE while a broker has not seen the state topic yet)
            r = raws[gc].call(91, 0, {"group_id": group, "topics": [{"topic_name": topic, "partitions": [
                {"partition_index": 0, "start_offset": 5}]}]})
            code = r["error_code"] or r["responses"][0]["partitions"][0]["error_code"]
            assert code in (0, 15, 16), r
            return code == 0
        wait_until(altered, what="the share group's offsets altered")

        def described(broker: int) -> tuple[int, int] | None:
            d = raws[broker].call(90, 1, {"groups": [{"group_id": group, "topics": None}]})["groups"][0]
            if d["error_code"] or not d["topics"] or d["topics"][0]["partitions"][0]["error_code"]:
                return None
            row = d["topics"][0]["partitions"][0]
            return row["start_offset"], row["lag"]
        assert described(gc) == (5, 7)                   # read over the RPC from the other broker

        def read_at(broker: int) -> dict:
            return raws[broker].call(84, 0, {"group_id": group, "topics": [{"topic_id": tid, "partitions": [
                {"partition": 0, "leader_epoch": 1}]}]})["results"][0]["partitions"][0]
        at_sc = read_at(sc)
        assert (at_sc["error_code"], at_sc["state_epoch"], at_sc["start_offset"]) == (0, 1, 5)
        assert read_at(gc)["error_code"] == 16            # NOT_COORDINATOR elsewhere
        # the share coordinator's broker dies: another loads the state partition and has the state
        raws.pop(sc).close()
        cluster.brokers[sc].kill()
        alive = next(iter(raws))
        new_sc = wait_until(lambda: (b := _find(raws[alive], f"{group}:{tid_text}:0", 2)) not in (-1, sc) and (b,),
                            what="a new share coordinator", timeout=60)[0]
        after = wait_until(lambda: (r := read_at(new_sc))["error_code"] == 0 and r, what="the state reloaded",
                           timeout=60)
        assert (after["state_epoch"], after["start_offset"]) == (1, 5)
        # (lag -1, unknown, while the partition's new leader is not yet known where the lag is read)
        wait_until(lambda: described(gc) == (5, 7), what="the offsets described again", timeout=60)
        # DeleteGroups at the group coordinator deletes the share state at the share coordinator
        assert raws[gc].call(42, 2, {"groups_names": [group]})["results"][0]["error_code"] == 0
        gone = read_at(new_sc)
        assert (gone["error_code"], gone["error_message"]) == (
            42, "Read operation on uninitialized share partition not allowed.")
    finally:
        for r in raws.values():
            r.close()
