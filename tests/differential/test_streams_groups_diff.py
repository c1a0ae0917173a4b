"""Streams groups (KIP-1071): StreamsGroupHeartbeat's and StreamsGroupDescribe's answers to bad and
ordinary requests on both brokers, the tasks assigned (active and standby, the sticky task assignor),
revocation before reassignment, the internal topics the broker creates, and a streams group in
ListGroups, DescribeGroups and the other group types' heartbeats.

Epochs are compared by how they move (the same, or higher), not by value: Kafka 4.4.0 bumps the group
epoch once for each internal topic its controller creates; Samsa creates them before it answers."""

from __future__ import annotations

import uuid

from harness import create_topic, wait_leaders
from waiting import wait_until


def _names() -> tuple[str, str]:
    tag = uuid.uuid4().hex[:8]
    return f"diff-streams-{tag}", f"diff-streams-app-{tag}"


def _describe(side, group: str) -> dict:
    return side.call(89, {"group_ids": [group], "include_authorized_operations": False}, 1)["groups"][0]


def _ready(side, group: str) -> None:
    wait_until(lambda: side.call(10, {"key": group, "key_type": 0}, 3)["error_code"] == 0
               and _describe(side, group)["error_code"] not in (14, 15, 16),
               f"a coordinator for {group} on {side.name}", 60)


def _topology(topic: str, group: str, epoch: int = 0) -> dict:
    """A word count's: subtopology 0 reads the input and writes the repartition topic; subtopology 1
    reads it and keeps a store with a changelog."""
    return {"epoch": epoch, "subtopologies": [
        {"subtopology_id": "0", "source_topics": [topic], "source_topic_regex": [], "state_changelog_topics": [],
         "repartition_sink_topics": [f"{group}-counts-repartition"], "repartition_source_topics": [],
         "copartition_groups": []},
        {"subtopology_id": "1", "source_topics": [], "source_topic_regex": [],
         "state_changelog_topics": [{"name": f"{group}-counts-changelog", "partitions": 0, "replication_factor": 0,
                                     "topic_configs": [{"key": "cleanup.policy", "value": "compact"}]}],
         "repartition_sink_topics": [],
         "repartition_source_topics": [{"name": f"{group}-counts-repartition", "partitions": 0,
                                        "replication_factor": 0, "topic_configs": [
                                            {"key": "cleanup.policy", "value": "delete"},
                                            {"key": "retention.ms", "value": "-1"}]}],
         "copartition_groups": []}]}


def _hb(side, group: str, member: str, epoch: int, topology: dict | None = None, **kw) -> dict:
    joining = epoch == 0
    body = {"group_id": group, "member_id": member, "member_epoch": epoch, "endpoint_information_epoch": 0,
            "instance_id": None, "rack_id": None, "rebalance_timeout_ms": 30000 if joining else -1,
            "topology": topology if joining else None,
            "active_tasks": [] if joining else None, "standby_tasks": [] if joining else None,
            "warmup_tasks": [] if joining else None, "process_id": f"process-{member}" if joining else None,
            "user_endpoint": None, "client_tags": [] if joining else None,
            "task_offsets": [] if joining else None, "task_end_offsets": [] if joining else None,
            "shutdown_application": False}
    body.update(kw)
    return side.call(88, body, 1)


def _answer(r: dict, group: str) -> tuple[int, str | None]:
    message = r["error_message"]
    return r["error_code"], message.replace(group, "G") if message else message


def _tasks(r: dict) -> dict | None:
    if r["active_tasks"] is None:
        return None
    return {kind: {t["subtopology_id"]: sorted(t["partitions"]) for t in r[f"{kind}_tasks"] if t["partitions"]}
            for kind in ("active", "standby", "warmup")}


def test_streams_heartbeat_validation(diff):
    topic, group = _names()

    def run(side):
        create_topic(side, topic, 2)
        _ready(side, group)
        m = "member-" + uuid.uuid4().hex[:8]
        t = _topology(topic, group)
        out = {"before": [
            _answer(_hb(side, "", m, 0, t), group),
            _answer(_hb(side, group, "", 0, t), group),
            _answer(_hb(side, group, m, 0, t, rebalance_timeout_ms=-1), group),
            _answer(_hb(side, group, m, 0, None), group),
            _answer(_hb(side, group, m, 0, t, active_tasks=None), group),
            _answer(_hb(side, group, m, 0, t, standby_tasks=[{"subtopology_id": "0", "partitions": [0]}]), group),
            _answer(_hb(side, group, m, 0, t, warmup_tasks=None), group),
            _answer(_hb(side, group, m, 0, t, instance_id=""), group),
            _answer(_hb(side, group, m, 0, t, rack_id=""), group),
            _answer(_hb(side, group, m, -3), group),
            _answer(_hb(side, group, m, -2), group),
            _answer(_hb(side, group, m, 4), group),
        ]}
        joined = _hb(side, group, m, 0, t)
        epoch = joined["member_epoch"]
        out["joined"] = (joined["error_code"], joined["member_id"] == m, joined["heartbeat_interval_ms"],
                         joined["task_offset_interval_ms"], joined["acceptable_recovery_lag"], _tasks(joined))
        out["after"] = [
            _answer(_hb(side, group, m, epoch + 7), group)[0],
            _answer(_hb(side, group, "someone-else", epoch), group),
            _answer(_hb(side, group, "other-" + m, 0, _topology(topic + "-x", group)), group),
        ]
        # StreamsGroupHeartbeat v0: the deprecated int32 AcceptableRecoveryLagLegacy in place of v1's int64
        body = {"group_id": group, "member_id": m, "member_epoch": epoch, "endpoint_information_epoch": 0,
                "rebalance_timeout_ms": -1}
        v0 = side.call(88, body, 0)
        out["v0"] = (v0["error_code"], v0["member_epoch"] == epoch, v0["heartbeat_interval_ms"],
                     v0["acceptable_recovery_lag_legacy"], v0["task_offset_interval_ms"],
                     # MISSING_INTERNAL_TOPICS aside: Kafka's controller may not have made them yet
                     [st for st in v0["status"] if st["status_code"] != 3])
        left = _hb(side, group, m, -1)
        out["left"] = (left["error_code"], left["member_epoch"])
        code, message = _answer(_hb(side, group, m, -1), group)
        out["left-again"] = (code, message.replace(m, "M") if message else message)
        return out
    diff(run)


def _settle(side, group: str, answers: dict[str, dict]) -> dict[str, dict]:
    """Heartbeats of each member in turn (each reporting the tasks it holds) until every one has
    active tasks and the group is Stable; each member's tasks and last status."""
    held = {m: {"active_tasks": [], "standby_tasks": [], "warmup_tasks": []} for m in answers}

    def note(m: str, answer: dict) -> None:
        assert answer["error_code"] == 0, answer
        answers[m] = answer
        if answer["active_tasks"] is not None:
            held[m].update({k: answer[k] for k in held[m]})

    for m, a in answers.items():
        note(m, a)

    def settled() -> bool:
        for m in answers:
            note(m, _hb(side, group, m, answers[m]["member_epoch"], **held[m]))
        return all(h["active_tasks"] for h in held.values()) and _describe(side, group)["group_state"] == "Stable"
    wait_until(settled, f"tasks settled on {side.name}", 60, interval=0.3)
    return {m: {"tasks": {k: {t["subtopology_id"]: sorted(t["partitions"]) for t in v if t["partitions"]}
                          for k, v in held[m].items()}, "status": answers[m]["status"]} for m in answers}


def _described(d: dict, names: dict[str, str]) -> dict:
    members = sorted(d["members"], key=lambda m: names[m["member_id"]])
    return {"error": d["error_code"], "state": d["group_state"], "assignor": d["assignor_name"],
            "epochs_settled": d["group_epoch"] == d["assignment_epoch"], "topology": d["topology"],
            "members": [{"name": names[m["member_id"]], "settled": m["member_epoch"] == d["assignment_epoch"],
                         "process": m["process_id"].replace(m["member_id"], "ID"), "client_id": m["client_id"],
                         "endpoint": m["user_endpoint"], "assignment": m["assignment"],
                         "target": m["target_assignment"], "is_classic": m["is_classic"]} for m in members]}


def test_streams_tasks_standbys_and_revocation(diff):
    topic, group = _names()

    def run(side):
        create_topic(side, topic, 2)
        wait_leaders(side, topic, 2)
        _ready(side, group)
        altered = side.call(44, {"resources": [{"resource_type": 32, "resource_name": group, "configs": [
            {"name": "streams.num.standby.replicas", "config_operation": 0, "value": "1"},
            {"name": "streams.initial.rebalance.delay.ms", "config_operation": 0, "value": "0"}]}],
            "validate_only": False}, 1)["responses"][0]["error_code"]
        # Kafka applies a group's configs through its metadata log: the first heartbeat waits until
        # the group's configs say what was set (Kafka answered it UNKNOWN_SERVER_ERROR at times)
        wait_until(lambda: {(c["name"], c["value"]) for c in side.call(32, {"resources": [
            {"resource_type": 32, "resource_name": group, "configuration_keys": [
                "streams.num.standby.replicas", "streams.initial.rebalance.delay.ms"]}],
            "include_synonyms": False, "include_documentation": False}, 4)["results"][0]["configs"]}
            >= {("streams.num.standby.replicas", "1"), ("streams.initial.rebalance.delay.ms", "0")},
            f"the group's configs on {side.name}", 30)
        m1, m2 = "m1-" + uuid.uuid4().hex[:8], "m2-" + uuid.uuid4().hex[:8]
        names = {m1: "m1", m2: "m2"}
        t = _topology(topic, group)
        first = _hb(side, group, m1, 0, t, user_endpoint={"host": "h1", "port": 7001})
        one = _settle(side, group, {m1: first})[m1]
        alone = _described(_describe(side, group), names)
        joined = _hb(side, group, m2, 0, t, user_endpoint={"host": "h2", "port": 7002})
        # m1 is told to give up tasks before m2 gets them: its next answer keeps its epoch.
        epoch = one_epoch(side, group, m1)
        revoke = _hb(side, group, m1, epoch)
        settled = _settle(side, group, {m1: revoke, m2: joined})
        both = _described(_describe(side, group), names)
        listed = [(g["group_type"], g["protocol_type"], g["group_state"]) for g in side.call(
            16, {"states_filter": [], "types_filter": []}, 5)["groups"] if g["group_id"] == group]
        classic = side.call(15, {"groups": [group], "include_authorized_operations": False}, 6)["groups"][0]
        consumer = side.call(68, {"group_id": group, "member_id": "c" * 22, "member_epoch": 0, "instance_id": None,
                                  "rack_id": None, "rebalance_timeout_ms": 30000, "subscribed_topic_names": [topic],
                                  "subscribed_topic_regex": None, "server_assignor": None,
                                  "topic_partitions": []}, 1)
        join = side.call(11, {"group_id": group, "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000,
                              "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
                              "protocols": [{"name": "range", "metadata": b""}], "reason": None}, 9)
        internal = side.call(3, {"topics": [{"name": f"{group}-counts-{k}", "topic_id": bytes(16)}
                                            for k in ("repartition", "changelog")],
                                 "allow_auto_topic_creation": False}, 12)["topics"]
        changelog = side.call(32, {"resources": [{"resource_type": 2, "resource_name": f"{group}-counts-changelog",
                                                  "configuration_keys": ["cleanup.policy"]}],
                                   "include_synonyms": False, "include_documentation": False}, 4)["results"][0]
        for m in (m1, m2):
            _hb(side, group, m, -1)
        # The first answer's tasks are left out: Kafka's coordinator has none to give until its
        # controller has created the internal topics; Samsa creates them before it answers.
        return {"altered": altered, "first": (first["error_code"], first["member_epoch"] > 0),
                "one": one, "alone": alone,
                "joined": (joined["error_code"], _tasks(joined)),
                "revoke": (revoke["error_code"], revoke["member_epoch"] == epoch, _tasks(revoke)),
                "m1": settled[m1], "m2": settled[m2], "both": both, "listed": listed,
                "describe_groups": (classic["error_code"], (classic["error_message"] or "").replace(group, "G"),
                                    classic["group_state"]),
                "consumer_heartbeat": _answer(consumer, group),
                "join_group": join["error_code"],
                "internal": sorted((t["name"].replace(group, "G"), t["error_code"], len(t["partitions"]))
                                   for t in internal),
                "changelog": (changelog["error_code"], [(c["name"], c["value"]) for c in changelog["configs"]]),
                "empty": _describe(side, group)["group_state"]}
    diff(run)


def one_epoch(side, group: str, member: str) -> int:
    """The member's epoch as the group's description gives it."""
    return next(m["member_epoch"] for m in _describe(side, group)["members"] if m["member_id"] == member)


def test_streams_describe_unknown_and_missing_source(diff):
    topic, group = _names()

    def run(side):
        _ready(side, group)
        unknown = _describe(side, group)
        m = "m-" + uuid.uuid4().hex[:8]
        joined = _hb(side, group, m, 0, _topology(topic + "-absent", group))
        d = _describe(side, group)
        # the source topic created: the group becomes ready and the member gets its tasks
        create_topic(side, topic + "-absent", 2)
        settled = _settle(side, group, {m: joined})[m]
        _hb(side, group, m, -1)
        return {"unknown": (unknown["error_code"], (unknown["error_message"] or "").replace(group, "G"),
                            unknown["group_state"]),
                "joined": (joined["error_code"], [(s["status_code"], s["status_detail"].replace(topic, "T"))
                                                  for s in joined["status"] if s["status_code"] != 5],
                           _tasks(joined)),
                "state": d["group_state"], "settled": settled}
    diff(run)


STREAMS_KEYS = ["streams.session.timeout.ms", "streams.heartbeat.interval.ms", "streams.num.standby.replicas",
                "streams.initial.rebalance.delay.ms", "streams.assignment.interval.ms"]


def test_streams_group_configs(diff):
    """The streams.* group configs Samsa has: their defaults and synonyms (DescribeConfigs of a GROUP),
    a value set, and values out of the broker's bounds refused with Kafka's words."""
    _, group = _names()

    def alter(side, name: str, value: str) -> tuple[int, str | None]:
        r = side.call(44, {"resources": [{"resource_type": 32, "resource_name": group, "configs": [
            {"name": name, "config_operation": 0, "value": value}]}], "validate_only": False}, 1)["responses"][0]
        return r["error_code"], r["error_message"]

    def describe(side) -> list:
        r = side.call(32, {"resources": [{"resource_type": 32, "resource_name": group,
                                          "configuration_keys": STREAMS_KEYS}],
                           "include_synonyms": True, "include_documentation": False}, 4)["results"][0]
        return sorted((c["name"], c["value"], c["config_source"], c["config_type"],
                       [(s["name"], s["value"], s["source"]) for s in c["synonyms"]]) for c in r["configs"])

    def run(side):
        _ready(side, group)
        before = describe(side)
        out = {"before": before,
               "set": alter(side, "streams.num.standby.replicas", "1"),
               "too many standbys": alter(side, "streams.num.standby.replicas", "3"),
               "session too short": alter(side, "streams.session.timeout.ms", "1000"),
               "heartbeat too long": alter(side, "streams.heartbeat.interval.ms", "20000"),
               "negative delay": alter(side, "streams.initial.rebalance.delay.ms", "-1")}
        out["after"] = describe(side)
        return out
    diff(run)


def test_streams_group_replaces_an_empty_classic_group(diff):
    """An application moving from the classic protocol to the streams one: its classic group, empty
    now, with committed offsets; a streams member joins under the same id. And a live classic group
    refuses it."""
    topic, group = _names()

    def classic_member(side) -> str:
        body = {"group_id": group, "session_timeout_ms": 30000, "rebalance_timeout_ms": 30000, "member_id": "",
                "group_instance_id": None, "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": b""}], "reason": None}
        first = side.call(11, body, 9)
        member = first["member_id"]
        joined = side.call(11, {**body, "member_id": member}, 9)
        assert joined["error_code"] == 0, joined
        synced = side.call(14, {"group_id": group, "generation_id": joined["generation_id"], "member_id": member,
                                "group_instance_id": None, "protocol_type": "consumer", "protocol_name": "range",
                                "assignments": [{"member_id": member, "assignment": b""}]}, 5)
        assert synced["error_code"] == 0, synced
        return member

    def run(side):
        create_topic(side, topic, 2)
        _ready(side, group)
        member = classic_member(side)
        live = _hb(side, group, "streams-member", 0, _topology(topic, group))
        side.call(13, {"group_id": group, "members": [{"member_id": member, "group_instance_id": None,
                                                       "reason": None}]}, 5)
        joined = _hb(side, group, "streams-member", 0, _topology(topic, group))
        listed = [(g["group_type"], g["protocol_type"]) for g in side.call(
            16, {"states_filter": [], "types_filter": []}, 5)["groups"] if g["group_id"] == group]
        _hb(side, group, "streams-member", -1)
        return {"live": _answer(live, group), "joined": joined["error_code"], "listed": listed}
    diff(run)
