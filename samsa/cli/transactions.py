"""``samsa transactions``: kafka-transactions.sh with Kafka's sub-commands and tables.

    samsa transactions --bootstrap-server localhost:9092 list
    samsa transactions --bootstrap-server localhost:9092 describe --transactional-id payments-1
    samsa transactions --bootstrap-server localhost:9092 describe-producers --topic t --partition 0
    samsa transactions --bootstrap-server localhost:9092 find-hanging --broker-id 0
    samsa transactions --bootstrap-server localhost:9092 abort --topic t --partition 0 --start-offset 42

A hanging transaction is one a partition still holds open (its producer's first offset
there bounds the LSO) while its coordinator does not count the partition in an open
transaction of that producer: ``abort`` writes the abort marker the coordinator never will.
"""

from __future__ import annotations

import argparse
import sys
import time

from samsa.cli.common import Parser, UsageError, admin_config, run_tool
from samsa.client.admin import Admin
from samsa.client.types import ProducerState, TopicPartition
from samsa.protocol import errors

DESCRIPTION = "This tool is used to analyze the transactional state of producers in the cluster. " \
              "It can be used to detect and recover from hanging transactions."


def build_parser() -> Parser:
    p = Parser(prog="samsa transactions", description=DESCRIPTION)
    p.add_argument("--bootstrap-server", required=True, help="A hostname and port for the broker to connect to.")
    p.add_argument("--command-config", help="Property file containing configs to be passed to the admin client.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.add_parser("list", help="list transactions")
    d = sub.add_parser("describe", help="describe the state of an active transactional-id")
    d.add_argument("--transactional-id", required=True, help="transactional id")
    dp = sub.add_parser("describe-producers", help="describe the states of active producers for a topic partition")
    dp.add_argument("--topic", required=True, help="topic name")
    dp.add_argument("--partition", required=True, type=int, help="partition number")
    fh = sub.add_parser("find-hanging", help="find hanging transactions")
    fh.add_argument("--broker-id", type=int, help="broker id to search for hanging transactions")
    fh.add_argument("--topic", help="topic name to limit search to")
    fh.add_argument("--partition", type=int, help="partition number to limit search to (requires --topic)")
    fh.add_argument("--max-transaction-timeout", type=int, default=15,
                    help="maximum transaction timeout in minutes to limit the search to (default 15)")
    ab = sub.add_parser("abort", help="abort a hanging transaction (requires administrative privileges)")
    ab.add_argument("--topic", required=True, help="topic name")
    ab.add_argument("--partition", required=True, type=int, help="partition number")
    ab.add_argument("--start-offset", type=int, help="start offset of the transaction to abort")
    ab.add_argument("--producer-id", type=int, help="producer id of the transaction to abort")
    ab.add_argument("--producer-epoch", type=int, help="producer epoch of the transaction to abort")
    ab.add_argument("--coordinator-epoch", type=int, help="coordinator epoch of the transaction to abort")
    return p


def table(header: list[str], rows: list[list[object]]) -> None:
    cells = [header] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    for r in cells:
        print("\t".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())


def list_cmd(admin: Admin) -> int:
    rows = [[t.transactional_id, broker, t.producer_id, t.state]
            for broker, listings in admin.list_transactions().items() for t in listings]
    table(["TransactionalId", "Coordinator", "ProducerId", "TransactionState"], rows)
    return 0


def describe_cmd(admin: Admin, txn_id: str) -> int:
    d = admin.describe_transactions([txn_id])[txn_id]
    now = int(time.time() * 1000)
    start = d.start_ms if d.start_ms >= 0 else "None"
    duration = now - d.start_ms if d.start_ms >= 0 else "None"
    table(["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
           "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs", "TopicPartitions"],
          [[d.coordinator_id, txn_id, d.producer_id, d.producer_epoch, d.state, d.timeout_ms, start, duration,
            ",".join(str(tp) for tp in d.partitions)]])
    return 0


def describe_producers_cmd(admin: Admin, tp: TopicPartition) -> int:
    producers = admin.describe_producers([tp])[tp]
    table(["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
           "CurrentTransactionStartOffset"],
          [[p.producer_id, p.producer_epoch, p.coordinator_epoch, p.last_sequence, p.last_timestamp,
            p.current_transaction_start_offset if p.current_transaction_start_offset >= 0 else "None"]
           for p in producers])
    return 0


def hanging(admin: Admin, partitions: list[TopicPartition], max_timeout_min: int
            ) -> list[tuple[TopicPartition, ProducerState]]:
    """Open transactions older than the timeout whose coordinator does not count the partition
    in an open transaction of that producer."""
    now = int(time.time() * 1000)
    limit = max_timeout_min * 60_000
    candidates = [(tp, p) for tp, producers in admin.describe_producers(partitions).items() for p in producers
                  if p.current_transaction_start_offset >= 0 and now - p.last_timestamp >= limit]
    if not candidates:
        return []
    pids = sorted({p.producer_id for _, p in candidates})
    ids = [t.transactional_id for listings in admin.list_transactions(producer_ids=pids).values() for t in listings]
    open_parts: set[tuple[int, TopicPartition]] = set()
    for txn_id, d in admin.describe_transactions(ids).items() if ids else ():
        if d.state in ("Ongoing", "PrepareCommit", "PrepareAbort"):
            open_parts.update((d.producer_id, tp) for tp in d.partitions)
    return [(tp, p) for tp, p in candidates if (p.producer_id, tp) not in open_parts]


def find_hanging_cmd(admin: Admin, opts) -> int:
    if (opts.broker_id is None) == (opts.topic is None):
        raise UsageError("Exactly one of --broker-id or --topic is required")
    if opts.partition is not None and opts.topic is None:
        raise UsageError("--partition requires --topic")
    topics = admin.describe_topics([opts.topic] if opts.topic else list(admin.list_topics(include_internal=True)))
    partitions = [TopicPartition(name, p.partition) for name, t in topics.items() for p in t.partitions
                  if (opts.partition is None or p.partition == opts.partition)
                  and (opts.broker_id is None or opts.broker_id in p.replicas)]
    now = int(time.time() * 1000)
    table(["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset", "LastTimestamp",
           "Duration(min)"],
          [[tp.topic, tp.partition, p.producer_id, p.producer_epoch, p.coordinator_epoch,
            p.current_transaction_start_offset, p.last_timestamp, (now - p.last_timestamp) // 60_000]
           for tp, p in hanging(admin, partitions, opts.max_transaction_timeout)])
    return 0


def abort_cmd(admin: Admin, opts) -> int:
    tp = TopicPartition(opts.topic, opts.partition)
    if opts.start_offset is not None:
        found = [p for p in admin.describe_producers([tp])[tp] if p.current_transaction_start_offset == opts.start_offset]
        if not found:
            raise UsageError(f"Could not find any open transactions starting at offset {opts.start_offset} on "
                             f"partition {tp}")
        p = found[0]
        pid, epoch, coordinator_epoch = p.producer_id, p.producer_epoch, max(p.coordinator_epoch, 0)
    elif None not in (opts.producer_id, opts.producer_epoch, opts.coordinator_epoch):
        pid, epoch, coordinator_epoch = opts.producer_id, opts.producer_epoch, opts.coordinator_epoch
    else:
        raise UsageError("Either --start-offset, or all of --producer-id, --producer-epoch and "
                         "--coordinator-epoch, must be given")
    admin.abort_transaction(tp, pid, epoch, coordinator_epoch)
    print(f"Aborted the transaction of producer {pid} (epoch {epoch}) on partition {tp}")
    return 0


def main(argv: list[str] | None = None) -> int:
    def go(opts: argparse.Namespace) -> int:
        if opts.command is None:
            raise UsageError("a command is required: list, describe, describe-producers, find-hanging or abort")
        with Admin(admin_config(opts, "samsa-transactions")) as admin:
            if opts.command == "list":
                return list_cmd(admin)
            if opts.command == "describe":
                return describe_cmd(admin, opts.transactional_id)
            if opts.command == "describe-producers":
                return describe_producers_cmd(admin, TopicPartition(opts.topic, opts.partition))
            if opts.command == "find-hanging":
                return find_hanging_cmd(admin, opts)
            return abort_cmd(admin, opts)
    return run_tool(argv, build_parser(), go, description=DESCRIPTION, failures=[(errors.KafkaError, "Error: {}")])


if __name__ == "__main__":
    sys.exit(main())
