"""KIP-890's verification (TransactionVerifier) against the real TransactionCoordinator on a fake
host whose log writes and marker writes the test holds open: the states in which librdkafka's
0103 met INVALID_TXN_STATE (a transition being written, the previous transaction completing) are
reached deterministically, and the answer is Kafka's whether the coordinator is this broker or
another (AddPartitionsToTxn verify_only between brokers). Also EndTxn v5's epoch bump and the
``__transaction_state`` value format (version 1, as Apache Kafka 4.4.0 wrote it)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from samsa.broker_config import BrokerConfig
from samsa.cluster.metadata import PartitionState, TopicInfo
from samsa.coordinator.transactions import TransactionCoordinator, TransactionVerifier, TxnState
from samsa.protocol import errors
from samsa.protocol.api_keys import ApiKey
from samsa.protocol.group_records import OFFSETS_TOPIC
from samsa.protocol.txn_records import TRANSACTION_STATE_TOPIC, TxnLogValue, parse_txn_value, txn_value, txn_value_v0

TXN_PARTITIONS = 4
TXN_ID = "tx"
T0, T1 = ("t", 0), ("t", 1)


class Gate:
    """Lets the coordinator's awaits through, or holds them until opened."""

    def __init__(self) -> None:
        self.open = asyncio.Event()
        self.open.set()
        self.waiting = 0

    def hold(self) -> None:
        self.open.clear()

    async def passage(self) -> None:
        self.waiting += 1
        try:
            await self.open.wait()
        finally:
            self.waiting -= 1


class FakeHost:
    """The members of TransactionHost, with the log writes and markers behind gates."""

    broker_id = 1

    def __init__(self) -> None:
        self.config = BrokerConfig({"transaction.state.log.num.partitions": TXN_PARTITIONS,
                                    "offsets.topic.num.partitions": 3})
        one = {p: PartitionState([1], 1, isr=[1]) for p in range(TXN_PARTITIONS)}
        self.topics = {TRANSACTION_STATE_TOPIC: TopicInfo(TRANSACTION_STATE_TOPIC, b"\0" * 16, one),
                       OFFSETS_TOPIC: TopicInfo(OFFSETS_TOPIC, b"\1" * 16, {p: PartitionState([1], 1) for p in range(3)}),
                       "t": TopicInfo("t", b"\2" * 16, {p: PartitionState([1], 1) for p in range(2)})}
        self.writes, self.markers = Gate(), Gate()
        self.written: list[TxnLogValue] = []
        self.next_pid = 100

    def partition(self, topic: str, index: int):
        host = self

        class Partition:
            state = SimpleNamespace(leader_epoch=0)

            def append(self, data, batches, now_ms: int):
                host.written.append(data)
                return SimpleNamespace(last_offset=len(host.written) - 1)
        return Partition()

    async def wait_for_high_watermark(self, partition, offset: int, timeout_ms: int, min_isr=None) -> None:
        await self.writes.passage()

    def alive_brokers(self):
        return []

    def create_topic(self, *args, **kwargs):
        raise AssertionError("the topics exist")

    def allocate_producer_id(self) -> int:
        self.next_pid += 1
        return self.next_pid

    def transaction_version(self) -> int:
        return 2

    async def write_txn_markers(self, producer_id, producer_epoch, coordinator_epoch, commit, partitions):
        await self.markers.passage()
        return dict.fromkeys(partitions, 0)


class RemoteView:
    """The same coordinator seen from another broker: the verifier must ask it over the wire."""

    def __init__(self, coordinator: TransactionCoordinator) -> None:
        self.coordinator = coordinator

    def is_local(self, transactional_id: str) -> bool:
        return False

    def coordinator_id(self, transactional_id: str) -> int:
        return 7


class Wire:
    """request_broker as the coordinator's broker answers AddPartitionsToTxn v4+ (or cannot)."""

    def __init__(self, coordinator: TransactionCoordinator) -> None:
        self.coordinator = coordinator
        self.down = False

    async def request_broker(self, broker_id: int, api_key: ApiKey, body: dict, min_version: int = 0) -> dict:
        assert (broker_id, api_key) == (7, ApiKey.ADD_PARTITIONS_TO_TXN)
        if self.down:
            raise ConnectionResetError("the coordinator's broker went away")
        out = []
        for t in body["transactions"]:
            tps = [(x["name"], p) for x in t["topics"] for p in x["partitions"]]
            codes = await self.coordinator.add_partitions(t["transactional_id"], t["producer_id"], t["producer_epoch"],
                                                          tps, verify_only=t["verify_only"])
            out.append({"transactional_id": t["transactional_id"], "topic_results": [
                {"name": n, "results_by_partition": [{"partition_index": p, "partition_error_code": c}
                                                     for (tn, p), c in codes.items() if tn == n]}
                for n in {tn for tn, _ in codes}]})
        return {"error_code": 0, "results_by_transaction": out}


def setup():
    host = FakeHost()
    coordinator = TransactionCoordinator(host)
    coordinator.epochs = dict.fromkeys(range(TXN_PARTITIONS), 0)
    wire = Wire(coordinator)
    local = TransactionVerifier(coordinator, wire)
    remote = TransactionVerifier(RemoteView(coordinator), wire)  # type: ignore[arg-type]
    return host, coordinator, local, remote, wire


async def answers(verifiers, api: ApiKey, version: int, pid: int, epoch: int, tps) -> set[tuple]:
    """The answer of each verifier (local, remote): one set when they agree."""
    out = set()
    for v in verifiers:
        out.add(tuple(sorted((await v.verify(api, version, TXN_ID, pid, epoch, list(tps))).items())))
    return out


def codes(tps, code) -> set[tuple]:
    return {tuple(sorted(dict.fromkeys(tps, code).items()))}


def test_verification_answers_as_kafka_in_every_state_local_and_remote():
    async def scenario() -> None:
        host, tc, local, remote, wire = setup()
        both = (local, remote)
        pid, epoch = await tc.init_producer_id(TXN_ID, 60000)
        offsets = tc.offsets_partition("g")
        assert await tc.add_partitions(TXN_ID, pid, epoch, [T0]) == {T0: 0}
        assert await tc.add_offsets(TXN_ID, pid, epoch, "g") == 0

        # A partition being added (its state written, not yet replicated): what is in the
        # transaction stays verifiable. Samsa answered INVALID_TXN_STATE here (0103's fatal error).
        host.writes.hold()
        adding = asyncio.ensure_future(tc.add_partitions(TXN_ID, pid, epoch, [T1]))
        while tc.txns[TXN_ID].pending is None:
            await asyncio.sleep(0)
        assert await answers(both, ApiKey.TXN_OFFSET_COMMIT, 3, pid, epoch, [offsets]) == codes([offsets], 0)
        assert await answers(both, ApiKey.PRODUCE, 9, pid, epoch, [T0]) == codes([T0], 0)
        host.writes.open.set()
        assert await adding == {T1: 0}

        # The transaction completing (PrepareCommit written, markers not): CONCURRENT_TRANSACTIONS,
        # which a Produce answers as NOT_ENOUGH_REPLICAS; both retriable.
        host.markers.hold()
        await tc.end_txn(TXN_ID, pid, epoch, commit=True)
        assert tc.txns[TXN_ID].state == TxnState.PREPARE_COMMIT
        assert await answers(both, ApiKey.TXN_OFFSET_COMMIT, 3, pid, epoch, [offsets]) == codes(
            [offsets], errors.E_CONCURRENT_TRANSACTIONS)
        assert await answers(both, ApiKey.PRODUCE, 9, pid, epoch, [T0]) == codes([T0], errors.E_NOT_ENOUGH_REPLICAS)
        # AddOffsetsToTxn meanwhile: CONCURRENT_TRANSACTIONS too (the client retries it).
        assert await tc.add_offsets(TXN_ID, pid, epoch, "g") == errors.E_CONCURRENT_TRANSACTIONS
        host.markers.open.set()
        while tc.txns[TXN_ID].state != TxnState.COMPLETE_COMMIT:
            await asyncio.sleep(0)

        # Not in the (next) transaction: INVALID_TXN_STATE for clients that predate
        # TRANSACTION_ABORTABLE (Produce < v11, TxnOffsetCommit < v4), TRANSACTION_ABORTABLE after.
        for api, version, code in [(ApiKey.TXN_OFFSET_COMMIT, 3, errors.E_INVALID_TXN_STATE),
                                   (ApiKey.TXN_OFFSET_COMMIT, 4, errors.E_TRANSACTION_ABORTABLE),
                                   (ApiKey.PRODUCE, 10, errors.E_INVALID_TXN_STATE),
                                   (ApiKey.PRODUCE, 11, errors.E_TRANSACTION_ABORTABLE)]:
            assert await answers(both, api, version, pid, epoch, [T0]) == codes([T0], code), (api, version)
        # A fenced producer: INVALID_PRODUCER_EPOCH.
        assert await answers(both, ApiKey.PRODUCE, 9, pid, epoch - 1 if epoch else epoch + 1, [T0]) == codes(
            [T0], errors.E_INVALID_PRODUCER_EPOCH)
        # The coordinator's broker unreachable: retriable for both requests.
        wire.down = True
        assert await answers([remote], ApiKey.PRODUCE, 9, pid, epoch, [T0]) == codes([T0], errors.E_NOT_ENOUGH_REPLICAS)
        assert await answers([remote], ApiKey.TXN_OFFSET_COMMIT, 3, pid, epoch, [offsets]) == codes(
            [offsets], errors.E_COORDINATOR_LOAD_IN_PROGRESS)
        wire.down = False

        # Transactions version 2 (Produce v12, TxnOffsetCommit v5): the check adds the partition,
        # locally and through the coordinator's broker.
        assert await answers([local], ApiKey.PRODUCE, 12, pid, epoch, [T0]) == codes([T0], 0)
        assert await answers([remote], ApiKey.TXN_OFFSET_COMMIT, 5, pid, epoch, [offsets]) == codes([offsets], 0)
        meta = tc.txns[TXN_ID]
        assert (meta.state, meta.partitions) == (TxnState.ONGOING, {T0, offsets})
        tc.stop()
    asyncio.run(scenario())


def test_a_version_2_add_waits_out_the_previous_transaction_completing():
    """Kafka's leader retries the add while the producer's previous transaction completes
    (add.partitions.to.txn.retry.backoff.ms): a next transaction right after EndTxn v5 goes on."""
    async def scenario() -> None:
        host, tc, local, _, _ = setup()
        pid, epoch = await tc.init_producer_id(TXN_ID, 60000)
        await tc.add_partitions(TXN_ID, pid, epoch, [T0])
        host.markers.hold()
        pid2, epoch2 = await tc.end_txn(TXN_ID, pid, epoch, commit=True, client_version=2)
        assert (pid2, epoch2) == (pid, epoch + 1)
        first: list[dict] = []
        ask = local._ask

        async def ask_then_let_markers_through(*args):
            out = await ask(*args)
            first.append(out)
            host.markers.open.set()  # the previous transaction completes while the verifier waits
            return out
        local._ask = ask_then_let_markers_through  # type: ignore[method-assign]
        assert await local.verify(ApiKey.PRODUCE, 12, TXN_ID, pid2, epoch2, [T1]) == {T1: 0}
        assert first[0] == {T1: errors.E_CONCURRENT_TRANSACTIONS} and len(first) >= 2
        assert tc.txns[TXN_ID].partitions == {T1}
        tc.stop()
    asyncio.run(scenario())


def test_end_txn_v5_bumps_the_epoch_and_a_new_producer_id_takes_over_an_exhausted_one():
    async def scenario() -> None:
        host, tc, _, _, _ = setup()
        pid, epoch = await tc.init_producer_id(TXN_ID, 60000)
        meta = tc.txns[TXN_ID]
        await tc.add_partitions(TXN_ID, pid, epoch, [T0])
        assert await tc.end_txn(TXN_ID, pid, epoch, commit=True, client_version=2) == (pid, epoch + 1)
        while meta.state != TxnState.COMPLETE_COMMIT:
            await asyncio.sleep(0)
        assert await tc.end_txn(TXN_ID, pid, epoch, commit=True, client_version=2) == (pid, epoch + 1)  # retry
        with pytest.raises(errors.InvalidTxnStateError):
            await tc.end_txn(TXN_ID, pid, epoch, commit=False, client_version=2)
        meta.producer_epoch = 32766  # the last epoch a producer may use
        await tc.add_partitions(TXN_ID, pid, 32766, [T0])
        new_pid, new_epoch = await tc.end_txn(TXN_ID, pid, 32766, commit=False, client_version=2)
        assert (new_pid, new_epoch) == (host.next_pid, 0)
        while meta.state != TxnState.COMPLETE_ABORT:
            await asyncio.sleep(0)
        assert (meta.producer_id, meta.producer_epoch, meta.previous_producer_id) == (new_pid, 0, pid)
        # A retry of that EndTxn (the old id, the exhausted epoch) is answered as it was.
        assert await tc.end_txn(TXN_ID, pid, 32766, commit=False, client_version=2) == (new_pid, 0)
        value = parse_txn_value(txn_value(meta.to_log()))
        assert (value.version, value.client_version, value.previous_producer_id) == (1, 2, pid)
        tc.stop()
    asyncio.run(scenario())


# Values of __transaction_state written by Apache Kafka 4.4.0 (transaction.version 2) for an id
# with producer id 4: Empty after InitProducerId, then PrepareCommit of an EndTxn v5.
KAFKA_EMPTY = "0001000000000000000400000000ea600000000001a2188278b3ffffffffffffffff0100080000000000000004"
KAFKA_PREPARE_COMMIT = ("0001000000000000000400020000ea60020212656e6474786e352d73616d73612d74786e020000000000000001"
                        "a218827a33000001a218827975020008000000000000000402020002")


def test_transaction_log_values_of_kafka_4_are_read_and_written_alike():
    empty = parse_txn_value(bytes.fromhex(KAFKA_EMPTY))
    assert (empty.version, empty.producer_id, empty.producer_epoch, empty.status, empty.partitions,
            empty.previous_producer_id, empty.client_version) == (1, 4, 0, 0, {}, 4, 0)
    prepare = parse_txn_value(bytes.fromhex(KAFKA_PREPARE_COMMIT))
    assert (prepare.producer_epoch, prepare.status, prepare.partitions, prepare.client_version) == (
        2, TxnState.PREPARE_COMMIT.id, {"endtxn5-samsa-txn": [0]}, 2)
    assert txn_value(prepare) == bytes.fromhex(KAFKA_PREPARE_COMMIT)
    assert txn_value(empty) == bytes.fromhex(KAFKA_EMPTY)
    old = TxnLogValue(4, 1, 60000, 1, {"t": [0, 1]}, 5, 6)  # version 0 (Kafka 3) still reads
    assert parse_txn_value(txn_value_v0(old)) == TxnLogValue(4, 1, 60000, 1, {"t": [0, 1]}, 5, 6, version=0)
