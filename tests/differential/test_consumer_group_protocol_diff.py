"""The consumer group protocol (KIP-848): ConsumerGroupHeartbeat's and ConsumerGroupDescribe's
answers to bad and ordinary requests, on both brokers. A group's epochs are compared relative to the
first one each broker gave (Kafka 4.4.0 starts a group at epoch 2, Samsa at 1: GAPS.md)."""

from __future__ import annotations

import uuid

from harness import create_topic
from waiting import wait_until


def _names() -> tuple[str, str]:
    tag = uuid.uuid4().hex[:8]
    return f"diff-cgp-{tag}", f"diff-cgp-group-{tag}"


def _ready(side, group: str) -> None:
    """The group's coordinator found and serving. FindCoordinator already answers while Kafka still
    loads the group's __consumer_offsets partition (a node just started: each xdist worker starts its
    own), and a heartbeat then gets COORDINATOR_LOAD_IN_PROGRESS: so wait until ConsumerGroupDescribe
    of the (not yet existing) group gets past NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS and
    COORDINATOR_NOT_AVAILABLE."""
    wait_until(lambda: side.call(10, {"key": group, "key_type": 0}, 3)["error_code"] == 0,
               f"a coordinator for {group} on {side.name}", 30)
    wait_until(lambda: side.call(69, {"group_ids": [group], "include_authorized_operations": False}, 1)[
        "groups"][0]["error_code"] not in (14, 15, 16), f"the coordinator of {group} loaded on {side.name}", 60)


def _assigned(side, group: str, member: str, answer: dict) -> dict:
    """The member's first heartbeat answer that carries its partitions, from its joining ``answer`` on.
    Kafka 4.4.0's coordinator learns of a just-created topic from its metadata image a moment after the
    topic is served, and a member joining in between gets an empty assignment, its partitions on a later
    heartbeat (at a new epoch, after group.consumer.assignment.interval.ms): more often on a loaded
    machine. Samsa's first answer carries them."""
    def assigned() -> bool:
        nonlocal answer
        if answer["assignment"] and any(t["partitions"] for t in answer["assignment"]["topic_partitions"]):
            return True
        answer = _hb(side, group, member, answer["member_epoch"])
        assert answer["error_code"] == 0, answer
        return False
    wait_until(assigned, f"partitions assigned to {member} on {side.name}", 30, interval=0.2)
    return answer


def _hb(side, group: str, member: str, epoch: int, **kw) -> dict:
    body = {"group_id": group, "member_id": member, "member_epoch": epoch, "instance_id": None, "rack_id": None,
            "rebalance_timeout_ms": 30000 if epoch == 0 else -1, "subscribed_topic_names": None,
            "subscribed_topic_regex": None, "server_assignor": None, "topic_partitions": [] if epoch == 0 else None}
    body.update(kw)
    return side.call(68, body, 1)


def _answer(r: dict, epochs: dict[int, str] | None = None) -> tuple[int, str | None]:
    message = r["error_message"]
    for n, name in (epochs or {}).items():  # epochs in messages, relative to the broker's first
        message = message.replace(f"({n})", f"({name})") if message else message
    return r["error_code"], message


def test_heartbeat_join_validation(diff):
    topic, group = _names()

    def run(side):
        create_topic(side, topic, 3)
        _ready(side, group)
        m = "m" + "x" * 21
        out = [_answer(_hb(side, group, "", 0, subscribed_topic_names=[topic])),
               _answer(_hb(side, group, m, 0, subscribed_topic_names=[topic], rebalance_timeout_ms=-1)),
               _answer(_hb(side, group, m, 0)),
               _answer(_hb(side, group, m, 0, subscribed_topic_names=[topic], topic_partitions=None)),
               _answer(_hb(side, group, m, 0, subscribed_topic_names=[topic], server_assignor="nope")),
               _answer(_hb(side, group, m, -3)),
               _answer(_hb(side, group, m, -2))]
        # An invalid SubscribedTopicRegex is left out: in this sequence Kafka 4.4.0 answered NOT_COORDINATOR
        # with an empty message, where a fresh member gets INVALID_REGULAR_EXPRESSION (tests/groups pins that).
        return out
    diff(run)


def test_heartbeat_unknown_group_member_and_fenced_epoch(diff):
    topic, group = _names()

    def run(side):
        create_topic(side, topic, 3)
        _ready(side, group)
        m = uuid.uuid4().hex[:22]
        out = [_answer(_hb(side, group, m, 5))]
        joined = _assigned(side, group, m, _hb(side, group, m, 0, subscribed_topic_names=[topic]))
        epoch = joined["member_epoch"]
        names = {epoch: "E", epoch + 5: "E+5"}
        out.append((joined["error_code"], joined["heartbeat_interval_ms"],
                    sorted(p for t in joined["assignment"]["topic_partitions"] for p in t["partitions"])))
        out.append(_answer(_hb(side, group, "nobody", -1)))
        out.append(_answer(_hb(side, group, "nobody", epoch)))
        out.append(_answer(_hb(side, group, m, epoch + 5), names))
        again = _hb(side, group, m, epoch)
        out.append((again["error_code"], again["member_epoch"] - epoch, again["assignment"]))
        left = _hb(side, group, m, -1)
        out.append((left["error_code"], left["member_epoch"]))
        return [(c, msg.replace(group, "G") if isinstance(msg, str) else msg, *rest) for c, msg, *rest in out]
    diff(run)


def test_heartbeat_static_member_and_describe(diff):
    topic, group = _names()

    def run(side):
        create_topic(side, topic, 2)
        _ready(side, group)
        s1 = _assigned(side, group, "s1", _hb(side, group, "s1", 0, instance_id="inst",
                                              subscribed_topic_names=[topic]))
        taken = _answer(_hb(side, group, "s2", 0, instance_id="inst", subscribed_topic_names=[topic]))
        left = _hb(side, group, "s1", -2, instance_id="inst")
        back = _hb(side, group, "s2", 0, instance_id="inst", subscribed_topic_names=[topic])
        d = side.call(69, {"group_ids": [group], "include_authorized_operations": False}, 1)["groups"][0]
        return {"first": s1["error_code"], "taken": taken,
                "left": (left["error_code"], left["member_epoch"], left["heartbeat_interval_ms"]),
                "back": (back["error_code"], back["member_epoch"] == s1["member_epoch"],
                         back["assignment"] == s1["assignment"]),
                # group_state left out: Kafka computes the target assignment after
                # group.consumer.assignment.interval.ms (Assigning meanwhile), Samsa at once (GAPS.md)
                "describe": (d["error_code"], d["assignor_name"],
                             [(m["member_id"], m["instance_id"], m["member_type"], m["subscribed_topic_names"])
                              for m in d["members"]])}
    diff(run)


def test_describe_unknown_consumer_group(diff):
    diff(lambda side: [(g["group_id"], g["error_code"], g["error_message"]) for g in side.call(
        69, {"group_ids": ["diff-cgp-nobody"], "include_authorized_operations": False}, 1)["groups"]])
