"""``samsa topics``: kafka-topics.sh with Kafka's flags and output.

    samsa topics --bootstrap-server localhost:9092 --create --topic test --partitions 3 --replication-factor 1
    samsa topics --bootstrap-server localhost:9092 --describe --topic test

``--topic`` is a regular expression for --list/--describe/--alter/--delete (Kafka's
include-list syntax: commas separate alternatives), an exact name for --create.
"""

from __future__ import annotations

import argparse
import re
import sys

from samsa.cli.common import Parser, UsageError, admin_config, run_tool
from samsa.client.admin import Admin
from samsa.client.types import ConfigEntry, ConfigResource, NewPartitions, NewTopic, PartitionInfo, TopicDescription
from samsa.protocol import errors

DESCRIPTION = "Create, delete, describe, or change a topic."
ACTIONS = ("list", "describe", "create", "alter", "delete")
REPORT_FLAGS = ("under_replicated_partitions", "unavailable_partitions", "under_min_isr_partitions",
                "at_min_isr_partitions")
SHORT_MAX = 32767


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="samsa topics", description=DESCRIPTION)
    a = p.add_argument
    a("--bootstrap-server", metavar="<String: server to connect to>", help="REQUIRED: The Kafka server to connect to.")
    a("--zookeeper", help=argparse.SUPPRESS)
    a("--command-config", metavar="<String: command config property file>",
      help="Property file containing configs to be passed to Admin Client.")
    a("--list", action="store_true", help="List all available topics.")
    a("--create", action="store_true", help="Create a new topic.")
    a("--delete", action="store_true", help="Delete a topic.")
    a("--alter", action="store_true", help="Alter the number of partitions and replica assignment. "
      "(To alter topic configurations, the configs tool can be used.)")
    a("--describe", action="store_true", help="List details for the given topics.")
    a("--topic", metavar="<String: topic>", help="The topic to create, alter, describe or delete. "
      "It also accepts a regular expression, except for --create option.")
    a("--topic-id", metavar="<String: topic-id>", help="The topic-id to describe.")
    a("--config", metavar="<String: name=value>", action="append",
      help="A topic configuration override for the topic being created. It is supported only in combination with --create.")
    a("--partitions", metavar="<Integer: # of partitions>", type=int,
      help="The number of partitions for the topic being created or altered. "
      "If not supplied with --create, the topic uses the cluster default.")
    a("--replication-factor", metavar="<Integer: replication factor>", type=int,
      help="The replication factor for each partition in the topic being created. "
      "If not supplied, the topic uses the cluster default.")
    a("--replica-assignment", metavar="<String: broker_id_for_part1_replica1 : broker_id_for_part1_replica2 , ...>",
      help="A list of manual partition-to-broker assignments for the topic being created or altered.")
    a("--under-replicated-partitions", action="store_true",
      help="If set when describing topics, only show under-replicated partitions.")
    a("--unavailable-partitions", action="store_true",
      help="If set when describing topics, only show partitions whose leader is not available.")
    a("--under-min-isr-partitions", action="store_true",
      help="If set when describing topics, only show partitions whose isr count is less than the configured minimum.")
    a("--at-min-isr-partitions", action="store_true",
      help="If set when describing topics, only show partitions whose isr count is equal to the configured minimum.")
    a("--topics-with-overrides", action="store_true",
      help="If set when describing topics, only show topics that have overridden configs.")
    a("--if-exists", action="store_true",
      help="If set when altering or deleting or describing topics, the action will only execute if the topic exists.")
    a("--if-not-exists", action="store_true",
      help="If set when creating topics, the create request will not fail if the topic already exists.")
    a("--exclude-internal", action="store_true",
      help="Exclude internal topics when listing or describing topics. By default, the internal topics are included.")
    return p


# ---------------------------------------------------------------------------- arguments

def _cant(opts: argparse.Namespace, flag: str, allowed: tuple[str, ...]) -> None:
    """Kafka's checkInvalidArgs: ``flag`` only goes with the ``allowed`` actions."""
    if getattr(opts, flag.replace("-", "_")) in (None, False):
        return
    for action in ACTIONS:
        if action not in allowed and getattr(opts, action):
            raise UsageError(f'Option "[{flag}]" can\'t be used with option "[{action}]"')


def check_args(opts: argparse.Namespace) -> None:
    if opts.zookeeper is not None:
        raise UsageError("--zookeeper is not supported: Samsa's tools talk to the brokers, "
                         "use --bootstrap-server HOST:PORT instead")
    if sum(bool(getattr(opts, a)) for a in ACTIONS) != 1:
        raise UsageError("Command must include exactly one action: --list, --describe, --create, --alter or --delete")
    if not opts.bootstrap_server:
        raise UsageError("--bootstrap-server must be specified")
    if not (opts.list or opts.describe) and opts.topic is None:
        raise UsageError('Missing required argument "[topic]"')
    if opts.alter:
        if opts.config:
            raise UsageError('Option "[config]" can\'t be used with option "[alter]" '
                             "(To alter topic configurations, the configs tool can be used.)")
        if opts.partitions is None:
            raise UsageError('Missing required argument "[partitions]"')
    _cant(opts, "config", ("create", "alter"))
    _cant(opts, "partitions", ("create", "alter"))
    _cant(opts, "replication-factor", ("create",))
    _cant(opts, "replica-assignment", ("create", "alter"))
    if opts.create and opts.replica_assignment is not None:
        for other in ("partitions", "replication_factor"):
            if getattr(opts, other) is not None:
                raise UsageError(f'Option "[replica-assignment]" can\'t be used with option "[{other.replace("_", "-")}]"')
    for flag in REPORT_FLAGS + ("topics_with_overrides",):
        _cant(opts, flag.replace("_", "-"), ("describe",))
    if opts.topics_with_overrides:
        for flag in REPORT_FLAGS:
            if getattr(opts, flag):
                raise UsageError(f'Option "[{flag.replace("_", "-")}]" can\'t be used with option "[topics-with-overrides]"')
    _cant(opts, "if-exists", ("alter", "delete", "describe"))
    _cant(opts, "if-not-exists", ("create",))
    _cant(opts, "exclude-internal", ("list", "describe"))


def parse_replica_assignment(text: str) -> dict[int, list[int]]:
    """``"0:1,1:2"`` -> ``{0: [0, 1], 1: [1, 2]}`` (partition i gets the i-th group)."""
    out: dict[int, list[int]] = {}
    for i, group in enumerate(text.split(",")):
        try:
            brokers = [int(b.strip()) for b in group.split(":")]
        except ValueError:
            raise UsageError(f"Invalid replica assignment {text!r}: broker ids must be integers") from None
        dupes = sorted({b for b in brokers if brokers.count(b) > 1})
        if dupes:
            raise UsageError("Partition replica lists may not contain duplicate entries: " + ",".join(map(str, dupes)))
        out[i] = brokers
        if len(brokers) != len(out[0]):
            raise UsageError(f"Partition {i} has different replication factor: [{', '.join(map(str, brokers))}]")
    return out


def parse_configs(items: list[str] | None) -> dict[str, str]:
    out = {}
    for item in items or []:
        parts = re.split(r"\s*=\s*", item)
        if len(parts) != 2:
            raise UsageError('requirement failed: Invalid topic config: all configs to be added must be in the format "key=val".')
        out[parts[0].strip()] = parts[1].strip()
    return out


# ---------------------------------------------------------------------------- topic selection

def include_list(pattern: str) -> re.Pattern[str]:
    """Kafka's IncludeList: commas separate alternatives, spaces and quotes are dropped."""
    text = re.sub(r"[\"']+$", "", re.sub(r"^[\"']+", "", pattern.strip().replace(",", "|").replace(" ", "")))
    try:
        return re.compile(text)
    except re.error as e:
        raise UsageError(f"Invalid topic pattern {pattern!r}: {e}") from None


def select_topics(admin: Admin, pattern: str | None, exclude_internal: bool) -> list[str]:
    listings = admin.list_topics(include_internal=not exclude_internal)
    names = sorted(listings)
    if pattern is None:
        return names
    regex = include_list(pattern)
    return [n for n in names if regex.fullmatch(n)]


def ensure_exists(found: list[str], requested: str | None, require: bool) -> None:
    if requested and require and not found:
        raise UsageError(f"Topic '{requested}' does not exist as expected")


# ---------------------------------------------------------------------------- actions

def create(admin: Admin, opts: argparse.Namespace) -> None:
    name = opts.topic
    configs = parse_configs(opts.config)
    assignment = parse_replica_assignment(opts.replica_assignment) if opts.replica_assignment else None
    if "." in name or "_" in name:
        print("WARNING: Due to limitations in metric names, topics with a period ('.') or underscore ('_') could "
              "collide. To avoid issues it is best to use either, but not both.")
    rf, partitions = opts.replication_factor, opts.partitions
    if rf is not None and not 1 <= rf <= SHORT_MAX:
        raise UsageError(f"The replication factor must be between 1 and {SHORT_MAX} inclusive")
    if partitions is not None and partitions < 1:
        raise UsageError("The partitions must be greater than 0")
    topic = NewTopic(name, -1 if partitions is None else partitions, -1 if rf is None else rf, assignment, configs)
    try:
        admin.create_topics([topic])
    except errors.TopicAlreadyExistsError:
        if not opts.if_not_exists:
            raise
        return
    print(f"Created topic {name}.")


def list_(admin: Admin, opts: argparse.Namespace) -> None:
    print("\n".join(select_topics(admin, opts.topic, opts.exclude_internal)))


def alter(admin: Admin, opts: argparse.Namespace) -> None:
    topics = select_topics(admin, opts.topic, opts.exclude_internal)
    ensure_exists(topics, opts.topic, not opts.if_exists)
    if not topics:
        return
    assignment = parse_replica_assignment(opts.replica_assignment) if opts.replica_assignment else None
    requests: dict[str, int | NewPartitions] = {}
    if assignment:
        current = admin.describe_topics(topics)
        for name in topics:
            start = len(current[name].partitions)
            requests[name] = NewPartitions(opts.partitions, [r for p, r in sorted(assignment.items()) if p >= start])
    else:
        requests = {name: opts.partitions for name in topics}
    admin.create_partitions(requests)


def delete(admin: Admin, opts: argparse.Namespace) -> None:
    topics = select_topics(admin, opts.topic, opts.exclude_internal)
    ensure_exists(topics, opts.topic, not opts.if_exists)
    if topics:
        admin.delete_topics(topics)


def _ids(nodes: list[int]) -> str:
    return ",".join(str(n) for n in nodes)


def _min_isr(config: dict[str, ConfigEntry]) -> int:
    entry = config.get("min.insync.replicas")
    try:
        return int(entry.value) if entry and entry.value is not None else 1
    except ValueError:
        return 1


def _partition_wanted(opts: argparse.Namespace, p: PartitionInfo, live: set[int], min_isr: int) -> bool:
    if not any(getattr(opts, f) for f in REPORT_FLAGS):
        return True
    return bool(
        (opts.under_replicated_partitions and len(p.replicas) - len(p.isr) > 0)
        or (opts.unavailable_partitions and (p.leader is None or p.leader not in live))
        or (opts.under_min_isr_partitions and (p.leader is None or len(p.isr) < min_isr))
        or (opts.at_min_isr_partitions and len(p.isr) == min_isr))


def describe_lines(opts: argparse.Namespace, desc: TopicDescription, config: dict[str, ConfigEntry],
                   live: set[int]) -> list[str]:
    """Kafka's describe output for one topic: a topic line, then one line per partition."""
    lines = []
    reporting = any(getattr(opts, f) for f in REPORT_FLAGS)
    overrides = [e for e in config.values() if not e.is_default]
    if not reporting and (not opts.topics_with_overrides or overrides) and desc.partitions:
        head = f"Topic: {desc.name}"
        if desc.topic_id != "AAAAAAAAAAAAAAAAAAAAAA":
            head += f"\tTopicId: {desc.topic_id}"
        head += (f"\tPartitionCount: {len(desc.partitions)}\tReplicationFactor: {len(desc.partitions[0].replicas)}"
                 f"\tConfigs: " + ",".join(f"{e.name}={'null' if e.value is None else e.value}" for e in overrides))
        lines.append(head)
    if opts.topics_with_overrides:
        return lines
    min_isr = _min_isr(config)
    for p in desc.partitions:
        if _partition_wanted(opts, p, live, min_isr):
            leader = "none" if p.leader is None else str(p.leader)
            lines.append(f"\tTopic: {desc.name}\tPartition: {p.partition}\tLeader: {leader}"
                         f"\tReplicas: {_ids(p.replicas)}\tIsr: {_ids(p.isr)}")
    return lines


def describe(admin: Admin, opts: argparse.Namespace) -> None:
    if opts.topic_id:
        listings = admin.list_topics(include_internal=not opts.exclude_internal)
        topics = [n for n, t in listings.items() if t.topic_id == opts.topic_id]
        if not topics and not opts.if_exists:
            raise UsageError(f"TopicId '{opts.topic_id}' does not exist as expected")
    else:
        topics = select_topics(admin, opts.topic, opts.exclude_internal)
        ensure_exists(topics, opts.topic, not opts.if_exists)
    if not topics:
        return
    descriptions = admin.describe_topics(topics)
    configs = admin.describe_configs([ConfigResource("topic", t) for t in topics])
    live = {b.id for b in admin.describe_cluster().brokers}
    for name in topics:
        for line in describe_lines(opts, descriptions[name], configs.get(ConfigResource("topic", name), {}), live):
            print(line)


RUN = {"create": create, "list": list_, "alter": alter, "delete": delete, "describe": describe}


def main(argv: list[str] | None = None) -> int:
    def go(opts: argparse.Namespace) -> None:
        check_args(opts)
        config = admin_config(opts, "samsa-topics")
        action = next(a for a in ACTIONS if getattr(opts, a))
        with Admin(config) as admin:
            RUN[action](admin, opts)
    return run_tool(argv, build_parser(), go, description=DESCRIPTION,
                    failures=[((errors.KafkaError, ValueError), "Error while executing topic command : {}")])


if __name__ == "__main__":
    sys.exit(main())
