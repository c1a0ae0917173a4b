"""The share coordinator's RPCs (KIP-932), as a share partition's leader sends them:
FindCoordinator for a share key, Initialize/Read/Write/Delete ShareGroupState and
ReadShareGroupStateSummary, their epochs fenced, on both brokers."""

from __future__ import annotations

import base64
import uuid

from harness import create_topic
from waiting import wait_until


def _kafka_uuid(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _topic_id(side, topic: str) -> bytes:
    r = side.call(3, {"topics": [{"name": topic}], "allow_auto_topic_creation": False}, 12)
    return r["topics"][0]["topic_id"]


def _coordinator(side, key: str) -> dict:
    return side.call(10, {"key_type": 2, "coordinator_keys": [key]}, 6)["coordinators"][0]


def _parts(r: dict, *fields: str) -> list:
    return [tuple(p.get(f) for f in ("partition", "error_code", "error_message", *fields))
            for t in r["results"] for p in t["partitions"]]


def _batches(bs: list[tuple[int, int, int, int]]) -> list[dict]:
    return [{"first_offset": a, "last_offset": b, "delivery_state": s, "delivery_count": c} for a, b, s, c in bs]


def test_share_state_rpcs(diff):
    tag = uuid.uuid4().hex[:8]
    topic, group = f"diff-sstate-{tag}", f"diff-sstate-group-{tag}"

    def run(side):
        create_topic(side, topic, 2)
        tid = _topic_id(side, topic)
        key = f"{group}:{_kafka_uuid(tid)}:0"
        wait_until(lambda: _coordinator(side, key)["error_code"] == 0, f"a share coordinator on {side.name}", 60)
        out = [(_coordinator(side, key)["key"] == key,)]

        def init(p, state_epoch, start):
            return _parts(side.call(83, {"group_id": group, "topics": [{"topic_id": tid, "partitions": [
                {"partition": p, "state_epoch": state_epoch, "start_offset": start}]}]}, 0))

        def read(p, leader_epoch):
            return _parts(side.call(84, {"group_id": group, "topics": [{"topic_id": tid, "partitions": [
                {"partition": p, "leader_epoch": leader_epoch}]}]}, 0), "state_epoch", "start_offset", "state_batches")

        def write(p, state_epoch, leader_epoch, start, batches, dcc=-1):
            return _parts(side.call(85, {"group_id": group, "topics": [{"topic_id": tid, "partitions": [
                {"partition": p, "state_epoch": state_epoch, "leader_epoch": leader_epoch, "start_offset": start,
                 "delivery_complete_count": dcc, "state_batches": _batches(batches)}]}]}, 1))

        def summary(p, leader_epoch):
            return _parts(side.call(87, {"group_id": group, "topics": [{"topic_id": tid, "partitions": [
                {"partition": p, "leader_epoch": leader_epoch}]}]}, 1),
                "state_epoch", "leader_epoch", "start_offset", "delivery_complete_count")

        def delete(p):
            return _parts(side.call(86, {"group_id": group, "topics": [{"topic_id": tid, "partitions": [
                {"partition": p}]}]}, 0))

        # The state partitions are loaded a moment after the topic is made: until then Kafka answers
        # NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS or, on a node just started, UNKNOWN_TOPIC_OR_PARTITION.
        for p in (0, 1):
            wait_until(lambda: _coordinator(side, f"{group}:{_kafka_uuid(tid)}:{p}")["error_code"] == 0
                       and summary(p, 0)[0][1] not in (3, 14, 15, 16),
                       f"share state partition of {p} loaded on {side.name}", 60)
        out += [("read unknown", read(0, 0)), ("summary unknown", summary(0, 0)),
                ("write unknown", write(0, 0, 0, 0, [])), ("read after write unknown", read(0, 0))]
        out += [("init", init(1, 1, 5)), ("init again", init(1, 1, 6)), ("init lower", init(1, 0, 7)), ("summary after init", summary(1, 0)),
                ("read", read(1, 3)), ("summary", summary(1, 3)), ("read lower leader", read(1, 2)),
                ("summary lower leader", summary(1, 2)),
                ("write", write(1, 1, 3, 10, [(10, 14, 0, 1), (15, 19, 2, 1)], 5)),
                ("read", read(1, 3)),
                ("write lower leader", write(1, 1, 2, 10, [])),
                ("write lower state", write(1, 0, 3, 10, [])),
                ("write higher state", write(1, 2, 3, 10, [])),
                ("write overlap", write(1, 1, 4, 12, [(13, 16, 4, 2)], 7)),
                ("read", read(1, 4)), ("summary", summary(1, 4)),
                ("init higher", init(1, 2, 100)), ("read", read(1, 4)),
                ("write adjacent", write(1, 2, 4, 100, [(100, 104, 0, 1)])),
                ("write adjacent", write(1, 2, 4, 100, [(105, 109, 0, 1), (110, 110, 2, 1)])),
                ("write gap", write(1, 2, 4, 100, [(120, 121, 0, 3)])),
                ("read", read(1, -1)), ("read", read(1, 4)),
                ("write start past", write(1, 2, 4, 106, [])), ("read", read(1, 4)),
                ("write leader -1", write(1, 2, -1, 106, [])),
                ("delete", delete(1)), ("read deleted", read(1, 5)), ("delete unknown", delete(0)),
                ("init after delete", init(1, 0, -1)), ("read", read(1, 0)), ("summary", summary(1, 0))]
        bad = side.call(84, {"group_id": "", "topics": [{"topic_id": tid, "partitions": [
            {"partition": 0, "leader_epoch": 0}]}]}, 0)
        out.append(("read empty group", _parts(bad)))
        fc = side.call(10, {"key_type": 2, "coordinator_keys": ["nonsense", f"{group}:xyz:0", ""]}, 6)
        out.append(("find bad keys", [(c["key"], c["error_code"], c["error_message"]) for c in fc["coordinators"]]))
        return out
    diff(run)
