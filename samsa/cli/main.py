"""``samsa``: one console script, one sub-command per Kafka tool.

``samsa topics ...`` is ``kafka-topics.sh ...`` with the same flags; every tool prints its
usage when run without arguments, and a failure prints one clear line and exits non-zero.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import sys

TOOLS = {
    "server": ("samsa.cli.server", "start or stop a broker (kafka-server-start.sh / kafka-server-stop.sh)"),
    "topics": ("samsa.cli.topics", "create, list, describe, alter and delete topics (kafka-topics.sh)"),
    "acls": ("samsa.cli.acls", "add, remove and list ACLs (kafka-acls.sh)"),
    "configs": ("samsa.cli.configs", "describe and alter topic and broker configs (kafka-configs.sh)"),
    "consumer-groups": ("samsa.cli.consumer_groups", "list, describe, reset and delete consumer groups (kafka-consumer-groups.sh)"),
    "share-groups": ("samsa.cli.share_groups", "list, describe, reset and delete share groups (kafka-share-groups.sh)"),
    "streams-groups": ("samsa.cli.streams_groups", "list, describe, reset and delete streams groups (kafka-streams-groups.sh)"),
    "leader-election": ("samsa.cli.leader_election", "elect preferred or unclean leaders (kafka-leader-election.sh)"),
    "reassign-partitions": ("samsa.cli.reassign_partitions", "move partitions between brokers (kafka-reassign-partitions.sh)"),
    "transactions": ("samsa.cli.transactions", "list, describe, find and abort hanging transactions (kafka-transactions.sh)"),
    "storage": ("samsa.cli.storage", "format KRaft log directories, print their meta.properties, random ids (kafka-storage.sh)"),
    "dump-log": ("samsa.cli.dump_log", "print the batches and records of a segment file (kafka-dump-log.sh)"),
    "console-producer": ("samsa.cli.console_producer", "send lines of stdin as records (kafka-console-producer.sh)"),
    "console-consumer": ("samsa.cli.console_consumer", "print records of topics to stdout (kafka-console-consumer.sh)"),
    "producer-perf-test": ("samsa.cli.producer_perf_test", "measure producer throughput and latency (kafka-producer-perf-test.sh)"),
    "consumer-perf-test": ("samsa.cli.consumer_perf_test", "measure consumer throughput (kafka-consumer-perf-test.sh)"),
    "console": ("samsa.cli.console", "a web console: brokers, topics, messages, consumer groups and lag"),
    "pipeline": ("samsa.cli.pipeline", "run the activity and payments pipelines on Spark, and feed them"),
    "connect-standalone": ("samsa.cli.connect_standalone", "a Kafka Connect worker on its own (connect-standalone.sh)"),
    "connect-distributed": ("samsa.cli.connect_distributed", "a Kafka Connect worker of a cluster (connect-distributed.sh)"),
    "schema-registry": ("samsa.cli.schema_registry", "the Schema Registry: subjects, versions and ids of Avro, JSON and Protobuf schemas (schema-registry-start)"),
    "mirror-maker": ("samsa.cli.mirror_maker", "MirrorMaker 2: replicate topics and consumer offsets between clusters (connect-mirror-maker.sh)"),
}


KAFKA_VERSION = "3.9"  # the Kafka release whose message schemas and tools Samsa follows


def version() -> str:
    try:
        return importlib.metadata.version("samsa")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def usage() -> str:
    lines = ["usage: samsa <tool> [options]   (samsa --version: the version)", "", "tools:"]
    lines += [f"  {name:<20} {help_}" for name, (_, help_) in TOOLS.items()]
    lines += ["", "Run a tool without options to see its usage."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0 if argv else 1
    if argv[0] in ("--version", "-V"):
        print(f"samsa {version()} (Kafka protocol {KAFKA_VERSION})")
        return 0
    tool = TOOLS.get(argv[0])
    if tool is None:
        print(f"samsa: unknown tool '{argv[0]}'\n\n{usage()}", file=sys.stderr)
        return 1
    module = importlib.import_module(tool[0])
    try:
        return module.main(argv[1:])
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
