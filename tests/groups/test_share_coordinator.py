"""The share coordinator (KIP-932) over TCP: a share partition's state initialised, read and
written with the share-state RPCs a leader sends, its epochs fenced, its records in
``__share_group_state`` in Kafka's format (snapshots every
``share.coordinator.snapshot.update.records.per.snapshot`` updates), and all of it read back
after the broker is SIGKILLed and restarted. Kafka's answers to the same RPCs are compared in
tests/differential/test_share_state_diff.py."""

from __future__ import annotations

import base64
import uuid

from confluent_kafka import Consumer, TopicPartition

from group_helpers import Raw, create_topic, wait_until
from samsa.protocol import share_records as sr

FENCED_LEADER_EPOCH, FENCED_STATE_EPOCH, INVALID_REQUEST = 74, 124, 42


def _key(group: str, tid: bytes, p: int) -> str:
    return f"{group}:{base64.urlsafe_b64encode(tid).decode().rstrip('=')}:{p}"


class State:
    """The share-state RPCs for one share partition, by hand."""

    def __init__(self, raw: Raw, group: str, tid: bytes, partition: int):
        self.raw, self.group, self.tid, self.p = raw, group, tid, partition

    def _one(self, api: int, version: int, fields: dict) -> dict:
        r = self.raw.call(api, version, {"group_id": self.group, "topics": [
            {"topic_id": self.tid, "partitions": [{"partition": self.p, **fields}]}]})
        return r["results"][0]["partitions"][0]

    def init(self, state_epoch: int, start: int) -> dict:
        return self._one(83, 0, {"state_epoch": state_epoch, "start_offset": start})

    def read(self, leader_epoch: int) -> dict:
        return self._one(84, 0, {"leader_epoch": leader_epoch})

    def write(self, state_epoch: int, leader_epoch: int, start: int, batches: list[tuple], dcc: int = -1) -> dict:
        return self._one(85, 1, {"state_epoch": state_epoch, "leader_epoch": leader_epoch, "start_offset": start,
                                 "delivery_complete_count": dcc, "state_batches": [
                                     {"first_offset": a, "last_offset": b, "delivery_state": s, "delivery_count": c}
                                     for a, b, s, c in batches]})

    def summary(self, leader_epoch: int) -> dict:
        return self._one(87, 1, {"leader_epoch": leader_epoch})

    def delete(self) -> dict:
        return self._one(86, 0, {})


def _batches(r: dict) -> list[tuple]:
    return [(b["first_offset"], b["last_offset"], b["delivery_state"], b["delivery_count"]) for b in r["state_batches"]]


def _records(bootstrap: str, partition: int) -> list[tuple]:
    """The (record type, value) records of one __share_group_state partition, decoded as Kafka's."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4().hex}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        _, high = c.get_watermark_offsets(TopicPartition(sr.SHARE_STATE_TOPIC, partition), timeout=30)
        c.assign([TopicPartition(sr.SHARE_STATE_TOPIC, partition, 0)])
        out = []
        while len(out) < high:
            m = c.poll(10)
            assert m is not None and not m.error(), m and m.error()
            kind, *_ = sr.parse_key(m.key())
            out.append((kind, None if m.value() is None else sr.parse_value(kind, m.value())))
        return out
    finally:
        c.close()


def _restart(b, s, raw: Raw) -> Raw:
    """SIGKILL the broker, start it again on its data, and send ``s``'s requests over a new connection."""
    raw.close()
    b.kill()
    b.start()
    s.raw = Raw(b.port)
    return s.raw


def test_share_state_survives_restart(own_broker, names):
    topic, group = names
    b = own_broker(**{"share.coordinator.snapshot.update.records.per.snapshot": 3})
    create_topic(b.bootstrap, topic, 1)
    raw = Raw(b.port)
    tid = raw.call(3, 12, {"topics": [{"topic_id": b"\0" * 16, "name": topic}], "allow_auto_topic_creation": False,
                           "include_topic_authorized_operations": False})["topics"][0]["topic_id"]
    key = _key(group, tid, 0)
    c = wait_until(lambda: (r := raw.call(10, 6, {"key_type": 2, "coordinator_keys": [key]})["coordinators"][0])
                   ["error_code"] == 0 and r, what="a share coordinator")
    assert (c["key"], c["node_id"], c["port"]) == (key, 0, b.port)
    s = State(raw, group, tid, 0)
    wait_until(lambda: s.summary(0)["error_code"] == 0, what="the state partition loaded")
    # never initialised: read and write refused as Kafka does; the summary says so
    assert (s.read(0)["error_code"], s.write(0, 0, 0, [])["error_code"]) == (INVALID_REQUEST, INVALID_REQUEST)
    assert (s.summary(0)["start_offset"], s.summary(0)["delivery_complete_count"]) == (-1, -1)
    assert s.init(1, 0)["error_code"] == 0
    assert s.read(1)["start_offset"] == 0
    for i in range(5):  # a leader at epoch 1 acknowledges ten records at a time
        assert s.write(1, 1, 10 * i, [(10 * i, 10 * i + 4, 2, 1), (10 * i + 5, 10 * i + 9, 0, 1 + i)],
                       dcc=5)["error_code"] == 0
    before = s.read(2)  # a new leader: epoch 2 recorded
    assert before["error_code"] == 0 and before["start_offset"] == 40
    assert _batches(before) == [(40, 44, 2, 1), (45, 49, 0, 5)]
    assert s.read(1)["error_code"] == FENCED_LEADER_EPOCH
    assert s.write(1, 1, 40, [])["error_code"] == FENCED_LEADER_EPOCH
    assert s.write(0, 2, 40, [])["error_code"] == FENCED_STATE_EPOCH
    assert s.init(0, 7)["error_code"] == FENCED_STATE_EPOCH
    raw = _restart(b, s, raw)
    try:
        after = wait_until(lambda: (r := s.read(2))["error_code"] == 0 and r, what="the state read back")
        assert (after["state_epoch"], after["start_offset"], _batches(after)) == (1, 40, _batches(before))
        summary = s.summary(2)
        assert (summary["state_epoch"], summary["leader_epoch"], summary["start_offset"],
                summary["delivery_complete_count"]) == (1, 2, 40, 5)
        assert s.read(1)["error_code"] == FENCED_LEADER_EPOCH  # the leader epoch survived too
        # the records, in Kafka's format: a snapshot at init, then a snapshot after every 3 updates
        from samsa.coordinator.host import coordinator_partition
        recs = _records(b.bootstrap, coordinator_partition(_key(group, tid, 0), 50))
        kinds = [k for k, _ in recs]
        # (init; the read at leader epoch 1; five writes; the read at leader epoch 2)
        assert kinds == [sr.SNAPSHOT, sr.UPDATE, sr.UPDATE, sr.UPDATE, sr.SNAPSHOT, sr.UPDATE, sr.UPDATE, sr.UPDATE]
        assert [v["snapshot_epoch"] for _, v in recs] == [0, 0, 0, 0, 1, 1, 1, 1]
        last_snapshot = recs[4][1]
        assert (last_snapshot["state_epoch"], last_snapshot["leader_epoch"], last_snapshot["start_offset"]) == (1, 1, 20)
        assert [(b["first_offset"], b["delivery_state"]) for b in last_snapshot["state_batches"]] == [(20, 2), (25, 0)]
        assert recs[6][1]["start_offset"] == 40 and recs[6][1]["delivery_complete_count"] == 5
        assert recs[-1][1]["leader_epoch"] == 2 and recs[-1][1]["state_batches"] == []
        # samsa dump-log --share-group-state-decoder prints them as Kafka's tool does
        import subprocess
        import sys
        seg = b.data_dir / "logs" / f"{sr.SHARE_STATE_TOPIC}-{coordinator_partition(_key(group, tid, 0), 50)}" \
            / "00000000000000000000.log"
        dumped = subprocess.run([sys.executable, "-m", "samsa.cli.main", "dump-log", "--share-group-state-decoder",
                                 "--files", str(seg)], capture_output=True, text=True, timeout=60)
        assert dumped.returncode == 0, dumped.stderr
        payloads = [line for line in dumped.stdout.splitlines() if "payload:" in line]
        assert len(payloads) == 8 and f'"groupId":"{group}"' in payloads[0]
        assert 'key: {"type":"0"' in payloads[0] and '"snapshotEpoch":0' in payloads[0] and '"stateEpoch":1' in payloads[0]
        assert 'key: {"type":"1"' in payloads[1] and '"leaderEpoch":1' in payloads[1]
        # deleted: gone, and gone after another restart
        assert s.delete()["error_code"] == 0
        assert s.read(3)["error_code"] == INVALID_REQUEST
    finally:
        raw.close()
    raw = _restart(b, s, raw)
    try:
        wait_until(lambda: s.summary(0)["error_code"] == 0, what="the state partition loaded again")
        assert s.read(3)["error_code"] == INVALID_REQUEST
    finally:
        raw.close()


def _describe_offsets(raw: Raw, group: str, topics=None) -> dict:
    return raw.call(90, 1, {"groups": [{"group_id": group, "topics": topics}]})["groups"][0]


def test_share_group_offsets_and_deletion(gbroker, names):
    """A share group's offsets come from the share coordinator's state; AlterShareGroupOffsets and
    DeleteShareGroupOffsets change it on an empty group only; DeleteGroups deletes it with the group."""
    from confluent_kafka import Producer
    topic, group = names
    create_topic(gbroker.bootstrap, topic, 2)
    p = Producer({"bootstrap.servers": gbroker.bootstrap})
    for i in range(10):
        p.produce(topic, b"v%d" % i, partition=0)
    p.flush(30)
    raw = Raw(gbroker.port)
    try:
        wait_until(lambda: raw.call(10, 3, {"key": group, "key_type": 0})["error_code"] == 0, what="a coordinator")
        tid = raw.call(3, 12, {"topics": [{"topic_id": b"\0" * 16, "name": topic}], "allow_auto_topic_creation": False,
                               "include_topic_authorized_operations": False})["topics"][0]["topic_id"]
        m = str(uuid.uuid4())
        joined = raw.call(76, 1, {"group_id": group, "member_id": m, "member_epoch": 0, "rack_id": None,
                                  "subscribed_topic_names": [topic]})
        assert joined["error_code"] == 0
        # a leader's state for partition 0: records 0-3 acknowledged, start offset 4
        s = State(raw, group, tid, 0)
        wait_until(lambda: raw.call(10, 6, {"key_type": 2, "coordinator_keys": [_key(group, tid, 0)]})
                   ["coordinators"][0]["error_code"] == 0 and s.summary(0)["error_code"] == 0,
                   what="the share coordinator")
        assert s.init(0, -1)["error_code"] == 0
        assert s.write(0, 1, 4, [(4, 5, 0, 1)], dcc=0)["error_code"] == 0
        d = _describe_offsets(raw, group)
        rows = {(t["topic_name"], q["partition_index"]): (q["start_offset"], q["lag"]) for t in d["topics"]
                for q in t["partitions"]}
        assert rows == {(topic, 0): (4, 6), (topic, 1): (-1, -1)}  # partition 1 never read
        alter = raw.call(91, 0, {"group_id": group, "topics": [{"topic_name": topic, "partitions": [
            {"partition_index": 0, "start_offset": 8}]}]})
        assert alter["error_code"] == 68                       # NON_EMPTY_GROUP while a member is in
        assert raw.call(76, 1, {"group_id": group, "member_id": m, "member_epoch": joined["member_epoch"],
                                "rack_id": None, "subscribed_topic_names": None})["error_code"] == 0
        assert raw.call(76, 1, {"group_id": group, "member_id": m, "member_epoch": -1, "rack_id": None,
                                "subscribed_topic_names": None})["error_code"] == 0
        alter = raw.call(91, 0, {"group_id": group, "topics": [{"topic_name": topic, "partitions": [
            {"partition_index": 0, "start_offset": 8}]}]})
        assert alter["error_code"] == 0 and alter["responses"][0]["partitions"][0]["error_code"] == 0
        assert (s.read(1)["state_epoch"], s.read(1)["start_offset"], _batches(s.read(1))) == (1, 8, [])
        d = _describe_offsets(raw, group, [{"topic_name": topic, "partitions": [0]}])
        assert (d["topics"][0]["partitions"][0]["start_offset"], d["topics"][0]["partitions"][0]["lag"]) == (8, 2)
        # DeleteGroups: the group's share state goes with it
        assert raw.call(42, 2, {"groups_names": [group]})["results"][0]["error_code"] == 0
        assert s.read(1)["error_code"] == INVALID_REQUEST
        gone = _describe_offsets(raw, group)
        assert (gone["error_code"], gone["topics"]) == (0, [])  # as Kafka answers for an unknown group
    finally:
        raw.close()
