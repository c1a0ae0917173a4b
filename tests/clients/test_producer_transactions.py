"""Samsa's own transactional Producer and read_committed Consumer against a real broker
process; and aiokafka's transactional producer for comparison."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from broker_process import BrokerProcess
from waiting import wait_until
from samsa.client.admin import Admin
from samsa.client.consumer import Consumer
from samsa.client.consumer_internals.subscription import IllegalStateError
from samsa.client.producer import Producer
from samsa.client.types import NewTopic, TopicPartition
from samsa.protocol import errors

WAIT = 30.0


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("txn-broker")).start()
    yield b
    b.stop()


def topic(broker, partitions: int = 1) -> str:
    name = f"txn-{uuid.uuid4().hex[:8]}"
    admin = Admin({"bootstrap.servers": broker.bootstrap})
    try:
        admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        admin.close()
    return name


def read(broker, name: str, isolation: str, count: int, partitions=(0,)) -> list[bytes]:
    c = Consumer({"bootstrap.servers": broker.bootstrap, "isolation.level": isolation,
                  "auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition(name, p) for p in partitions])
        out: list[bytes] = []
        deadline = time.monotonic() + WAIT
        while len(out) < count and time.monotonic() < deadline:
            out += [r.value for r in c.poll(0.5)]
        assert len(out) == count, out
        assert c.poll(0.5) == []  # and nothing more
        return out
    finally:
        c.close()


def txn_producer(broker, txn_id: str | None = None, **conf) -> Producer:
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": txn_id or f"tx-{uuid.uuid4().hex[:8]}",
                  "linger.ms": 5, **conf})
    p.init_transactions(WAIT)
    return p


def test_commit_and_abort(broker):
    name = topic(broker)
    p = txn_producer(broker)
    try:
        p.begin_transaction()
        for i in range(4):
            p.send(name, b"ok-%d" % i)
        p.commit_transaction(WAIT)
        p.begin_transaction()
        for i in range(3):
            p.send(name, b"no-%d" % i)
        p.abort_transaction(WAIT)
        p.begin_transaction()
        p.send(name, b"ok-last")
        p.commit_transaction(WAIT)
    finally:
        p.close()
    assert read(broker, name, "read_committed", 5) == [b"ok-0", b"ok-1", b"ok-2", b"ok-3", b"ok-last"]
    assert len(read(broker, name, "read_uncommitted", 8)) == 8


def test_send_outside_a_transaction_is_refused(broker):
    name = topic(broker)
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"tx-{uuid.uuid4().hex[:8]}"})
    try:
        with pytest.raises(IllegalStateError):
            p.begin_transaction()  # before init_transactions
        p.init_transactions(WAIT)
        with pytest.raises(IllegalStateError):
            p.send(name, b"x")
    finally:
        p.close()


def test_second_producer_fences_the_first(broker):
    name = topic(broker)
    txn_id = f"fence-{uuid.uuid4().hex[:8]}"
    p1 = txn_producer(broker, txn_id)
    p1.begin_transaction()
    p1.send(name, b"zombie").result(WAIT)
    p2 = txn_producer(broker, txn_id)
    try:
        p2.begin_transaction()
        p2.send(name, b"winner")
        p2.commit_transaction(WAIT)
        with pytest.raises((errors.ProducerFencedError, errors.InvalidProducerEpochError)):
            p1.send(name, b"zombie-2")
            p1.commit_transaction(WAIT)
        with pytest.raises((errors.ProducerFencedError, errors.InvalidProducerEpochError)):
            p1.begin_transaction()  # fatal: every later call fails
    finally:
        p1.close(1)
        p2.close()
    assert read(broker, name, "read_committed", 1) == [b"winner"]


def test_admin_fences_the_producers_of_a_transactional_id(broker):
    """Admin.fence_producers (Kafka's Admin.fenceProducers): the id's epoch is bumped, its open
    transaction aborted, and the producer using the old epoch can no longer commit."""
    name = topic(broker)
    txn_id = f"fence-admin-{uuid.uuid4().hex[:8]}"
    zombie = txn_producer(broker, txn_id)
    zombie.begin_transaction()
    zombie.send(name, b"zombie").result(WAIT)
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        before = admin.describe_transactions([txn_id])[txn_id]
        assert before.state == "Ongoing"
        fenced = admin.fence_producers([txn_id])[txn_id]
        assert fenced.producer_id == before.producer_id and fenced.producer_epoch > before.producer_epoch
        after = admin.describe_transactions([txn_id])[txn_id]
        assert (after.state, after.producer_epoch, after.partitions) == ("Empty", fenced.producer_epoch, [])
        fresh = admin.fence_producers([f"fence-new-{uuid.uuid4().hex[:8]}"])
        assert [f.producer_epoch for f in fresh.values()] == [0]  # an id never seen: a new producer id
    try:
        with pytest.raises((errors.ProducerFencedError, errors.InvalidProducerEpochError)):
            zombie.commit_transaction(WAIT)
    finally:
        zombie.close(1)
    p = txn_producer(broker, txn_id)  # the id itself goes on with a new producer
    try:
        p.begin_transaction()
        p.send(name, b"after")
        p.commit_transaction(WAIT)
    finally:
        p.close()
    assert read(broker, name, "read_committed", 1) == [b"after"]
    assert read(broker, name, "read_uncommitted", 2) == [b"zombie", b"after"]


def test_idle_transactional_ids_expire_but_not_open_transactions(tmp_path):
    """transactional.id.expiration.ms: an id idle that long with no open transaction is forgotten
    (a producer starting with it again gets a new producer id); an open one is not."""
    b = BrokerProcess(tmp_path, **{"transactional.id.expiration.ms": 1500,
                                   "transaction.remove.expired.transaction.cleanup.interval.ms": 200}).start()
    try:
        name = topic(b)
        opened = txn_producer(b, f"open-{uuid.uuid4().hex[:8]}", **{"transaction.timeout.ms": 60000})
        opened.begin_transaction()
        opened.send(name, b"open").result(WAIT)  # its last update: before the idle id's
        idle_id = f"idle-{uuid.uuid4().hex[:8]}"
        idle = txn_producer(b, idle_id)
        idle.begin_transaction()
        idle.send(name, b"committed")
        idle.commit_transaction(WAIT)
        idle.close()
        with Admin({"bootstrap.servers": b.bootstrap}) as admin:
            pid = admin.describe_transactions([idle_id])[idle_id].producer_id

            def expired() -> bool:
                try:
                    admin.describe_transactions([idle_id])
                except errors.TransactionalIdNotFoundError:
                    return True
                return False
            wait_until(expired, "the idle transactional id expired", WAIT)
            assert admin.describe_transactions([opened.config["transactional.id"]])[
                opened.config["transactional.id"]].state == "Ongoing"
            again = txn_producer(b, idle_id)
            again.close()
            assert admin.describe_transactions([idle_id])[idle_id].producer_id != pid
        opened.commit_transaction(WAIT)
        opened.close()
        assert read(b, name, "read_committed", 2) == [b"open", b"committed"]
    finally:
        b.stop()


def test_consume_transform_produce(broker):
    source, sink = topic(broker, 2), topic(broker)
    feeder = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(30):
        feeder.send(source, b"%d" % i, partition=i % 2)
    feeder.close()
    group = f"g-{uuid.uuid4().hex[:6]}"
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "isolation.level": "read_committed"})
    p = txn_producer(broker)
    try:
        c.subscribe([source])
        done, rounds = 0, 0
        deadline = time.monotonic() + WAIT
        while done < 30 and time.monotonic() < deadline:
            recs = c.poll(0.5, max_records=7)
            if not recs:
                continue
            p.begin_transaction()
            for r in recs:
                p.send(sink, b"x" + r.value)
            offsets = {tp: c.position(tp) for tp in c.assignment()}
            p.send_offsets_to_transaction(offsets, c.group_metadata(), WAIT)
            if rounds == 1:  # one aborted round: its output and offsets do not count
                p.abort_transaction(WAIT)
                committed = c.committed(c.assignment(), WAIT)
                for tp in c.assignment():
                    o = committed.get(tp)
                    c.seek(tp, o.offset if o is not None else 0)
            else:
                p.commit_transaction(WAIT)
                done += len(recs)
            rounds += 1
    finally:
        p.close()
        c.close()
    assert sorted(read(broker, sink, "read_committed", 30)) == sorted(b"x%d" % i for i in range(30))
    check = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        committed = check.committed([TopicPartition(source, 0), TopicPartition(source, 1)], WAIT)
        assert sum(o.offset for o in committed.values()) == 30
    finally:
        check.close()


def test_version_2_back_to_back_transactions_with_offsets(broker):
    """Against a broker that finalizes transaction.version 2 the producer sends no
    AddPartitionsToTxn/AddOffsetsToTxn (Produce v12 and TxnOffsetCommit v5 add their partitions)
    and goes on with the epoch each EndTxn v5 answers: transactions back to back, each with
    records on three partitions and the group's offsets (both coordinators are this broker)."""
    name = topic(broker, 3)
    group = f"g-{uuid.uuid4().hex[:6]}"
    p = txn_producer(broker)
    core = p._core
    assert core.txn.tv2
    first_epoch = core.txn.epoch
    committed = []
    try:
        for n in range(20):
            p.begin_transaction()
            batch = [b"t%d-p%d" % (n, k) for k in range(3)]
            for k, v in enumerate(batch):
                p.send(name, v, partition=k)
            p.send_offsets_to_transaction({TopicPartition(name, 0): n + 1}, group, WAIT)
            if n % 7 == 6:
                p.abort_transaction(WAIT)
            else:
                p.commit_transaction(WAIT)
                committed += batch
        assert core.txn.epoch == first_epoch + 20  # one bump per EndTxn
    finally:
        p.close()
    got = read(broker, name, "read_committed", len(committed), partitions=(0, 1, 2))
    assert sorted(got) == sorted(committed)
    check = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        assert check.committed([TopicPartition(name, 0)], WAIT)[TopicPartition(name, 0)].offset == 20
    finally:
        check.close()


def test_aiokafka_transactional_producer(broker):
    aiokafka = pytest.importorskip("aiokafka")
    name = topic(broker)

    async def run() -> None:
        p = aiokafka.AIOKafkaProducer(bootstrap_servers=broker.bootstrap,
                                      transactional_id=f"aio-{uuid.uuid4().hex[:8]}")
        await p.start()
        try:
            async with p.transaction():
                for i in range(3):
                    await p.send(name, b"aio-%d" % i)
            await p.begin_transaction()
            await p.send(name, b"aborted")
            await p.abort_transaction()
            async with p.transaction():
                await p.send(name, b"aio-3")
        finally:
            await p.stop()
        c = aiokafka.AIOKafkaConsumer(name, bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
                                      isolation_level="read_committed")
        await c.start()
        try:
            got: list[bytes] = []
            deadline = time.monotonic() + WAIT
            while len(got) < 4 and time.monotonic() < deadline:
                batches = await c.getmany(timeout_ms=500)
                got += [m.value for msgs in batches.values() for m in msgs]
            assert got == [b"aio-0", b"aio-1", b"aio-2", b"aio-3"]
        finally:
            await c.stop()

    asyncio.run(run())
    assert len(read(broker, name, "read_uncommitted", 5)) == 5


def test_aio_producer_transactions(broker):
    from samsa.aio import AIOProducer
    name = topic(broker)

    async def run() -> None:
        async with AIOProducer({"bootstrap.servers": broker.bootstrap,
                                "transactional.id": f"aio-samsa-{uuid.uuid4().hex[:8]}"}) as p:
            await p.init_transactions()
            p.begin_transaction()
            await p.send(name, b"kept")
            await p.commit_transaction()
            p.begin_transaction()
            await p.send(name, b"dropped")
            await p.abort_transaction()
    asyncio.run(run())
    assert read(broker, name, "read_committed", 1) == [b"kept"]


def test_idempotent_producer_bumps_its_epoch_when_the_broker_lost_its_sequence(broker):
    """KIP-360: the broker's sequence for the producer moved past what the producer knows (as
    when a leader's log lost records): its next batch, the earliest in flight, is refused
    OUT_OF_ORDER_SEQUENCE_NUMBER; the producer bumps its epoch and sends it again from 0."""
    import socket
    import struct

    from samsa.protocol.api import decode_response, encode_request
    from samsa.protocol.api_keys import ApiKey
    from samsa.protocol.records import build_batch

    name = topic(broker)
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    try:
        first = p.send(name, b"one", partition=0).result(WAIT)
        pid, epoch = p._core.sender.producer_id, p._core.sender.epoch
        # another write under the same producer id and epoch, sequences 1-2
        data = build_batch([(None, b"other-1", None), (None, b"other-2", None)], producer_id=pid,
                           producer_epoch=epoch, base_sequence=1)
        body = {"transactional_id": None, "acks": -1, "timeout_ms": 10000,
                "topic_data": [{"name": name, "partition_data": [{"index": 0, "records": data}]}]}
        with socket.create_connection(("127.0.0.1", broker.port), timeout=WAIT) as s:
            s.sendall(b"".join(bytes(c) for c in encode_request(ApiKey.PRODUCE, 9, 1, "kip-360", body)))
            buf = b""
            while len(buf) < 4 or len(buf) < 4 + struct.unpack(">i", buf[:4])[0]:
                buf += s.recv(65536)
        assert decode_response(ApiKey.PRODUCE, 9, buf[4:])[1]["responses"][0]["partition_responses"][0][
            "error_code"] == 0
        second = p.send(name, b"two", partition=0).result(WAIT)  # sequence 1: refused, then sent again
        assert p._core.sender.epoch == epoch + 1
        third = p.send(name, b"three", partition=0).result(WAIT)
        assert (first.offset, second.offset, third.offset) == (0, 3, 4)
    finally:
        p.close()
    assert read(broker, name, "read_uncommitted", 5) == [b"one", b"other-1", b"other-2", b"two", b"three"]
