"""Partition assignors of the classic consumer protocol, and the protocol's bytes.

The group leader runs one assignor over every member's subscription. Built in, with the
names Java and librdkafka use on the wire:

* ``range`` — per topic, consecutive ranges of partitions, the first members one more
* ``roundrobin`` — all partitions, dealt to the members in turn
* ``cooperative-sticky`` — balanced, moving as few partitions as possible; with the
  cooperative protocol (KIP-429) a partition changing owner is first only revoked, and
  given to its new owner in the rebalance that follows

Members are ordered as Java orders them: by ``group.instance.id`` where set (those
first), else by member id. An assignor is any object with ``name``,
``supported_protocols`` and ``assign(partitions_per_topic, subscriptions)``.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable, Protocol

from samsa.client.config import ASSIGNOR_ALIASES, ConfigError, load_plugin
from samsa.client.types import TopicPartition
from samsa.protocol import codec, errors

EAGER, COOPERATIVE = "eager", "cooperative"
SUBSCRIPTION_VERSION = 3
ASSIGNMENT_VERSION = 3


@dataclass
class Subscription:
    topics: list[str]
    user_data: bytes | None = None
    owned_partitions: list[TopicPartition] = field(default_factory=list)
    generation_id: int = -1
    rack_id: str | None = None
    group_instance_id: str | None = None  # from the JoinGroup response, not in the bytes


@dataclass
class Assignment:
    partitions: list[TopicPartition]
    user_data: bytes | None = None


class Assignor(Protocol):
    name: str
    supported_protocols: tuple[str, ...]

    def assign(self, partitions_per_topic: dict[str, int],
               subscriptions: dict[str, Subscription]) -> dict[str, list[TopicPartition]]: ...


# ---------------------------------------------------------------------------- the bytes

def _grouped(tps: Iterable[TopicPartition], topic_key: str) -> list[dict[str, Any]]:
    by_topic: dict[str, list[int]] = defaultdict(list)
    for tp in tps:
        by_topic[tp.topic].append(tp.partition)
    return [{topic_key: t, "partitions": sorted(ps)} for t, ps in sorted(by_topic.items())]


def _version(data: bytes) -> int:
    if len(data) < 2:
        raise errors.InconsistentGroupProtocolError("consumer protocol bytes too short")
    version = int.from_bytes(data[:2], "big", signed=True)
    if version < 0:
        raise errors.InconsistentGroupProtocolError(f"consumer protocol version {version}")
    return min(version, 3)  # newer versions only append fields: read what we know


def encode_subscription(sub: Subscription, version: int = SUBSCRIPTION_VERSION) -> bytes:
    body = {"topics": sorted(sub.topics), "user_data": sub.user_data,
            "owned_partitions": _grouped(sub.owned_partitions, "topic"),
            "generation_id": sub.generation_id, "rack_id": sub.rack_id}
    return version.to_bytes(2, "big") + codec.encode_bytes("ConsumerProtocolSubscription", version, body)


def decode_subscription(data: bytes) -> Subscription:
    version = _version(data)
    body, _ = codec.decode("ConsumerProtocolSubscription", version, memoryview(data), 2)
    owned = [TopicPartition(t["topic"], p) for t in body.get("owned_partitions") or [] for p in t["partitions"]]
    user_data = body.get("user_data")
    return Subscription(list(body["topics"]), bytes(user_data) if user_data is not None else None, owned,
                        body.get("generation_id", -1), body.get("rack_id"))


def encode_assignment(a: Assignment, version: int = ASSIGNMENT_VERSION) -> bytes:
    body = {"assigned_partitions": _grouped(a.partitions, "topic"), "user_data": a.user_data}
    return version.to_bytes(2, "big") + codec.encode_bytes("ConsumerProtocolAssignment", version, body)


def decode_assignment(data: bytes) -> Assignment:
    if not data:
        return Assignment([])  # the leader gave this member nothing
    version = _version(data)
    body, _ = codec.decode("ConsumerProtocolAssignment", version, memoryview(data), 2)
    user_data = body.get("user_data")
    return Assignment([TopicPartition(t["topic"], p) for t in body["assigned_partitions"] for p in t["partitions"]],
                      bytes(user_data) if user_data is not None else None)


# ---------------------------------------------------------------------------- helpers

def member_order(subscriptions: dict[str, Subscription]) -> list[str]:
    """Static members first by instance id, then the others by member id (Java's MemberInfo order)."""
    def key(member_id: str) -> tuple[int, str]:
        instance = subscriptions[member_id].group_instance_id
        return (0, instance) if instance else (1, member_id)
    return sorted(subscriptions, key=key)


def _empty(subscriptions: dict[str, Subscription]) -> dict[str, list[TopicPartition]]:
    return {m: [] for m in subscriptions}


# ---------------------------------------------------------------------------- range

class RangeAssignor:
    name = "range"
    supported_protocols = (EAGER,)

    def assign(self, partitions_per_topic: dict[str, int],
               subscriptions: dict[str, Subscription]) -> dict[str, list[TopicPartition]]:
        out = _empty(subscriptions)
        order = member_order(subscriptions)
        topics = sorted({t for s in subscriptions.values() for t in s.topics})
        for topic in topics:
            count = partitions_per_topic.get(topic)
            if not count:
                continue
            members = [m for m in order if topic in subscriptions[m].topics]
            per, extra = divmod(count, len(members))
            start = 0
            for i, m in enumerate(members):
                n = per + (1 if i < extra else 0)
                out[m].extend(TopicPartition(topic, p) for p in range(start, start + n))
                start += n
        return out


# ---------------------------------------------------------------------------- roundrobin

class RoundRobinAssignor:
    name = "roundrobin"
    supported_protocols = (EAGER,)

    def assign(self, partitions_per_topic: dict[str, int],
               subscriptions: dict[str, Subscription]) -> dict[str, list[TopicPartition]]:
        out = _empty(subscriptions)
        order = member_order(subscriptions)
        if not order:
            return out
        topics = sorted({t for s in subscriptions.values() for t in s.topics})
        i = 0
        for topic in topics:
            for p in range(partitions_per_topic.get(topic) or 0):
                # the next member in the circle that subscribes to this topic
                for _ in range(len(order)):
                    m = order[i % len(order)]
                    i += 1
                    if topic in subscriptions[m].topics:
                        out[m].append(TopicPartition(topic, p))
                        break
        return out


# ---------------------------------------------------------------------------- cooperative-sticky

class CooperativeStickyAssignor:
    """Balanced (partition counts differ by at most one where subscriptions allow) and sticky
    (a partition stays with its owner unless balance needs it elsewhere)."""

    name = "cooperative-sticky"
    supported_protocols = (COOPERATIVE, EAGER)

    def assign(self, partitions_per_topic: dict[str, int],
               subscriptions: dict[str, Subscription]) -> dict[str, list[TopicPartition]]:
        order = member_order(subscriptions)
        rank = {m: i for i, m in enumerate(order)}
        eligible: dict[TopicPartition, list[str]] = {}
        for topic in sorted({t for s in subscriptions.values() for t in s.topics}):
            members = [m for m in order if topic in subscriptions[m].topics]
            for p in range(partitions_per_topic.get(topic) or 0):
                eligible[TopicPartition(topic, p)] = members
        previous = self._previous_owners(subscriptions, eligible)
        owned: dict[str, set[TopicPartition]] = {m: set() for m in order}
        for tp, m in previous.items():
            owned[m].add(tp)

        def least_loaded(candidates: list[str]) -> str:
            return min(candidates, key=lambda c: (len(owned[c]), rank[c]))

        for tp in sorted(eligible):
            if tp not in previous and eligible[tp]:
                owned[least_loaded(eligible[tp])].add(tp)
        self._balance(owned, eligible, rank)
        out = {m: sorted(owned[m]) for m in order}
        # KIP-429: a partition moving to another member is only revoked now; its new owner
        # gets it in the next rebalance, once the old owner has let it go.
        for m, tps in out.items():
            out[m] = [tp for tp in tps if previous.get(tp, m) == m]
        return out

    @staticmethod
    def _previous_owners(subscriptions: dict[str, Subscription],
                         eligible: dict[TopicPartition, list[str]]) -> dict[TopicPartition, str]:
        """Who owned what, from the members' own claims: the highest generation wins a
        partition; two claims of one generation void each other."""
        claims: dict[TopicPartition, tuple[int, str | None]] = {}
        for m, sub in subscriptions.items():
            for tp in sub.owned_partitions:
                if m not in eligible.get(tp, ()):
                    continue  # no longer subscribed, or the partition is gone
                gen = sub.generation_id
                held = claims.get(tp)
                if held is None or gen > held[0]:
                    claims[tp] = (gen, m)
                elif gen == held[0]:
                    claims[tp] = (gen, None)
        return {tp: m for tp, (_, m) in claims.items() if m is not None}

    @staticmethod
    def _balance(owned: dict[str, set[TopicPartition]], eligible: dict[TopicPartition, list[str]],
                 rank: dict[str, int]) -> None:
        """Move partitions from the most to the least loaded eligible members until no move
        narrows the gap (each move lowers the sum of squared counts, so this ends)."""
        while True:
            moved = False
            for giver in sorted(owned, key=lambda m: (-len(owned[m]), rank[m])):
                load = len(owned[giver])
                best: tuple[int, int, TopicPartition, str] | None = None
                for tp in owned[giver]:
                    for taker in eligible[tp]:
                        n = len(owned[taker])
                        if n < load - 1 and (best is None or (n, rank[taker], tp) < best[:3]):
                            best = (n, rank[taker], tp, taker)
                if best is not None:
                    owned[giver].discard(best[2])
                    owned[best[3]].add(best[2])
                    moved = True
                    break
            if not moved:
                return


BUILT_IN = {a.name: a for a in (RangeAssignor, RoundRobinAssignor, CooperativeStickyAssignor)}


def load_assignors(specs: Any, configs: dict[str, Any]) -> list[Any]:
    """``partition.assignment.strategy``: names (``range``), Java class names, dotted Python
    names, classes or instances, in preference order."""
    if isinstance(specs, str):
        specs = specs.split(",")
    elif isinstance(specs, type) or hasattr(specs, "assign"):
        specs = [specs]
    out = []
    for spec in specs or []:
        if isinstance(spec, str):
            spec = spec.strip()
            if not spec:
                continue
            name = ASSIGNOR_ALIASES.get(spec, spec)
            if name in BUILT_IN:
                out.append(BUILT_IN[name]())
                continue
        instance = load_plugin(spec, configs)
        if not hasattr(instance, "assign") or not getattr(instance, "name", None):
            raise ConfigError(f"Invalid value {spec} for configuration partition.assignment.strategy: "
                              f"an assignor needs a name and an assign() method")
        out.append(instance)
    if not out:
        raise ConfigError("partition.assignment.strategy must name at least one assignor")
    return out


def rebalance_protocol(assignors: list[Any]) -> str:
    """COOPERATIVE only if every configured assignor supports it (as Java decides)."""
    protocols = [set(getattr(a, "supported_protocols", (EAGER,))) for a in assignors]
    return COOPERATIVE if all(COOPERATIVE in p for p in protocols) else EAGER
