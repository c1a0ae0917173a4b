"""``samsa leader-election``: kafka-leader-election.sh with Kafka's flags and output.

    samsa leader-election --bootstrap-server localhost:9092 --election-type preferred --all-topic-partitions
    samsa leader-election --bootstrap-server localhost:9092 --election-type unclean --topic t --partition 0
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from samsa.cli.common import Parser, UsageError, admin_config, run_tool
from samsa.client.admin import Admin
from samsa.client.types import TopicPartition
from samsa.protocol import errors

DESCRIPTION = "This tool attempts to elect a new leader for a set of topic partitions."


def build_parser() -> Parser:
    p = Parser(prog="samsa leader-election", description=DESCRIPTION)
    a = p.add_argument
    a("--bootstrap-server", required=True, help="A hostname and port for the broker to connect to.")
    a("--admin.config", dest="command_config", help="Configuration properties files to pass to the admin client.")
    a("--election-type", required=True, choices=("preferred", "unclean", "PREFERRED", "UNCLEAN"),
      help="Type of election to attempt.")
    a("--all-topic-partitions", action="store_true", help="Perform election on all of the eligible topic partitions.")
    a("--topic", help="Name of topic for which to perform an election.")
    a("--partition", type=int, help="Partition id for which to perform an election. REQUIRED if --topic is specified.")
    a("--path-to-json-file", help='JSON file {"partitions": [{"topic": "foo", "partition": 1}]}.')
    return p


def targets(opts) -> list[TopicPartition] | None:
    chosen = [bool(opts.all_topic_partitions), opts.topic is not None, opts.path_to_json_file is not None]
    if sum(chosen) != 1:
        raise UsageError("One and only one of the following options is required: "
                         "all-topic-partitions, topic, path-to-json-file")
    if opts.all_topic_partitions:
        return None
    if opts.topic is not None:
        if opts.partition is None:
            raise UsageError("Missing required option(s) [partition]")
        return [TopicPartition(opts.topic, opts.partition)]
    try:
        data = json.loads(Path(opts.path_to_json_file).read_text())
        return [TopicPartition(p["topic"], int(p["partition"])) for p in data["partitions"]]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise UsageError(f"Cannot read the partitions in {opts.path_to_json_file}: {e}") from None


def main(argv: list[str] | None = None) -> int:
    def go(opts: argparse.Namespace) -> int:
        wanted = targets(opts)
        with Admin(admin_config(opts, "samsa-leader-election")) as admin:
            results = admin.elect_leaders(wanted, unclean=opts.election_type.lower() == "unclean")
        return report(opts, wanted, results)
    return run_tool(argv, build_parser(), go, failures=[(errors.KafkaError, "Error while making request: {}")])


def report(opts: argparse.Namespace, wanted, results) -> int:
    done = sorted(f"{tp.topic}-{tp.partition}" for tp, err in results.items() if err is None)
    not_needed = sorted(f"{tp.topic}-{tp.partition}" for tp, err in results.items()
                        if err is not None and err.code == errors.E_ELECTION_NOT_NEEDED)
    failed = {tp: err for tp, err in results.items()
              if err is not None and err.code != errors.E_ELECTION_NOT_NEEDED}
    if done:
        print(f"Successfully completed leader election ({opts.election_type.upper()}) for partitions {', '.join(done)}")
    if not_needed and wanted is not None:
        print(f"Valid replica already elected for partitions {', '.join(not_needed)}")
    if failed:
        print(f"Failed to elect leaders for partitions "
              f"{', '.join(f'{tp.topic}-{tp.partition}' for tp in sorted(failed))}", file=sys.stderr)
        for tp, err in sorted(failed.items()):
            print(f"Error completing leader election ({opts.election_type.upper()}) for partition: "
                  f"{tp.topic}-{tp.partition}: {err.name}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
