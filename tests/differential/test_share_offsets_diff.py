"""A share group's offsets (KIP-932): DescribeShareGroupOffsets (v0-1, with lag),
AlterShareGroupOffsets and DeleteShareGroupOffsets, their refusals while the group has members
and for unknown groups and topics, on both brokers."""

from __future__ import annotations

import uuid

from harness import create_topic
from waiting import wait_until


def _describe(side, group: str, topics: dict[str, list[int]] | None, version: int = 1) -> list:
    r = side.call(90, {"groups": [{"group_id": group, "topics": None if topics is None else [
        {"topic_name": t, "partitions": ps} for t, ps in topics.items()]}]}, version)["groups"][0]
    return [r["error_code"], r["error_message"] and r["error_message"].replace(group, "G"),
            sorted((t["topic_name"], [(p["partition_index"], p["start_offset"], p["leader_epoch"], p.get("lag"),
                                       p["error_code"], p["error_message"]) for p in t["partitions"]])
                   for t in r["topics"])]


def _alter(side, group: str, offsets: dict[str, dict[int, int]]) -> list:
    r = side.call(91, {"group_id": group, "topics": [
        {"topic_name": t, "partitions": [{"partition_index": p, "start_offset": o} for p, o in ps.items()]}
        for t, ps in offsets.items()]}, 0)
    return [r["error_code"], r["error_message"] and r["error_message"].replace(group, "G"),
            sorted((t["topic_name"], [(p["partition_index"], p["error_code"], p["error_message"])
                                      for p in t["partitions"]]) for t in r["responses"])]


def _delete(side, group: str, topics: list[str]) -> list:
    r = side.call(92, {"group_id": group, "topics": [{"topic_name": t} for t in topics]}, 0)
    return [r["error_code"], r["error_message"] and r["error_message"].replace(group, "G"),
            sorted((t["topic_name"], t["error_code"], t["error_message"]) for t in r["responses"])]


def _hb(side, group: str, member: str, epoch: int, topics: list[str] | None = None) -> dict:
    return side.call(76, {"group_id": group, "member_id": member, "member_epoch": epoch, "rack_id": None,
                          "subscribed_topic_names": topics}, 1)


def test_share_group_offsets(diff):
    tag = uuid.uuid4().hex[:8]
    topic, other, group = f"diff-soff-{tag}", f"diff-soff-other-{tag}", f"diff-soff-group-{tag}"

    def run(side):
        create_topic(side, topic, 2)
        create_topic(side, other, 1)
        side.produce(topic, [(None, b"x%d" % i) for i in range(5)], partition=0)
        # (until the coordinator has loaded the group's partition: a Kafka node started a moment ago
        # answers NOT_COORDINATOR while it loads)
        wait_until(lambda: side.call(10, {"key": group, "key_type": 0}, 3)["error_code"] == 0
                   and side.call(77, {"group_ids": [group], "include_authorized_operations": False}, 1)
                   ["groups"][0]["error_code"] not in (14, 15, 16), "a coordinator", 30)
        out = [("unknown group", _describe(side, group, None)),
               ("unknown group topics", _describe(side, group, {topic: [0]})),
               ("delete unknown group", _delete(side, group, [topic])),
               ("alter unknown group", _alter(side, group, {topic: {0: 1}})),
               ("listed", [(g["group_id"] == group, g["group_state"], g["group_type"]) for g in side.call(
                   16, {"states_filter": [], "types_filter": ["share"]}, 5)["groups"] if g["group_id"] == group]),
               ("described after alter", _describe(side, group, None)),
               ("delete after alter", _delete(side, group, [topic]))]
        consumer = group + "-c"
        side.call(8, {"group_id": consumer, "generation_id_or_member_epoch": -1, "member_id": "",
                      "group_instance_id": None, "retention_time_ms": -1,
                      "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                                 "committed_leader_epoch": -1,
                                                                 "committed_metadata": ""}]}]}, 8)
        out += [("consumer group", _describe(side, consumer, None), _describe(side, consumer, {topic: [0]}),
                 _alter(side, consumer, {topic: {0: 1}}), _delete(side, consumer, [topic]))]
        m = str(uuid.uuid4())
        joined = _hb(side, group, m, 0, [topic])
        out.append(("joined", joined["error_code"]))
        # Kafka initialises the assigned topic's share partitions a moment after (Samsa at once)
        out.append(("members, all", wait_until(lambda: (d := _describe(side, group, None))[2] and d,
                                               "the assigned topic's share partitions initialised", 30)))
        out.append(("members, topic", _describe(side, group, {topic: [0, 1], other: [0]})))
        out.append(("alter with members", _alter(side, group, {topic: {0: 1}})))
        out.append(("delete with members", _delete(side, group, [topic])))
        out.append(("left", _hb(side, group, m, -1)["error_code"]))
        out.append(("alter", _alter(side, group, {topic: {0: 2, 1: 0}})))
        out.append(("described", _describe(side, group, None)))
        # (a partition the topic does not have is left out: Kafka 4.4 never answered that request)
        out.append(("described v0", _describe(side, group, {topic: [0, 1]}, 0)))
        out.append(("alter bad", _alter(side, group, {topic: {7: 1}, "no-such-topic": {0: 1}, other: {0: 3}})))
        out.append(("described", _describe(side, group, None)))
        out.append(("delete", _delete(side, group, [topic, "no-such-topic"])))
        out.append(("described", _describe(side, group, None)))
        out.append(("described named", _describe(side, group, {topic: [0]})))
        return out
    diff(run)
