"""ShareFetch v1-2 and ShareAcknowledge v1-2 over TCP against a real Samsa broker (embedded, its
share-group state kept by its share coordinator in __share_group_state): acquisition, accept, release redelivered with delivery
count 2, reject archived, lock expiry, the delivery count limit, sessions closing (by epoch -1
and by the connection) releasing the member's records, long polls woken by appends and by
releases, read_committed over a transactional topic, leadership reloading the state, an
acknowledgement whose state write fails rolled back (the records stay the member's), and the
errors Kafka 4.4 answers (the same requests went to Kafka 4.4.0 to learn them)."""

from __future__ import annotations

import os
import threading
import time

import pytest
from confluent_kafka import Producer
from share_wire import (ShareWire, ack, acquired, member, partition_of, set_group_configs,
                        start_share_broker)
from waiting import wait_until

from samsa.coordinator.share.state import PersisterError
from samsa.protocol import errors

ACCEPT, RELEASE, REJECT, GAP = 1, 2, 3, 0


@pytest.fixture
def wire(share_broker, request):
    broker = share_broker
    name = f"share-{request.node.name}-{os.getpid()}"
    w = ShareWire(broker.bootstrap_servers, name, "g-" + name)
    yield w
    w.close()


def test_api_versions_advertise_share_fetch_and_acknowledge(wire):
    assert wire.side.versions(78) == (1, 2)
    assert wire.side.versions(79) == (1, 2)


def test_acquire_accept_release_reject(wire, share_broker):
    m1, m2 = member(), member()
    opened = wire.open(m1)  # share.auto.offset.reset=latest: the log end
    assert opened["acquisition_lock_timeout_ms"] == 30000
    assert acquired(opened) == [] and partition_of(opened)["error_code"] == 0
    assert acquired(wire.open(m2)) == []
    for i in range(3):
        wire.produce([b"a%d" % i, b"b%d" % i, b"c%d" % i])
    first = wire.fetch(m1)
    assert acquired(first) == [(0, 8, 1)] and len(partition_of(first)["records"]) > 0
    assert wire.fetch(m2)["responses"] == []  # all acquired by m1: nothing for m2
    stolen = wire.fetch(m2, wire.topics(acks=[ack(0, 2, ACCEPT)]))
    p = partition_of(stolen)
    assert p["acknowledge_error_code"] == errors.E_INVALID_RECORD_STATE
    assert p["acknowledge_error_message"] == "Member is not the owner of batch record"
    # release 0-2, accept 3-5, reject 6 and 8, accept 7: the released batch comes back at once, delivery count 2
    again = wire.fetch(m1, wire.topics(acks=[ack(0, 2, RELEASE), ack(3, 5, ACCEPT), ack(6, 8, REJECT, ACCEPT, REJECT)]))
    assert partition_of(again)["acknowledge_error_code"] == 0
    assert acquired(again) == [(0, 2, 2)]
    done = wire.acknowledge(m1, [ack(0, 2, ACCEPT)])
    assert done["error_code"] == 0 and partition_of(done)["error_code"] == 0
    twice = wire.acknowledge(m1, [ack(8, 8, ACCEPT)])  # archived already: below the start offset now, ignored
    assert partition_of(twice)["error_code"] == 0
    assert wire.start_offset() == 9
    wire.produce([b"d"])
    late = wire.fetch(m2)
    assert acquired(late) == [(9, 9, 1)]
    not_acquired = wire.acknowledge(m1, [ack(9, 9, ACCEPT)])
    assert partition_of(not_acquired)["error_code"] == errors.E_INVALID_RECORD_STATE


def test_session_close_releases_records(wire):
    m1, m2 = member(), member()
    wire.open(m1)
    wire.open(m2)
    wire.produce([b"x", b"y"])
    assert acquired(wire.fetch(m1)) == [(0, 1, 1)]
    closed = wire.acknowledge(m1, [ack(0, 0, ACCEPT)], epoch=-1)  # acknowledges 0, closes, releases 1
    assert closed["error_code"] == 0 and partition_of(closed)["error_code"] == 0
    assert acquired(wire.fetch(m2)) == [(1, 1, 2)]
    assert wire.fetch(m1, epoch=3)["error_code"] == errors.E_SHARE_SESSION_NOT_FOUND


def test_connection_close_releases_records(wire, share_broker):
    broker = share_broker
    m1, m2 = member(), member()
    other = ShareWire(broker.bootstrap_servers, wire.topic, wire.group, create=False)
    other.open(m1)
    wire.open(m2)
    wire.produce([b"x", b"y"])
    assert acquired(other.fetch(m1)) == [(0, 1, 1)]
    other.close()  # its share session ends with its connection
    assert wait_until(lambda: acquired(wire.fetch(m2)) == [(0, 1, 2)], "records released by the closed connection", 15)


def test_long_poll_woken_by_append_and_by_release(wire):
    m1, m2 = member(), member()
    wire.open(m1)
    wire.open(m2)
    timer = threading.Timer(0.3, lambda: ShareWire(wire.side.bootstrap, wire.topic, wire.group, create=False)
                            .produce([b"late"]))
    timer.start()
    t0 = time.monotonic()
    r = wire.fetch(m1, max_wait_ms=20000)
    timer.join()
    assert acquired(r) == [(0, 0, 1)] and time.monotonic() - t0 < 15
    helper = ShareWire(wire.side.bootstrap, wire.topic, wire.group, create=False)
    try:
        helper.epochs[m1] = wire.epochs[m1]  # m1's session, over another connection
        timer = threading.Timer(0.3, lambda: helper.acknowledge(m1, [ack(0, 0, RELEASE)]))
        timer.start()
        t0 = time.monotonic()
        r = wire.fetch(m2, max_wait_ms=20000)
        timer.join()
        assert acquired(r) == [(0, 0, 2)] and time.monotonic() - t0 < 15
    finally:
        helper.close()


def test_session_epochs_and_bad_requests(wire):
    m1 = member()
    assert wire.fetch(m1, epoch=3)["error_code"] == errors.E_SHARE_SESSION_NOT_FOUND
    assert wire.fetch(m1, wire.topics(), epoch=0)["error_code"] == 0
    bad = wire.fetch(m1, epoch=5)
    assert bad["error_code"] == errors.E_INVALID_SHARE_SESSION_EPOCH and bad["acquisition_lock_timeout_ms"] == 0
    assert wire.fetch(m1, epoch=1)["error_code"] == 0
    assert wire.acknowledge(m1, [], epoch=0)["error_code"] == errors.E_INVALID_SHARE_SESSION_EPOCH
    with_acks = wire.fetch(m1, wire.topics(acks=[ack(0, 0, ACCEPT)]), epoch=0)
    assert with_acks["error_code"] == errors.E_INVALID_REQUEST and with_acks["responses"] == []
    assert wire.fetch("", wire.topics(), epoch=0)["error_code"] == errors.E_INVALID_REQUEST
    assert wire.fetch(m1, wire.topics(), epoch=0, group="")["error_code"] == errors.E_INVALID_REQUEST
    unknown = wire.fetch(member(), wire.topics(topic_id=os.urandom(16)) + wire.topics((5,)), epoch=0)
    codes = sorted(p["error_code"] for t in unknown["responses"] for p in t["partitions"])
    assert codes == [errors.E_UNKNOWN_TOPIC_OR_PARTITION, errors.E_UNKNOWN_TOPIC_ID]
    m2 = member()
    wire.open(m2)
    wire.produce([b"x", b"y"])
    wire.fetch(m2)
    for acks in ([ack(0, 1, ACCEPT, ACCEPT, ACCEPT)], [ack(0, 0, 9)], [ack(1, 0, ACCEPT)], [ack(0, 0)]):
        r = wire.fetch(m2, wire.topics(acks=acks))
        assert partition_of(r)["acknowledge_error_code"] == errors.E_INVALID_REQUEST, acks
    beyond = partition_of(wire.fetch(m2, wire.topics(acks=[ack(50, 50, ACCEPT)])))
    assert beyond["acknowledge_error_code"] == errors.E_INVALID_REQUEST
    assert beyond["acknowledge_error_message"] == \
        "Batch record not found. The first offset in request is past acquired records."
    forgot = wire.fetch(m2, forgotten=[{"topic_id": wire.topic_id, "partitions": [0]}])
    assert forgot["error_code"] == 0 and forgot["responses"] == []


def test_leadership_change_reloads_state_with_acquired_records_available(wire, share_broker):
    broker = share_broker
    m1, m2 = member(), member()
    wire.open(m1)
    wire.open(m2)
    wire.produce([b"a", b"b", b"c"])
    assert acquired(wire.fetch(m1)) == [(0, 2, 1)]
    assert partition_of(wire.acknowledge(m1, [ack(1, 1, ACCEPT)]))["error_code"] == 0
    # what the replica manager tells its listeners when this broker stops and starts leading the partition
    broker.server.shares.on_follower(wire.topic, 0)
    broker.server.shares.on_leader(wire.topic, 0)
    r = wire.fetch(m2)
    assert acquired(r) == [(0, 0, 2), (2, 2, 2)]


def test_read_committed_skips_aborted_records(share_broker, request):
    broker = share_broker
    name = f"share-rc-{os.getpid()}"
    for isolation in ("read_committed", "read_uncommitted"):
        wire = ShareWire(broker.bootstrap_servers, f"{name}-{isolation}", f"g-{name}-{isolation}")
        try:
            set_group_configs(broker, wire.group, {"share.isolation.level": isolation,
                                                   "share.auto.offset.reset": "earliest"})
            p = Producer({"bootstrap.servers": broker.bootstrap_servers, "transactional.id": f"tx-{name}-{isolation}"})
            p.init_transactions()
            p.begin_transaction()
            for i in range(3):
                p.produce(wire.topic, b"committed-%d" % i)
            p.commit_transaction()                       # 0-2, marker 3
            p.begin_transaction()
            for i in range(2):
                p.produce(wire.topic, b"aborted-%d" % i)
            p.flush()
            p.abort_transaction()                        # 4-5, marker 6
            wire.produce([b"plain"])                     # 7
            m = member()
            got = acquired(wire.open(m))
            if isolation == "read_committed":
                assert got == [(0, 3, 1), (6, 7, 1)]     # the markers' offsets are acquired, as Kafka does
            else:
                assert got == [(0, 7, 1)]
        finally:
            wire.close()


def test_lock_expiry_and_delivery_count_limit(short_lock_broker, request):
    broker = short_lock_broker
    name = f"share-locks-{os.getpid()}"
    wire = ShareWire(broker.bootstrap_servers, name, "g-" + name)
    try:
        m1, m2 = member(), member()
        assert wire.open(m1)["acquisition_lock_timeout_ms"] == 1000
        wire.open(m2)
        wire.produce([b"slow"])
        assert acquired(wire.fetch(m1)) == [(0, 0, 1)]
        # m1 never acknowledges: after the lock (1 s) the record is available again, delivery count 2
        r = wire.fetch(m2, max_wait_ms=10000)
        assert acquired(r) == [(0, 0, 2)]
        # m2 does not either: group.share.delivery.count.limit=2, so the record is archived, never delivered again
        wait_until(lambda: wire.start_offset() == 1, "the record archived after its second delivery", 15)
        assert wire.fetch(m1, max_wait_ms=1500)["responses"] == []
        # a group config shortens nothing below the broker's minimum; it may lengthen the lock
        set_group_configs(broker, wire.group, {"share.record.lock.duration.ms": "5000"})
        assert wire.fetch(m1)["acquisition_lock_timeout_ms"] == 5000
    finally:
        wire.close()


def test_v2_record_limit_and_renew(wire):
    m1 = member()
    wire.open(m1)
    wire.produce([b"a", b"b", b"c"])
    body = {"group_id": wire.group, "member_id": m1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
            "max_records": 2, "batch_size": 500, "forgotten_topics_data": []}

    def v2(epoch, topics=(), **kw):
        return wire.side.call(78, {**body, "share_session_epoch": epoch, "topics": list(topics), **kw}, 2)
    r = v2(1, share_acquire_mode=1)  # record_limit: exactly MaxRecords, splitting the batch
    assert acquired(r) == [(0, 1, 1)]
    # IsRenewAck: RENEW (4) keeps the records acquired under a new lock, and the request fetches nothing
    r = v2(2, wire.topics(acks=[ack(0, 1, 4)]), is_renew_ack=True)
    assert partition_of(r)["acknowledge_error_code"] == 0 and acquired(r) == []
    r = v2(3, wire.topics(acks=[ack(0, 0, 4)]))  # RENEW without IsRenewAck
    assert partition_of(r)["acknowledge_error_code"] == errors.E_INVALID_REQUEST
    assert acquired(r) == [(2, 2, 1)]
    wire.epochs[m1] = 4
    assert partition_of(wire.fetch(m1, wire.topics(acks=[ack(0, 0, 4)])))["acknowledge_error_code"] == \
        errors.E_INVALID_REQUEST  # v1 knows no RENEW
    r = wire.side.call(79, {"group_id": wire.group, "member_id": m1, "share_session_epoch": 5, "is_renew_ack": False,
                            "topics": wire.topics(acks=[ack(0, 2, ACCEPT)])}, 2)
    assert r["acquisition_lock_timeout_ms"] == 30000 and partition_of(r)["error_code"] == 0


def test_share_metrics(request):
    import sys
    from pathlib import Path

    from broker_process import free_port
    sys.path.insert(0, str(Path(__file__).parent.parent / "metrics"))
    from scrape import scrape, value
    port = free_port()
    broker = start_share_broker(**{"prometheus.listener": f"http://127.0.0.1:{port}"})
    wire = ShareWire(broker.bootstrap_servers, f"share-metrics-{os.getpid()}", "g-metrics")
    try:
        m1, m2 = member(), member()
        wire.open(m1)
        wire.open(m2)
        wire.produce([b"a", b"b", b"c", b"d"])
        wire.fetch(m1)
        wire.acknowledge(m1, [ack(0, 0, ACCEPT), ack(1, 1, RELEASE)])
        assert acquired(wire.fetch(m2)) == [(1, 1, 2)]
        m = scrape(f"http://127.0.0.1:{port}/metrics")
        labels = {"group": "g-metrics", "topic": wire.topic, "partition": "0"}
        assert value(m, "kafka_server_sharepartitionmetrics_inflightmessagecount", **labels) == 3
        assert value(m, "samsa_share_partition_acquired_records", **labels) == 3
        assert value(m, "samsa_share_redelivered_records_total") == 1
        assert value(m, "kafka_server_sharesessioncache_sharesessionscount") == 2
        assert value(m, "kafka_server_sharesessioncache_sharepartitionscount") == 2
    finally:
        wire.close()
        broker.stop()


def test_authorization_group_and_topic_read():
    from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient,
                                       ResourcePatternType, ResourceType)
    # ANONYMOUS (a PLAINTEXT client) may do what no ACL names; ACLs for someone else deny it the rest
    broker = start_share_broker(**{"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                                      "allow.everyone.if.no.acl.found": "true"})
    name = f"share-authz-{os.getpid()}"
    wire = ShareWire(broker.bootstrap_servers, name, "g-open")
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        acls = [AclBinding(ResourceType.TOPIC, name, ResourcePatternType.LITERAL, "User:alice", "*",
                           AclOperation.READ, AclPermissionType.ALLOW),
                AclBinding(ResourceType.GROUP, "g-closed", ResourcePatternType.LITERAL, "User:alice", "*",
                           AclOperation.READ, AclPermissionType.ALLOW)]
        for f in admin.create_acls(acls).values():
            f.result(30)
        wait_until(lambda: len(broker.server.authorizer.bindings) == 2, "the ACLs loaded", 15)
        closed = wire.fetch(member(), wire.topics(), epoch=0, group="g-closed")
        assert closed["error_code"] == errors.E_GROUP_AUTHORIZATION_FAILED and closed["responses"] == []
        m = member()
        r = wire.fetch(m, wire.topics(), epoch=0)
        assert r["error_code"] == 0 and partition_of(r)["error_code"] == errors.E_TOPIC_AUTHORIZATION_FAILED
        r = wire.acknowledge(m, [ack(0, 0, ACCEPT)], epoch=1)
        assert partition_of(r)["error_code"] == errors.E_TOPIC_AUTHORIZATION_FAILED
    finally:
        wire.close()
        broker.stop()


def test_state_moved_on_by_the_share_coordinator_is_loaded_again(wire):
    """The stored state is initialised anew (as an offsets reset does, at a higher state epoch):
    the leader's next write is fenced, it forgets its copy, and the next fetch starts from the new state."""
    m1 = member()
    wire.open(m1)
    wire.produce([b"r%d" % i for i in range(6)])
    assert acquired(wire.fetch(m1)) == [(0, 5, 1)]
    r = wire.side.call(83, {"group_id": wire.group, "topics": [{"topic_id": wire.topic_id, "partitions": [
        {"partition": 0, "state_epoch": 1, "start_offset": 4}]}]}, 0)
    assert r["results"][0]["partitions"][0]["error_code"] == 0, r
    fenced = wire.acknowledge(m1, [ack(0, 1, ACCEPT)])
    assert partition_of(fenced)["error_code"] == errors.E_FENCED_STATE_EPOCH
    assert acquired(wire.fetch(m1)) == [(4, 5, 1)]
    assert wire.start_offset() == 4


def test_max_bytes_zero_acquires_nothing(wire):
    m1 = member()
    wire.open(m1)
    wire.produce([b"a", b"b"])
    assert acquired(wire.fetch(m1, max_bytes=0)) == []  # librdkafka's fetch.max.bytes=0, as Kafka answers it
    assert acquired(wire.fetch(m1)) == [(0, 1, 1)]


class _FailingWriteOnce:
    """The broker's share-state persister, whose next write for ``group`` fails as when the share
    coordinator's broker is gone (COORDINATOR_NOT_AVAILABLE); everything else goes through."""

    def __init__(self, persister, group: str):
        self._persister = persister
        self._group = group
        self.failed = False

    def __getattr__(self, name):
        return getattr(self._persister, name)

    async def write(self, key, state):
        if key.group_id == self._group and not self.failed:
            self.failed = True
            raise PersisterError(errors.E_COORDINATOR_NOT_AVAILABLE, "the share coordinator is not available")
        return await self._persister.write(key, state)


def test_acknowledgement_whose_state_write_fails_is_rolled_back(wire, share_broker):
    """As Kafka: the client gets COORDINATOR_NOT_AVAILABLE and the records are again acquired by
    it (not delivered to another member, not counted as done), so acknowledging them again works."""
    shares = share_broker.server.shares
    m1, m2 = member(), member()
    wire.open(m1)
    wire.open(m2)
    wire.produce([b"a", b"b", b"c"])
    assert acquired(wire.fetch(m1)) == [(0, 2, 1)]
    failing = _FailingWriteOnce(shares.persister, wire.group)
    shares.persister = failing
    try:
        failed = wire.acknowledge(m1, [ack(0, 2, ACCEPT)])
        assert failed["error_code"] == 0 and partition_of(failed)["error_code"] == errors.E_COORDINATOR_NOT_AVAILABLE
        assert failing.failed
        assert wire.fetch(m2)["responses"] == []  # still m1's, under its lock
        assert wire.start_offset() == 0
        done = wire.acknowledge(m1, [ack(0, 2, ACCEPT)])
        assert partition_of(done)["error_code"] == 0
        assert wire.start_offset() == 3
    finally:
        shares.persister = failing._persister
