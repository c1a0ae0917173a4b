"""``samsa reassign-partitions``: kafka-reassign-partitions.sh with Kafka's flags, JSON and output.

    samsa reassign-partitions --bootstrap-server H:P --generate --topics-to-move-json-file topics.json --broker-list 1,2
    samsa reassign-partitions --bootstrap-server H:P --execute --reassignment-json-file plan.json
    samsa reassign-partitions --bootstrap-server H:P --verify --reassignment-json-file plan.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from samsa.cli.common import Parser, UsageError, admin_config, error_message, run_tool
from samsa.client.admin import Admin
from samsa.client.types import TopicPartition
from samsa.protocol import errors

DESCRIPTION = "This tool helps to move topic partitions between replicas."


def build_parser() -> Parser:
    p = Parser(prog="samsa reassign-partitions", description=DESCRIPTION)
    a = p.add_argument
    a("--bootstrap-server", required=True, help="the server(s) to use for bootstrapping.")
    a("--command-config", help="Property file containing configs to be passed to Admin Client.")
    a("--generate", action="store_true", help="Generate a candidate partition reassignment configuration.")
    a("--execute", action="store_true", help="Kick off the reassignment as specified by --reassignment-json-file.")
    a("--verify", action="store_true", help="Verify if the reassignment completed as specified by --reassignment-json-file.")
    a("--cancel", action="store_true", help="Cancel an active reassignment.")
    a("--list", action="store_true", help="List all active partition reassignments.")
    a("--topics-to-move-json-file", help='{"topics": [{"topic": "foo"}], "version": 1}')
    a("--broker-list", help='The list of brokers to which the partitions need to be reassigned, "0,1,2".')
    a("--reassignment-json-file", help="The JSON file with the partition reassignment configuration.")
    a("--disable-rack-aware", action="store_true", help="Disable rack aware replica assignment.")
    return p


def _read_json(path: str | None, flag: str) -> dict:
    if path is None:
        raise UsageError(f"Missing required argument \"[{flag}]\"")
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise UsageError(f"Cannot read {path}: {e}") from None


def _plan(data: dict) -> dict[TopicPartition, list[int]]:
    try:
        return {TopicPartition(p["topic"], int(p["partition"])): [int(r) for r in p["replicas"]]
                for p in data["partitions"]}
    except (KeyError, TypeError, ValueError) as e:
        raise UsageError(f"Invalid reassignment JSON: {e}") from None


def _json(assignment: dict[TopicPartition, list[int]]) -> str:
    return json.dumps({"version": 1, "partitions": [
        {"topic": tp.topic, "partition": tp.partition, "replicas": r, "log_dirs": ["any"] * len(r)}
        for tp, r in sorted(assignment.items())]}, separators=(",", ":"))


def current(admin: Admin, topics: list[str]) -> dict[TopicPartition, list[int]]:
    described = admin.describe_topics(topics)
    return {TopicPartition(t, p.partition): list(p.replicas) for t, d in described.items() for p in d.partitions}


def generate(admin: Admin, opts) -> None:
    topics = [t["topic"] for t in _read_json(opts.topics_to_move_json_file, "topics-to-move-json-file")["topics"]]
    if not opts.broker_list:
        raise UsageError('Missing required argument "[broker-list]"')
    brokers = [int(b) for b in opts.broker_list.split(",")]
    now = current(admin, topics)
    proposed = {}
    for i, (tp, replicas) in enumerate(sorted(now.items())):
        rf = len(replicas)
        if rf > len(brokers):
            raise UsageError(f"Replication factor: {rf} larger than available brokers: {len(brokers)}.")
        proposed[tp] = [brokers[(i + j) % len(brokers)] for j in range(rf)]
    print(f"Current partition replica assignment\n{_json(now)}\n")
    print(f"Proposed partition reassignment configuration\n{_json(proposed)}")


def execute(admin: Admin, opts) -> None:
    plan = _plan(_read_json(opts.reassignment_json_file, "reassignment-json-file"))
    now = current(admin, sorted({tp.topic for tp in plan}))
    print(f"Current partition replica assignment\n\n{_json({tp: now[tp] for tp in plan if tp in now})}\n\n"
          "Save this to use as the --reassignment-json-file option during rollback")
    results = admin.alter_partition_reassignments(plan)
    failed = {tp: e for tp, e in results.items() if e is not None}
    if failed:
        raise errors.KafkaError("Error reassigning partition(s):\n" + "\n".join(
            f"{tp.topic}-{tp.partition}: {error_message(e)}" for tp, e in sorted(failed.items())))
    print(f"Successfully started partition reassignment{'s' if len(plan) > 1 else ''} for "
          f"{','.join(f'{tp.topic}-{tp.partition}' for tp in sorted(plan))}")


def verify(admin: Admin, opts) -> bool:
    plan = _plan(_read_json(opts.reassignment_json_file, "reassignment-json-file"))
    ongoing = admin.list_partition_reassignments(list(plan))
    now = current(admin, sorted({tp.topic for tp in plan}))
    print("Status of partition reassignment:")
    done = True
    for tp, target in sorted(plan.items()):
        if tp in ongoing:
            print(f"Reassignment of partition {tp.topic}-{tp.partition} is still in progress.")
            done = False
        elif now.get(tp) == target:
            print(f"Reassignment of partition {tp.topic}-{tp.partition} is completed.")
        else:
            print(f"There is no active reassignment of partition {tp.topic}-{tp.partition}, "
                  f"but replica set is {now.get(tp)} rather than {target}.")
            done = False
    return done


def cancel(admin: Admin, opts) -> None:
    plan = _plan(_read_json(opts.reassignment_json_file, "reassignment-json-file"))
    results = admin.alter_partition_reassignments({tp: None for tp in plan})
    cancelled = sorted(tp for tp, e in results.items() if e is None)
    print(f"Successfully cancelled partition reassignment(s) for "
          f"{','.join(f'{tp.topic}-{tp.partition}' for tp in cancelled) or 'none'}")


def list_ongoing(admin: Admin, opts) -> None:
    ongoing = admin.list_partition_reassignments()
    if not ongoing:
        print("No partition reassignments found.")
        return
    print("Current partition reassignments:")
    for tp, r in sorted(ongoing.items()):
        print(f"{tp.topic}-{tp.partition}: replicas: {','.join(map(str, r['replicas']))}. "
              f"adding: {','.join(map(str, r['adding_replicas']))}. "
              f"removing: {','.join(map(str, r['removing_replicas']))}.")


def main(argv: list[str] | None = None) -> int:
    def go(opts: argparse.Namespace) -> int | None:
        actions = [a for a in ("generate", "execute", "verify", "cancel", "list") if getattr(opts, a)]
        if len(actions) != 1:
            raise UsageError("Command must include exactly one action: --generate, --execute, --verify, --cancel, --list")
        with Admin(admin_config(opts, "samsa-reassign-partitions")) as admin:
            if actions[0] == "verify":
                return 0 if verify(admin, opts) else 1
            {"generate": generate, "execute": execute, "cancel": cancel, "list": list_ongoing}[actions[0]](admin, opts)
        return 0
    return run_tool(argv, build_parser(), go, failures=[(errors.KafkaError, "Error: {}")])


if __name__ == "__main__":
    sys.exit(main())
