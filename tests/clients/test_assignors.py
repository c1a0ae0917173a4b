"""The consumer's partition assignors and the consumer protocol's bytes, without a broker."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from samsa.client.config import ConfigError
from samsa.client.consumer_internals.assignors import (COOPERATIVE, EAGER, Assignment, CooperativeStickyAssignor,
                                                       RangeAssignor, RoundRobinAssignor, Subscription,
                                                       decode_assignment, decode_subscription, encode_assignment,
                                                       encode_subscription, load_assignors, rebalance_protocol)
from samsa.client.types import TopicPartition as TP
from samsa.protocol import codec


def subs(**members: list[str]) -> dict[str, Subscription]:
    return {m: Subscription(topics) for m, topics in members.items()}


def test_range_gives_consecutive_ranges_first_members_one_more():
    out = RangeAssignor().assign({"t": 7, "u": 2}, subs(c1=["t", "u"], c2=["t", "u"], c3=["t"]))
    assert out == {"c1": [TP("t", 0), TP("t", 1), TP("t", 2), TP("u", 0)],
                   "c2": [TP("t", 3), TP("t", 4), TP("u", 1)],
                   "c3": [TP("t", 5), TP("t", 6)]}


def test_range_orders_static_members_by_instance_id_first():
    s = subs(a=["t"], b=["t"], c=["t"])
    s["c"].group_instance_id = "i1"  # static members come first, whatever their member id
    out = RangeAssignor().assign({"t": 3}, s)
    assert out == {"c": [TP("t", 0)], "a": [TP("t", 1)], "b": [TP("t", 2)]}


def test_roundrobin_deals_in_turn_and_skips_unsubscribed_members():
    out = RoundRobinAssignor().assign({"t": 3, "u": 3}, subs(c0=["t", "u"], c1=["t", "u"]))
    assert out == {"c0": [TP("t", 0), TP("t", 2), TP("u", 1)], "c1": [TP("t", 1), TP("u", 0), TP("u", 2)]}
    out = RoundRobinAssignor().assign({"t": 2, "u": 2}, subs(c0=["t"], c1=["t", "u"]))
    assert out == {"c0": [TP("t", 0)], "c1": [TP("t", 1), TP("u", 0), TP("u", 1)]}


def test_missing_topics_and_empty_groups():
    assert RangeAssignor().assign({}, subs(a=["nope"])) == {"a": []}
    assert RoundRobinAssignor().assign({"t": 1}, {}) == {}
    assert CooperativeStickyAssignor().assign({"t": 2}, subs(a=["nope"])) == {"a": []}


def _simulate_cooperative(members: list[str], counts: dict[str, int], owned: dict[str, list[TP]], gen: int):
    """One cooperative rebalance followed by the one its revocations cause; the final owners."""
    assignor = CooperativeStickyAssignor()
    for round_ in range(2):
        s = {m: Subscription(sorted(counts), owned_partitions=list(owned.get(m, [])), generation_id=gen + round_)
             for m in members}
        out = assignor.assign(counts, s)
        # KIP-429: nobody is given a partition another member still owns
        claimed = Counter(tp for tps in out.values() for tp in tps)
        assert all(n == 1 for n in claimed.values())
        for m in members:
            for tp in out[m]:
                assert all(tp not in owned.get(o, []) for o in members if o != m)
        owned = {m: out[m] for m in members}
    return owned


def test_cooperative_sticky_is_balanced_and_moves_as_little_as_possible():
    counts = {"t": 6}
    owned = _simulate_cooperative(["a", "b"], counts, {}, 1)
    assert sorted(len(v) for v in owned.values()) == [3, 3]
    before = {m: set(v) for m, v in owned.items()}
    owned = _simulate_cooperative(["a", "b", "c"], counts, owned, 2)
    assert sorted(len(v) for v in owned.values()) == [2, 2, 2]
    # a and b each kept two of their three partitions: only two moved, to c
    assert len(set(owned["a"]) & before["a"]) == 2 and len(set(owned["b"]) & before["b"]) == 2
    assert sorted(tp for v in owned.values() for tp in v) == [TP("t", p) for p in range(6)]


def test_cooperative_sticky_first_round_revokes_only():
    s = {"a": Subscription(["t"], owned_partitions=[TP("t", p) for p in range(4)], generation_id=3),
         "b": Subscription(["t"], generation_id=-1)}
    out = CooperativeStickyAssignor().assign({"t": 4}, s)
    assert len(out["a"]) == 2 and out["b"] == []  # two revoked from a, given to b next round


def test_cooperative_sticky_conflicting_claims():
    s = {"a": Subscription(["t"], owned_partitions=[TP("t", 0)], generation_id=5),
         "b": Subscription(["t"], owned_partitions=[TP("t", 0)], generation_id=4)}
    out = CooperativeStickyAssignor().assign({"t": 2}, s)
    assert TP("t", 0) in out["a"]  # the newer generation's claim wins


@pytest.mark.parametrize("seed", range(5))
def test_cooperative_sticky_random_memberships_converge(seed):
    rng = random.Random(seed)
    counts = {"x": rng.randint(1, 12), "y": rng.randint(0, 8)}
    owned: dict[str, list[TP]] = {}
    members = ["m0"]
    for gen in range(1, 8):
        if rng.random() < 0.6 or len(members) == 1:
            members.append(f"m{gen}")
        else:
            members.remove(rng.choice(members))
        owned = _simulate_cooperative(members, counts, {m: owned.get(m, []) for m in members}, gen * 10)
        loads = [len(owned[m]) for m in members]
        assert max(loads) - min(loads) <= 1
        assert sorted(tp for v in owned.values() for tp in v) == \
            sorted(TP(t, p) for t, n in counts.items() for p in range(n))


def test_heterogeneous_subscriptions_respected():
    s = subs(a=["x"], b=["x", "y"], c=["y"])
    out = CooperativeStickyAssignor().assign({"x": 4, "y": 4}, s)
    assert all(tp.topic == "x" for tp in out["a"]) and all(tp.topic == "y" for tp in out["c"])
    assert sorted(len(v) for v in out.values()) == [2, 3, 3]


def test_subscription_and_assignment_bytes_round_trip():
    sub = Subscription(["b", "a"], b"ud", [TP("a", 1), TP("a", 0)], 7, "rack1")
    data = encode_subscription(sub)
    assert data[:2] == b"\x00\x03"
    back = decode_subscription(data)
    assert (back.topics, back.user_data, back.owned_partitions, back.generation_id, back.rack_id) == \
        (["a", "b"], b"ud", [TP("a", 0), TP("a", 1)], 7, "rack1")
    a = decode_assignment(encode_assignment(Assignment([TP("t", 2), TP("s", 0)], None)))
    assert sorted(a.partitions) == [TP("s", 0), TP("t", 2)] and a.user_data is None
    assert decode_assignment(b"").partitions == []


def test_reads_older_and_newer_protocol_versions():
    v0 = b"\x00\x00" + codec.encode_bytes("ConsumerProtocolSubscription", 0, {"topics": ["t"], "user_data": None})
    assert decode_subscription(v0).topics == ["t"] and decode_subscription(v0).generation_id == -1
    # a future version 9 appends fields: what we know still reads
    v9 = b"\x00\x09" + encode_subscription(Subscription(["t"], None, [TP("t", 0)], 2))[2:] + b"future"
    assert decode_subscription(v9).owned_partitions == [TP("t", 0)]


def test_load_assignors_by_name_java_name_and_class():
    a = load_assignors("range,org.apache.kafka.clients.consumer.CooperativeStickyAssignor", {})
    assert [x.name for x in a] == ["range", "cooperative-sticky"]
    assert rebalance_protocol(a) == EAGER
    assert rebalance_protocol(load_assignors(["cooperative-sticky"], {})) == COOPERATIVE

    class Mine:
        name = "mine"
        supported_protocols = (EAGER,)

        def assign(self, counts, subscriptions):
            return {m: [] for m in subscriptions}
    assert load_assignors([Mine], {})[0].name == "mine"
    with pytest.raises(ConfigError):
        load_assignors(["no.such.Assignor"], {})
    with pytest.raises(ConfigError):
        load_assignors([], {})
