"""Share groups (KIP-932): ShareGroupHeartbeat's and ShareGroupDescribe's answers to bad and
ordinary requests, ListGroups and DescribeGroups of a share group, and the refusals between
group types, on both brokers. Epochs are compared relative to the first one each broker gave."""

from __future__ import annotations

import re
import uuid

from harness import create_topic
from waiting import wait_until


def _names() -> tuple[str, str]:
    tag = uuid.uuid4().hex[:8]
    return f"diff-share-{tag}", f"diff-share-group-{tag}"


def _ready(side, group: str) -> None:
    """Until the group's coordinator is found and has loaded its partition (a Kafka node started a
    moment ago answers NOT_COORDINATOR while it loads)."""
    wait_until(lambda: side.call(10, {"key": group, "key_type": 0}, 3)["error_code"] == 0
               and side.call(77, {"group_ids": [group], "include_authorized_operations": False}, 1)
               ["groups"][0]["error_code"] not in (14, 15, 16), f"a coordinator for {group} on {side.name}", 30)


def _hb(side, group: str, member: str, epoch: int, topics: list[str] | None = None, **kw) -> dict:
    body = {"group_id": group, "member_id": member, "member_epoch": epoch, "rack_id": None,
            "subscribed_topic_names": topics}
    body.update(kw)
    return side.call(76, body, 1)


def _describe(side, group: str) -> dict:
    return side.call(77, {"group_ids": [group], "include_authorized_operations": False}, 1)["groups"][0]


def _answer(r: dict, group: str, epochs: dict[int, str] | None = None) -> tuple[int, str | None]:
    message = r["error_message"]
    for n, name in (epochs or {}).items():
        message = message.replace(f"({n})", f"({name})") if message else message
    return r["error_code"], message.replace(group, "G") if message else message


def _member() -> str:
    return str(uuid.uuid4())


def test_share_heartbeat_validation(diff):
    topic, group = _names()

    def run(side):
        create_topic(side, topic, 2)
        _ready(side, group)
        m = _member()
        return [_answer(_hb(side, group, "", 0, [topic]), group),
                _answer(_hb(side, group, m, 0), group),
                _answer(_hb(side, group, m, 0, []), group),
                _answer(_hb(side, group, m, 0, [topic], rack_id=""), group),
                _answer(_hb(side, group, m, -2), group),
                _answer(_hb(side, group, m, -3), group),
                _answer(_hb(side, group, m, 4), group),
                _answer(_hb(side, group, m, -1), group),
                _answer(_hb(side, "", m, 0, [topic]), group)]
    diff(run)


def test_share_heartbeat_join_fence_leave(diff):
    topic, group = _names()

    def run(side):
        create_topic(side, topic, 2)
        _ready(side, group)
        m = _member()
        joined = _hb(side, group, m, 0, [topic])
        epoch = joined["member_epoch"]
        names = {epoch: "E", epoch + 3: "E+3", epoch - 1: "E-1"}
        out = [(joined["error_code"], joined["member_id"] == m, joined["heartbeat_interval_ms"],
                joined["assignment"] is not None)]

        def assigned():
            r = _hb(side, group, m, epoch)
            return r["assignment"] is not None and r or None
        # Kafka may compute the first assignment a moment later (group.share.assignment.interval.ms)
        got = joined if joined["assignment"] and joined["assignment"]["topic_partitions"] else None
        if got is None:
            got = wait_until(assigned, "an assignment", 30)
            epoch = got["member_epoch"]
            names = {epoch: "E", epoch + 3: "E+3", epoch - 1: "E-1"}
        out.append(sorted(p for t in got["assignment"]["topic_partitions"] for p in t["partitions"]))
        out.append(_answer(_hb(side, group, m, epoch + 3), group, names))
        out.append(_answer(_hb(side, group, "nobody", epoch), group, names))
        again = _hb(side, group, m, epoch)
        out.append((again["error_code"], again["member_epoch"] - epoch, again["assignment"]))
        rejoin = _hb(side, group, m, 0, [topic])  # the same member id at epoch 0: rejoining
        out.append(("rejoin", rejoin["error_code"], rejoin["error_message"] and "message",
                    rejoin["assignment"] is not None))
        if rejoin["error_code"] == 0:
            epoch = rejoin["member_epoch"]
        d = _describe(side, group)
        out.append((d["error_code"], d["group_state"], d["group_epoch"] - epoch, d["assignment_epoch"] - epoch,
                    d["assignor_name"], [(x["member_epoch"] - epoch, x["client_id"], x["subscribed_topic_names"],
                                          x["rack_id"], [(t["topic_name"], sorted(t["partitions"]))
                                                         for t in x["assignment"]["topic_partitions"]])
                                         for x in d["members"]]))
        listed = [g for g in side.call(16, {"states_filter": [], "types_filter": []}, 5)["groups"]
                  if g["group_id"] == group]
        out.append([(g["protocol_type"], g["group_state"], g["group_type"]) for g in listed])
        dg = side.call(15, {"groups": [group], "include_authorized_operations": False}, 6)["groups"][0]
        out.append((dg["error_code"], dg["group_state"], dg["error_message"] and dg["error_message"].replace(group, "G")))
        left = _hb(side, group, m, -1)
        out.append((left["error_code"], left["member_epoch"], left["assignment"]))
        d = _describe(side, group)
        out.append((d["group_state"], d["members"]))
        out.append(side.call(42, {"groups_names": [group]}, 2)["results"][0]["error_code"])
        d = _describe(side, group)
        out.append(_answer(d, group))
        return out
    diff(run)


def test_share_group_kinds_refused(diff):
    topic, group = _names()

    def run(side):
        create_topic(side, topic, 1)
        _ready(side, group)
        _hb(side, group, _member(), 0, [topic])
        out = []
        c = side.call(68, {"group_id": group, "member_id": _member(), "member_epoch": 0, "instance_id": None,
                           "rack_id": None, "rebalance_timeout_ms": 30000, "subscribed_topic_names": [topic],
                           "subscribed_topic_regex": None, "server_assignor": None, "topic_partitions": []}, 1)
        out.append(_answer(c, group))
        j = side.call(11, {"group_id": group, "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000,
                           "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
                           "protocols": [{"name": "range", "metadata": b""}]}, 5)
        out.append(j["error_code"])
        cd = side.call(69, {"group_ids": [group], "include_authorized_operations": False}, 0)["groups"][0]
        out.append(_answer(cd, group))
        oc = side.call(8, {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                           "group_instance_id": None, "retention_time_ms": -1,
                           "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                                      "committed_leader_epoch": -1,
                                                                      "committed_metadata": ""}]}]}, 8)
        out.append(oc["topics"][0]["partitions"][0]["error_code"])
        of = side.call(9, {"groups": [{"group_id": group, "member_id": None, "member_epoch": -1,
                                       "topics": [{"name": topic, "partition_indexes": [0]}]}],
                           "require_stable": False}, 9)["groups"][0]
        out.append(("offset fetch", of["error_code"], [(p["error_code"], p["committed_offset"])
                                                       for t in of["topics"] for p in t["partitions"]]))
        od = side.call(47, {"group_id": group, "topics": [{"name": topic, "partitions": [{"partition_index": 0}]}]},
                       0)
        out.append(("offset delete", od["error_code"]))
        other = group + "-c"
        _ready(side, other)
        side.call(68, {"group_id": other, "member_id": _member(), "member_epoch": 0, "instance_id": None,
                       "rack_id": None, "rebalance_timeout_ms": 30000, "subscribed_topic_names": [topic],
                       "subscribed_topic_regex": None, "server_assignor": None, "topic_partitions": []}, 1)
        out.append(_answer(_hb(side, other, _member(), 0, [topic]), other))
        out.append(_answer(_describe(side, other), other))
        classic = group + "-k"
        _ready(side, classic)
        side.call(8, {"group_id": classic, "generation_id_or_member_epoch": -1, "member_id": "",
                      "group_instance_id": None, "retention_time_ms": -1,
                      "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                                 "committed_leader_epoch": -1,
                                                                 "committed_metadata": ""}]}]}, 8)
        out.append(_answer(_hb(side, classic, _member(), 0, [topic]), classic))
        return out
    diff(run)


def test_share_version_feature(diff):
    """ApiVersions: the share.version feature (supported and finalized) and ShareGroupHeartbeat's and
    ShareGroupDescribe's versions."""
    def run(side):
        r = side.call(18, {"client_software_name": "diff", "client_software_version": "1"}, 4)
        return ([f for f in r["supported_features"] if f["name"] == "share.version"],
                [f for f in r["finalized_features"] if f["name"] == "share.version"],
                [(a["api_key"], a["min_version"], a["max_version"]) for a in r["api_keys"] if a["api_key"] in (76, 77)])
    diff(run)


SHARE_GROUP_KEYS = ["share.auto.offset.reset", "share.isolation.level", "share.record.lock.duration.ms",
                    "share.session.timeout.ms", "share.heartbeat.interval.ms", "share.delivery.count.limit",
                    "share.partition.max.record.locks"]


def _group_configs(side, group: str, keys: list[str] | None) -> list:
    r = side.call(32, {"resources": [{"resource_type": 32, "resource_name": group, "configuration_keys": keys}],
                       "include_synonyms": True, "include_documentation": False}, 4)["results"][0]
    return [r["error_code"], r["error_message"],
            sorted(({k: v for k, v in c.items() if k != "documentation"} for c in r["configs"]),
                   key=lambda c: c["name"])]


def _alter_group(side, group: str, configs: dict[str, str | None]) -> tuple[int, str | None]:
    r = side.call(44, {"resources": [{"resource_type": 32, "resource_name": group, "configs": [
        {"name": k, "config_operation": 0 if v is not None else 1, "value": v} for k, v in configs.items()]}],
        "validate_only": False}, 1)["responses"][0]
    # (the lower bound is the broker's group.share.min.* key, which a test fixture may lower)
    message = re.sub(r"in the range \d+ to", "in the range <min> to", r["error_message"] or "") or None
    return r["error_code"], message


def _group_applied(side, group: str, key: str, done) -> None:
    """Until the group's ``key`` as described satisfies ``done``: Kafka applies an accepted
    alteration through its metadata log, so a describe right after it may still show the old one."""
    wait_until(lambda: done(_group_configs(side, group, [key])[2][0]), f"{key} of {group} altered on {side.name}", 30)


def test_share_group_configs(diff):
    _, group = _names()

    def run(side):
        out = [_group_configs(side, group, SHARE_GROUP_KEYS)]
        for key, value in [("share.auto.offset.reset", "earliest"), ("share.auto.offset.reset", "by_duration:PT1H"),
                           ("share.auto.offset.reset", "nope"), ("share.isolation.level", "read_committed"),
                           ("share.isolation.level", "nope"), ("share.record.lock.duration.ms", "20000"),
                           ("share.record.lock.duration.ms", "100"), ("share.delivery.count.limit", "3"),
                           ("share.delivery.count.limit", "11"), ("share.session.timeout.ms", "50000"),
                           ("share.heartbeat.interval.ms", "6000"), ("share.heartbeat.interval.ms", "x"),
                           ("share.partition.max.record.locks", "200")]:
            out.append((key, value, _alter_group(side, group, {key: value})))
        _group_applied(side, group, "share.partition.max.record.locks", lambda c: c["value"] == "200")
        out.append(_group_configs(side, group, SHARE_GROUP_KEYS))
        out.append(_alter_group(side, group, {k: None for k in SHARE_GROUP_KEYS}))
        _group_applied(side, group, "share.isolation.level", lambda c: c["config_source"] != 8)  # no group override
        out.append(_group_configs(side, group, ["share.isolation.level"]))
        return out
    diff(run)
