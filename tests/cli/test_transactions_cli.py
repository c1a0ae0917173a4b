"""`samsa transactions` (kafka-transactions.sh) against a broker with a live transaction and a
hanging one (a transactional batch written without its coordinator knowing: what KIP-890
prevents for clients, made here with a raw Produce that names no transactional id)."""

from __future__ import annotations

import json
import socket
import struct
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from cli_tools import samsa as run_tool
from samsa.embedded import Broker
from samsa.coordinator.transactions.persistence import partition_for
from samsa.protocol.api import decode_response, encode_request
from samsa.protocol.api_keys import ApiKey
from samsa.protocol.records import build_batch
from waiting import wait_until

HANGING_PID = 987654


def raw_produce(port: int, topic: str, data: bytes) -> int:
    # A transaction its coordinator never heard of: the broker skips KIP-890's verification
    # (transaction.partition.verification.enable=false), as a hanging transaction of an old client.
    body = {"transactional_id": "hanging-txn", "acks": -1, "timeout_ms": 10000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": data}]}]}
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(b"".join(bytes(c) for c in encode_request(ApiKey.PRODUCE, 9, 1, "cli-test", body)))
        buf = b""
        while len(buf) < 4 or len(buf) < 4 + struct.unpack(">i", buf[:4])[0]:
            buf += s.recv(65536)
    return decode_response(ApiKey.PRODUCE, 9, buf[4:])[1]["responses"][0]["partition_responses"][0]["error_code"]


@pytest.fixture(scope="module")
def broker():
    with Broker(**{"transaction.partition.verification.enable": "false"}) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})  # kept alive until the topic exists
        admin.create_topics([NewTopic("t", 1, 1)])["t"].result()
        yield b


def tx(broker, *args: str):
    return run_tool("transactions", "--bootstrap-server", broker.bootstrap_servers, *args)


def lso(broker) -> int:
    c = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "x", "isolation.level": "read_committed"})
    try:
        return c.get_watermark_offsets(TopicPartition("t", 0), timeout=30, cached=False)[1]
    finally:
        c.close()


def test_list_describe_and_describe_producers(broker):
    txn_id = f"cli-{uuid.uuid4().hex[:6]}"
    p = Producer({"bootstrap.servers": broker.bootstrap_servers, "transactional.id": txn_id})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce("t", b"open")
    p.flush(30)
    r = tx(broker, "list")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[0].split() == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    assert any(line.split()[0] == txn_id and line.split()[3] == "Ongoing" for line in r.stdout.splitlines()[1:])
    r = tx(broker, "describe", "--transactional-id", txn_id)
    assert r.returncode == 0, r.stderr
    row = r.stdout.splitlines()[1].split()
    assert row[1] == txn_id and row[4] == "Ongoing" and row[-1] == "t-0"
    r = tx(broker, "describe-producers", "--topic", "t", "--partition", "0")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0].split()[-1] == "CurrentTransactionStartOffset"
    p.commit_transaction(30)
    wait_until(lambda: "CompleteCommit" in tx(broker, "describe", "--transactional-id", txn_id).stdout,
               "the commit to complete", 30)
    # the coordinator's records, as dump-log's transaction log decoder prints them
    index = partition_for(txn_id, 50)
    seg = Path(broker.config.log_dirs[0]) / f"__transaction_state-{index}" / "00000000000000000000.log"
    r = run_tool("dump-log", "--transaction-log-decoder", "--files", str(seg))
    assert r.returncode == 0, r.stderr
    statuses = [json.loads(line.split(" payload: ")[1])["data"]["transactionStatus"]
                for line in r.stdout.splitlines() if f'"transactionalId":"{txn_id}"' in line]
    assert statuses == [0, 1, 2, 4]  # Empty, Ongoing, PrepareCommit, CompleteCommit
    r = tx(broker, "describe", "--transactional-id", "no-such-id")
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1


def test_find_hanging_and_abort(broker):
    start = lso(broker)
    data = build_batch([(None, b"hanging", None)], producer_id=HANGING_PID, producer_epoch=0, base_sequence=0,
                       is_transactional=True)
    assert raw_produce(int(broker.bootstrap_servers.rsplit(":", 1)[1]), "t", data) == 0
    assert lso(broker) == start  # the hanging transaction holds the LSO back
    r = tx(broker, "find-hanging", "--broker-id", "0", "--max-transaction-timeout", "0")
    assert r.returncode == 0, r.stderr
    rows = [line.split() for line in r.stdout.splitlines()[1:]]
    assert [(row[0], row[1], row[2], row[5]) for row in rows] == [("t", "0", str(HANGING_PID), str(start))]
    r = tx(broker, "abort", "--topic", "t", "--partition", "0", "--start-offset", str(start))
    assert r.returncode == 0, r.stderr
    wait_until(lambda: lso(broker) == start + 2, "the LSO past the abort marker", 30)
    r = tx(broker, "find-hanging", "--topic", "t", "--max-transaction-timeout", "0")
    assert r.returncode == 0 and len(r.stdout.splitlines()) == 1, r.stdout


def test_usage_errors(broker):
    r = tx(broker, "abort", "--topic", "t", "--partition", "0")
    assert r.returncode == 1 and "--start-offset" in r.stderr
    r = tx(broker, "find-hanging")
    assert r.returncode == 1 and "--broker-id" in r.stderr


def test_console_consumer_isolation_level(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.create_topics([NewTopic("iso", 1, 1)])["iso"].result()
    p = Producer({"bootstrap.servers": broker.bootstrap_servers, "transactional.id": f"iso-{uuid.uuid4().hex[:6]}"})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce("iso", b"committed")
    p.commit_transaction(30)
    p.begin_transaction()
    p.produce("iso", b"aborted")
    p.flush(30)
    p.abort_transaction(30)

    def console(*extra: str) -> list[str]:
        r = run_tool("console-consumer", "--bootstrap-server", broker.bootstrap_servers, "--topic", "iso",
                     "--from-beginning", "--timeout-ms", "3000", *extra)
        return r.stdout.split()
    assert console("--isolation-level", "read_committed") == ["committed"]
    assert console("--isolation-level", "read_uncommitted") == ["committed", "aborted"]
