"""A streams group's topology made concrete (KIP-1071): how many tasks each subtopology has,
how many partitions each internal topic needs, which topics are missing. Pure functions.

A Kafka Streams application sends its topology in its first StreamsGroupHeartbeat: per
subtopology its source topics (the user's), the repartition topics it reads (internal,
``partitions`` 0 when the application leaves the count to the coordinator), the repartition
topics it writes to, its state changelog topics (internal; their count is the subtopology's
task count) and its copartition groups (topics that must have the same partition count).
:func:`configure` turns it, with the partition counts of the topics that exist, into a
:class:`Configured`: the task count of each subtopology, the internal topics to create, and
what keeps the group from being assigned (a status code and its detail, as Kafka words them).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

# StreamsGroupHeartbeatResponse.Status codes (Kafka's StreamsGroupHeartbeatResponse.Status).
STALE_TOPOLOGY = 0
MISSING_SOURCE_TOPICS = 1
INCORRECTLY_PARTITIONED_TOPICS = 2
MISSING_INTERNAL_TOPICS = 3
SHUTDOWN_APPLICATION = 4
ASSIGNMENT_DELAYED = 5


@dataclass(frozen=True)
class InternalTopic:
    name: str
    partitions: int
    replication_factor: int          # 0: the broker's default
    configs: tuple[tuple[str, str], ...]


@dataclass
class Configured:
    """The topology against the cluster's topics as they are."""
    tasks: dict[str, int] = field(default_factory=dict)             # subtopology id -> number of tasks
    partitions: dict[str, int] = field(default_factory=dict)        # internal topic -> its partition count
    to_create: list[InternalTopic] = field(default_factory=list)    # internal topics not there yet
    error: tuple[int, str] | None = None                            # a status that stops assignment

    @property
    def ready(self) -> bool:
        return self.error is None and not self.to_create


def _infos(sub: dict, key: str) -> list[dict]:
    return list(sub.get(key) or [])


def internal_names(topology: dict | None) -> set[str]:
    """The topology's own internal topics (repartition and changelog topics)."""
    out: set[str] = set()
    for sub in (topology or {}).get("subtopologies", []):
        out.update(sub.get("repartition_sink_topics") or [])
        out.update(t["name"] for t in _infos(sub, "repartition_source_topics") + _infos(sub, "state_changelog_topics"))
    return out


def sources(topology: dict, sub: dict, existing: Mapping[str, int] | None = None) -> list[str]:
    """A subtopology's source topics: those it names, and the existing topics its regular
    expressions match in full (not internal ones: ``__``-prefixed, or the topology's own)."""
    out = list(sub.get("source_topics") or [])
    patterns = []
    for rx in sub.get("source_topic_regex") or []:
        try:
            patterns.append(re.compile(rx))
        except re.error:
            continue
    if patterns and existing:
        own = internal_names(topology)
        out += sorted(t for t in existing if t not in out and not t.startswith("__") and t not in own
                      and any(p.fullmatch(t) for p in patterns))
    return out


def topic_names(topology: dict | None, existing: Mapping[str, int] | None = None) -> set[str]:
    """Every topic the topology names or matches (sources, internal topics)."""
    out: set[str] = set()
    for sub in (topology or {}).get("subtopologies", []):
        out.update(sources(topology or {}, sub, existing))
        out.update(sub.get("repartition_sink_topics") or [])
        out.update(t["name"] for t in _infos(sub, "repartition_source_topics") + _infos(sub, "state_changelog_topics"))
    return out


def configure(topology: dict, existing: Mapping[str, int]) -> Configured:
    """``existing``: topic name -> partition count, for every topic of the cluster."""
    subs = topology.get("subtopologies", [])
    out = Configured()
    missing = sorted({t for sub in subs for t in sub.get("source_topics") or [] if t not in existing})
    if missing:
        out.error = (MISSING_SOURCE_TOPICS, f"Source topics {', '.join(missing)} are missing.")
        return out
    # Repartition topics: a requested count, else that of the subtopologies writing to them.
    repartition: dict[str, int] = {}
    for sub in subs:
        for t in _infos(sub, "repartition_source_topics"):
            repartition[t["name"]] = t["partitions"] if t["partitions"] > 0 else 0
    writers = {name: [s for s in subs if name in (s.get("repartition_sink_topics") or [])] for name in repartition}

    def source_count(sub: dict) -> int:
        counts = [existing[t] for t in sources(topology, sub, existing)]
        counts += [repartition.get(t["name"], 0) for t in _infos(sub, "repartition_source_topics")]
        return max(counts, default=0)

    for _ in range(len(repartition) + 1):  # a fixed point: each pass settles at least one more
        changed = False
        for name, n in repartition.items():
            if n == 0:
                m = max((source_count(s) for s in writers[name]), default=0)
                if m > 0:
                    repartition[name], changed = m, True
        if not changed:
            break
    # Copartitioned topics share one count: the user's topics must agree; internal ones follow them.
    for sub in subs:
        named = list(sub.get("source_topics") or [])
        rsources = [t["name"] for t in _infos(sub, "repartition_source_topics")]
        for group in sub.get("copartition_groups") or []:
            users = [named[i] for i in group.get("source_topics") or [] if 0 <= i < len(named)]
            internal = [rsources[i] for i in group.get("repartition_source_topics") or [] if 0 <= i < len(rsources)]
            counts = {existing[t] for t in users}
            if len(counts) > 1:
                out.error = (INCORRECTLY_PARTITIONED_TOPICS, "Following topics do not have the same number of "
                                                             f"partitions: [{', '.join(sorted(users))}]")
                return out
            n = next(iter(counts)) if counts else max((repartition[t] for t in internal), default=0)
            for t in internal:
                if n > 0:
                    repartition[t] = n
    unknown = sorted(name for name, n in repartition.items() if n <= 0)
    if unknown:
        out.error = (MISSING_INTERNAL_TOPICS, f"Internal topics are missing: {', '.join(unknown)}")
        return out
    for sub in subs:
        out.tasks[sub["subtopology_id"]] = source_count(sub)
    requested: list[tuple[dict, int]] = []
    for sub in subs:
        for t in _infos(sub, "repartition_source_topics"):
            requested.append((t, repartition[t["name"]]))
        for t in _infos(sub, "state_changelog_topics"):
            requested.append((t, t["partitions"] if t["partitions"] > 0 else out.tasks[sub["subtopology_id"]]))
    for t, n in requested:
        out.partitions[t["name"]] = n
        if t["name"] in existing:
            if existing[t["name"]] != n and t["name"] in repartition:
                out.error = (INCORRECTLY_PARTITIONED_TOPICS,
                             f"Number of partitions [{existing[t['name']]}] of repartition topic [{t['name']}] "
                             f"doesn't match number of partitions [{n}] of the source topic.")
                return out
        elif all(c.name != t["name"] for c in out.to_create):
            out.to_create.append(InternalTopic(t["name"], n, t.get("replication_factor", 0), tuple(
                (kv["key"], kv["value"]) for kv in t.get("topic_configs") or [])))
    return out


def described(topology: dict, configured: Configured | None) -> dict:
    """The topology as StreamsGroupDescribe shows it: internal topics with their partition counts."""
    parts = configured.partitions if configured is not None else {}

    def info(t: dict) -> dict:
        return {"name": t["name"], "partitions": parts.get(t["name"], t["partitions"]),
                "replication_factor": t.get("replication_factor", 0),
                "topic_configs": [{"key": kv["key"], "value": kv["value"]} for kv in t.get("topic_configs") or []]}
    return {"epoch": topology.get("epoch", 0), "subtopologies": [
        {"subtopology_id": s["subtopology_id"], "source_topics": list(s.get("source_topics") or []),
         "repartition_sink_topics": list(s.get("repartition_sink_topics") or []),
         "state_changelog_topics": [info(t) for t in _infos(s, "state_changelog_topics")],
         "repartition_source_topics": [info(t) for t in _infos(s, "repartition_source_topics")]}
        for s in sorted(topology.get("subtopologies", []), key=lambda s: s["subtopology_id"])]}


def task_partitions(topology: dict, sub_id: str, existing: Mapping[str, int] | None = None) -> list[str]:
    """The topics whose partition p is task (sub_id, p)'s input: its sources and repartition sources."""
    for s in topology.get("subtopologies", []):
        if s["subtopology_id"] == sub_id:
            return sources(topology, s, existing) + [t["name"] for t in _infos(s, "repartition_source_topics")]
    return []
