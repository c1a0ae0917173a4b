"""Helpers of the consumer-group tests (plain functions and classes, no fixtures).

Every wait is bounded by a deadline; nothing asserts on how long anything took.

The central tool is :class:`Member`: one confluent-kafka consumer in a thread of its own that
subscribes, polls, commits every record synchronously right after reading it, and writes what
happened (records delivered, commits acknowledged, partitions assigned and revoked) to an
:class:`EventLog` shared by the whole group. :func:`check_group_delivery` then checks the
group's guarantee from that log:

* every record produced was delivered to the group at least once, with the right value;
* a record is never delivered again after a commit past it was acknowledged (no committed
  record re-delivered);
* in the end the group's committed offsets are the log end offsets (nothing lost).
"""

from __future__ import annotations

import json
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from samsa.protocol.api import decode_response, encode_request

WAIT = 60.0   # seconds: the bound of every wait for the broker / the group
HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent


from broker_process import BrokerProcess, free_port  # noqa: E402,F401  (used by the tests)
from waiting import wait_until  # noqa: F401  (the shared wait; test modules import it from here too)

# Broker settings of the group tests: quick session expiry allowed, no initial delay.
GROUP_BROKER = {"group.min.session.timeout.ms": 1000, "group.initial.rebalance.delay.ms": 0,
                # the consumer group protocol (KIP-848): sessions and heartbeats are the broker's
                "group.consumer.min.session.timeout.ms": 1000, "group.consumer.session.timeout.ms": 3000,
                "group.consumer.min.heartbeat.interval.ms": 100, "group.consumer.heartbeat.interval.ms": 300,
                "group.consumer.max.size": 8,
                # share groups (KIP-932): the same, and a small group size to reach it
                "group.share.min.session.timeout.ms": 1000, "group.share.session.timeout.ms": 3000,
                "group.share.min.heartbeat.interval.ms": 100, "group.share.heartbeat.interval.ms": 300,
                "group.share.max.size": 6}

# Consumer settings: short session and heartbeat so that rebalances are quick.
FAST = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 300, "fetch.wait.max.ms": 100,
        "auto.offset.reset": "earliest", "enable.auto.commit": False, "enable.partition.eof": False,
        "reconnect.backoff.ms": 20, "reconnect.backoff.max.ms": 250, "retry.backoff.ms": 20,
        "retry.backoff.max.ms": 250, "log_level": 2}


# Consumer settings with group.protocol=consumer: no session or heartbeat settings (the
# broker's), no assignment strategy (the broker assigns).
KIP848 = {"group.protocol": "consumer",
          **{k: v for k, v in FAST.items() if k not in ("session.timeout.ms", "heartbeat.interval.ms")}}


def cconf(**conf) -> dict:
    """librdkafka properties from keyword arguments (``session_timeout_ms`` → ``session.timeout.ms``)."""
    return {k.replace("_", "."): v for k, v in conf.items()}


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def create_topic(bootstrap: str, name: str, partitions: int = 1, config: dict | None = None) -> None:
    a = admin(bootstrap)
    fs = a.create_topics([NewTopic(name, partitions, 1, config=config or {})],
                         operation_timeout=WAIT, request_timeout=WAIT)
    fs[name].result(WAIT)


def producer(bootstrap: str) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "linger.ms": 2, "message.timeout.ms": 60000})


def rid(partition: int, n: int) -> bytes:
    """The value of the ``n``-th record produced to ``partition``: its id."""
    return f"p{partition}-{n:06d}".encode()


def produce_ids(bootstrap: str, topic: str, partitions, count: int, start: int = 0,
                p: Producer | None = None) -> dict[int, list[tuple[int, bytes]]]:
    """Produce ``count`` records with ids ``rid(p, start..start+count-1)`` to each partition;
    flush; return {partition: [(offset, value)]} of the acknowledged records."""
    own = p is None
    p = p or producer(bootstrap)
    acked: dict[int, list[tuple[int, bytes]]] = {}
    errors: list = []

    def dr(err, msg):
        if err is not None:
            errors.append(err)
        else:
            acked.setdefault(msg.partition(), []).append((msg.offset(), msg.value()))

    for n in range(start, start + count):
        for part in partitions:
            p.produce(topic, value=rid(part, n), partition=part, on_delivery=dr)
            p.poll(0)
    assert p.flush(WAIT) == 0, "records still in the producer queue"
    assert not errors, errors
    if own:
        del p
    return acked


def end_offsets(bootstrap: str, topic: str, partitions) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "samsa-groups-watermarks"})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=WAIT, cached=False)[1]
                for p in partitions}
    finally:
        c.close()


def committed(bootstrap: str, group: str, topic: str, partitions) -> dict[int, int]:
    """The group's committed offsets (confluent ``committed()``, i.e. OffsetFetch); -1001 = none."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        tps = c.committed([TopicPartition(topic, p) for p in partitions], timeout=WAIT)
        return {tp.partition: tp.offset for tp in tps}
    finally:
        c.close()


def committed_tps(bootstrap: str, group: str, topic: str, partitions) -> list[TopicPartition]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        return c.committed([TopicPartition(topic, p) for p in partitions], timeout=WAIT)
    finally:
        c.close()


def describe_group(bootstrap: str, group: str):
    a = admin(bootstrap)
    return a.describe_consumer_groups([group], request_timeout=WAIT)[group].result(WAIT)


def group_state(bootstrap: str, group: str) -> tuple[str, dict[str, list[tuple[str, int]]]]:
    """(state name, {member id: sorted [(topic, partition)]}) from DescribeGroups."""
    d = describe_group(bootstrap, group)
    members = {m.member_id: sorted((tp.topic, tp.partition) for tp in m.assignment.topic_partitions)
               for m in d.members}
    return d.state.name, members


def wait_stable(bootstrap: str, group: str, members: int, partitions: int | None = None,
                timeout: float = WAIT):
    """Wait until DescribeGroups says Stable with ``members`` members (and, if given, that many
    partitions assigned in all, none twice); return the member → partitions map."""
    def check():
        state, assignment = group_state(bootstrap, group)
        if state != "STABLE" or len(assignment) != members:
            return None
        owned = [tp for tps in assignment.values() for tp in tps]
        if partitions is not None and (len(owned) != partitions or len(set(owned)) != partitions):
            return None
        return assignment
    return wait_until(check, timeout=timeout, interval=0.2, what=f"group {group} Stable with {members} members")


# ----------------------------------------------------------------------------------- events


@dataclass
class Event:
    seq: int
    kind: str           # rec | commit | assign | revoke | lost | commit_error
    member: str
    partition: int = -1
    offset: int = -1
    value: bytes | None = None
    partitions: tuple = ()


class EventLog:
    """What happened to a group, in one total order (a sequence number taken under a lock right
    after the client call returned)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.events: list[Event] = []
        self._seq = 0

    def add(self, kind: str, member: str, **kw) -> Event:
        with self.lock:
            self._seq += 1
            e = Event(self._seq, kind, member, **kw)
            self.events.append(e)
            return e

    def of(self, kind: str, member: str | None = None) -> list[Event]:
        with self.lock:
            return [e for e in self.events if e.kind == kind and (member is None or e.member == member)]

    def delivered(self) -> set[tuple[int, int]]:
        return {(e.partition, e.offset) for e in self.of("rec")}


class Member(threading.Thread):
    """A confluent-kafka consumer of a group, in a thread: subscribe, poll, commit each record
    synchronously (``commit=True``), log everything. ``stop()`` closes it (LeaveGroup)."""

    def __init__(self, bootstrap: str, group: str, topics: list[str], log: EventLog, name: str,
                 commit: bool = True, base: dict | None = None, **conf):
        super().__init__(daemon=True, name=name)
        self.conf = {"bootstrap.servers": bootstrap, "group.id": group, "client.id": name, **(base or FAST),
                     **cconf(**conf)}
        self.topics, self.log, self.commit_each = topics, log, commit
        self.assignment: set[tuple[str, int]] = set()
        self.assigns: list[list[tuple[str, int]]] = []   # every on_assign list, as given
        self.revokes: list[list[tuple[str, int]]] = []   # every on_revoke list, as given
        self.not_incremental: list = []   # cooperative on_assign lists naming partitions already owned
        self.cooperative = ("cooperative" in str(self.conf.get("partition.assignment.strategy", ""))
                            or self.conf.get("group.protocol") == "consumer")  # KIP-848 is incremental
        self._halt = threading.Event()
        self.error: BaseException | None = None
        self.closed = threading.Event()

    # callbacks run in this thread, inside poll()
    def _on_assign(self, c, tps):
        got = [(tp.topic, tp.partition) for tp in tps]
        self.assigns.append(got)
        if self.cooperative and set(got) & self.assignment:
            self.not_incremental.append((sorted(self.assignment), got))
        if self.cooperative:
            self.assignment |= set(got)
        else:
            self.assignment = set(got)
        self.log.add("assign", self.name, partitions=tuple(got))

    def _on_revoke(self, c, tps):
        got = [(tp.topic, tp.partition) for tp in tps]
        self.revokes.append(got)
        self.assignment -= set(got)
        self.log.add("revoke", self.name, partitions=tuple(got))

    def _on_lost(self, c, tps):
        got = [(tp.topic, tp.partition) for tp in tps]
        self.revokes.append(got)
        self.assignment -= set(got)
        self.log.add("lost", self.name, partitions=tuple(got))

    def run(self):
        try:
            c = Consumer(self.conf)
            c.subscribe(self.topics, on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost)
            try:
                while not self._halt.is_set():
                    m = c.poll(0.1)
                    if m is None:
                        continue
                    if m.error():
                        continue  # transient (e.g. a partition EOF or a broker restart)
                    self.log.add("rec", self.name, partition=m.partition(), offset=m.offset(), value=m.value())
                    if self.commit_each:
                        try:
                            c.commit(message=m, asynchronous=False)
                        except KafkaException as e:
                            self.log.add("commit_error", self.name, partition=m.partition(), offset=m.offset() + 1,
                                         value=str(e).encode())
                        else:
                            self.log.add("commit", self.name, partition=m.partition(), offset=m.offset() + 1)
            finally:
                c.close()
                self.closed.set()
        except BaseException as e:  # noqa: BLE001 - reported by stop()
            self.error = e
            self.closed.set()

    def stop(self, timeout: float = WAIT) -> None:
        self._halt.set()
        self.join(timeout)
        assert not self.is_alive(), f"member {self.name} did not close"
        if self.error:
            raise self.error

    def owned(self) -> set[int]:
        return {p for _, p in self.assignment}


def check_group_delivery(log: EventLog, expected: dict[int, list[tuple[int, bytes]]],
                         final_committed: dict[int, int] | None = None) -> None:
    """The group's guarantee, from the event log. ``expected``: {partition: [(offset, value)]}
    of every record produced. See the module docstring."""
    recs = log.of("rec")
    # every record delivered, with its value
    got: dict[tuple[int, int], bytes] = {}
    for e in recs:
        got.setdefault((e.partition, e.offset), e.value)
        assert got[(e.partition, e.offset)] == e.value, f"two values at {e.partition}@{e.offset}"
    missing = [(p, o) for p, rs in expected.items() for o, _ in rs if (p, o) not in got]
    assert not missing, f"{len(missing)} records never delivered to the group, e.g. {missing[:5]}"
    wrong = [(p, o) for p, rs in expected.items() for o, v in rs if got[(p, o)] != v]
    assert not wrong, f"records delivered with another value: {wrong[:5]}"
    # nothing re-delivered after a commit past it was acknowledged
    high: dict[int, int] = {}
    redelivered_committed = []
    for e in sorted(log.of("rec") + log.of("commit"), key=lambda e: e.seq):
        if e.kind == "commit":
            high[e.partition] = max(high.get(e.partition, 0), e.offset)
        elif e.offset < high.get(e.partition, 0):
            redelivered_committed.append((e.member, e.partition, e.offset, high[e.partition]))
    assert not redelivered_committed, (
        f"{len(redelivered_committed)} records delivered again after the group committed past them "
        f"(member, partition, offset, committed): {redelivered_committed[:5]}")
    # a record delivered twice: only if the commit after its first delivery failed
    failed = {(e.partition, e.offset - 1) for e in log.of("commit_error")}
    unexplained = [k for k in duplicates(log) if k not in failed]
    assert not unexplained, (f"{len(unexplained)} records delivered twice although no commit of them failed: "
                             f"{unexplained[:5]}")
    if final_committed is not None:
        ends = {p: (rs[-1][0] + 1 if rs else 0) for p, rs in expected.items()}
        assert final_committed == ends, f"committed {final_committed} != end offsets {ends}"


def commit_high(log: EventLog) -> dict[int, int]:
    """Per partition, the highest offset whose commit was acknowledged."""
    high: dict[int, int] = {}
    for e in log.of("commit"):
        high[e.partition] = max(high.get(e.partition, 0), e.offset)
    return high


def wait_consumed(log: EventLog, expected: dict[int, list[tuple[int, bytes]]], timeout: float = WAIT,
                  what: str = "the group to read and commit everything") -> None:
    """Wait until every expected record was delivered and a commit up to the end was acknowledged."""
    ends = {p: (rs[-1][0] + 1 if rs else 0) for p, rs in expected.items()}

    def done():
        high = commit_high(log)
        return all(high.get(p, 0) >= end for p, end in ends.items() if end > 0)
    wait_until(done, timeout=timeout, interval=0.1, what=what)


def merge(*acked: dict[int, list[tuple[int, bytes]]]) -> dict[int, list[tuple[int, bytes]]]:
    out: dict[int, list[tuple[int, bytes]]] = {}
    for a in acked:
        for p, rs in a.items():
            out.setdefault(p, []).extend(rs)
    return {p: sorted(rs) for p, rs in out.items()}


class Feeder(threading.Thread):
    """Keeps producing records with ids to every partition, a batch at a time, until stopped;
    ``acked`` has what was acknowledged."""

    def __init__(self, bootstrap: str, topic: str, partitions, batch: int = 5, pause: float = 0.05):
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, list(partitions)
        self.batch, self.pause = batch, pause
        self.acked: dict[int, list[tuple[int, bytes]]] = {}
        self.start_at: dict[int, int] = {}
        self._halt = threading.Event()
        self.error: BaseException | None = None

    def run(self):
        try:
            p = producer(self.bootstrap)
            n = 10_000
            while not self._halt.is_set():
                got = produce_ids(self.bootstrap, self.topic, self.partitions, self.batch, start=n, p=p)
                for part, rs in got.items():
                    self.acked.setdefault(part, []).extend(rs)
                n += self.batch
                time.sleep(self.pause)  # the feeder's pace between batches, not a wait for anything
        except BaseException as e:  # noqa: BLE001 - reported by stop()
            self.error = e

    def stop(self) -> dict[int, list[tuple[int, bytes]]]:
        self._halt.set()
        self.join(WAIT)
        assert not self.is_alive()
        if self.error:
            raise self.error
        return self.acked


def duplicates(log: EventLog) -> list[tuple[int, int]]:
    seen, dup = set(), []
    for e in log.of("rec"):
        k = (e.partition, e.offset)
        if k in seen:
            dup.append(k)
        seen.add(k)
    return dup


# ----------------------------------------------------------------------------------- subprocess members


class ProcMember:
    """``member_proc.py`` in a child process: a consumer we can SIGKILL (no LeaveGroup). It
    prints one JSON event per line; a thread collects them."""

    def __init__(self, bootstrap: str, group: str, topics: list[str], name: str, conf: dict | None = None,
                 commit: str = "each", base: dict | None = None):
        self.name = name
        args = {"bootstrap": bootstrap, "group": group, "topics": topics, "name": name, "commit": commit,
                "conf": {**(base or FAST), **(conf or {})}}
        self.proc = subprocess.Popen([sys.executable, str(HERE / "member_proc.py"), json.dumps(args)],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=ROOT)
        self.events: list[dict] = []
        self.lock = threading.Lock()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            with self.lock:
                self.events.append(ev)

    def of(self, kind: str) -> list[dict]:
        with self.lock:
            return [e for e in self.events if e["ev"] == kind]

    def assignment(self) -> set[int] | None:
        """The partitions it owns, None before its first assignment. (Assign adds, revoke and lost
        remove: right for eager protocols, which revoke everything first, and for cooperative ones.)"""
        with self.lock:
            cur = None
            for e in self.events:
                if e["ev"] == "assign":
                    cur = (cur or set()) | set(e["partitions"])
                elif e["ev"] in ("revoke", "lost") and cur is not None:
                    cur -= set(e["partitions"])
            return cur

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self.reader.join(10)

    def stop(self) -> None:
        """SIGTERM: the child closes its consumer (LeaveGroup) and exits."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(WAIT)
            except subprocess.TimeoutExpired:
                self.kill()
        self.reader.join(10)


# ----------------------------------------------------------------------------------- raw protocol


class Closed(Exception):
    pass


class Raw:
    """One plain TCP connection speaking the wire protocol by hand."""

    def __init__(self, port: int, client_id: str = "groups-raw"):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
        self.correlation_id = 0
        self.client_id = client_id

    def close(self):
        self.sock.close()

    def send(self, api_key: int, version: int, body: dict) -> int:
        self.correlation_id += 1
        self.sock.sendall(b"".join(bytes(c) for c in
                                   encode_request(api_key, version, self.correlation_id, self.client_id, body)))
        return self.correlation_id

    def _read(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            try:
                chunk = self.sock.recv(n - len(buf))
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                raise Closed()
            buf += chunk
        return bytes(buf)

    def recv(self, api_key: int, version: int, cid: int) -> dict:
        (size,) = struct.unpack(">i", self._read(4))
        got_cid, response = decode_response(api_key, version, self._read(size))
        assert got_cid == cid
        return response

    def call(self, api_key: int, version: int, body: dict) -> dict:
        return self.recv(api_key, version, self.send(api_key, version, body))


# ----------------------------------------------------------------------------------- kcat -G


class KcatMember:
    """``kcat -G group topic``: librdkafka's balanced consumer as a command-line tool (auto-commit
    on). Prints ``partition offset value`` per record; a thread collects them."""

    def __init__(self, bootstrap: str, group: str, topics: list[str], client_id: str = "kcat-member",
                 extra: dict | None = None):
        conf = {"client.id": client_id, "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 300, "fetch.wait.max.ms": 100, "auto.commit.interval.ms": 200,
                "log_level": 0, **(extra or {})}
        argv = ["kcat", "-b", bootstrap, "-G", group, "-u", "-q", "-f", "%p %o %s\\n"]
        for k, v in conf.items():
            argv += ["-X", f"{k}={v}"]
        argv += topics
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.records: list[tuple[int, int, bytes]] = []
        self.lock = threading.Lock()
        self.stderr: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.err_reader = threading.Thread(target=lambda: self.stderr.extend(self.proc.stderr), daemon=True)
        self.err_reader.start()

    def _read(self):
        for line in self.proc.stdout:
            parts = line.rstrip("\n").split(" ", 2)
            if len(parts) == 3 and parts[0].isdigit():
                with self.lock:
                    self.records.append((int(parts[0]), int(parts[1]), parts[2].encode()))

    def got(self) -> list[tuple[int, int, bytes]]:
        with self.lock:
            return list(self.records)

    def stop(self) -> None:
        """SIGTERM: kcat commits, leaves the group and exits."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(WAIT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.reader.join(10)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


# ----------------------------------------------------------------------------------- raw group client

# Kafka error codes
NONE, UNKNOWN_TOPIC_OR_PARTITION, OFFSET_METADATA_TOO_LARGE = 0, 3, 12
ILLEGAL_GENERATION, INCONSISTENT_GROUP_PROTOCOL, INVALID_GROUP_ID, UNKNOWN_MEMBER_ID = 22, 23, 24, 25
INVALID_SESSION_TIMEOUT, REBALANCE_IN_PROGRESS = 26, 27
NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND, MEMBER_ID_REQUIRED, GROUP_MAX_SIZE_REACHED = 68, 69, 79, 81
FENCED_INSTANCE_ID, GROUP_SUBSCRIBED_TO_TOPIC = 82, 86

OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP = 8, 9, 10, 11, 12, 13
SYNC_GROUP, DESCRIBE_GROUPS, LIST_GROUPS, DELETE_GROUPS, OFFSET_DELETE = 14, 15, 16, 42, 47


def subscription(topics: list[str]) -> bytes:
    """ConsumerProtocolSubscription v0 (what a consumer puts in JoinGroup protocol metadata)."""
    from samsa.protocol import codec
    return struct.pack(">h", 0) + codec.encode_bytes("ConsumerProtocolSubscription", 0,
                                                     {"topics": topics, "user_data": None})


def assignment(parts: dict[str, list[int]]) -> bytes:
    """ConsumerProtocolAssignment v0 (what the leader sends for each member in SyncGroup)."""
    from samsa.protocol import codec
    return struct.pack(">h", 0) + codec.encode_bytes(
        "ConsumerProtocolAssignment", 0,
        {"assigned_partitions": [{"topic": t, "partitions": ps} for t, ps in parts.items()], "user_data": None})


def parse_assignment(data: bytes) -> dict[str, list[int]]:
    from samsa.protocol import codec
    body, _ = codec.decode("ConsumerProtocolAssignment", 0, memoryview(data), 2)
    return {t["topic"]: t["partitions"] for t in body["assigned_partitions"]}


class GroupClient(Raw):
    """Raw group requests with sensible defaults; each returns the decoded response."""

    def join(self, group: str, member_id: str = "", *, version: int = 5, session_ms: int = 6000,
             rebalance_ms: int = 6000, instance_id: str | None = None, protocol_type: str = "consumer",
             protocols: list[tuple[str, bytes]] | None = None, topics: list[str] = ("t",)) -> dict:
        body = {"group_id": group, "session_timeout_ms": session_ms, "rebalance_timeout_ms": rebalance_ms,
                "member_id": member_id, "group_instance_id": instance_id, "protocol_type": protocol_type,
                "protocols": [{"name": n, "metadata": m} for n, m in
                              (protocols or [("range", subscription(list(topics)))])],
                "reason": None}
        return self.call(JOIN_GROUP, version, body)

    def join_send(self, group: str, member_id: str = "", *, version: int = 5, **kw) -> int:
        """Send a JoinGroup without waiting (it may be parked until the rebalance completes)."""
        body = {"group_id": group, "session_timeout_ms": kw.get("session_ms", 6000),
                "rebalance_timeout_ms": kw.get("rebalance_ms", 6000), "member_id": member_id,
                "group_instance_id": kw.get("instance_id"), "protocol_type": "consumer",
                "protocols": [{"name": n, "metadata": m} for n, m in
                              (kw.get("protocols") or [("range", subscription(list(kw.get("topics", ["t"]))))])],
                "reason": None}
        return self.send(JOIN_GROUP, version, body)

    def join_new(self, group: str, **kw) -> dict:
        """Join as a new dynamic member (v4+: MEMBER_ID_REQUIRED first, then again with the id)."""
        r = self.join(group, "", **kw)
        if r["error_code"] == MEMBER_ID_REQUIRED:
            r = self.join(group, r["member_id"], **kw)
        return r

    def sync(self, group: str, generation: int, member_id: str, assignments: dict[str, bytes] | None = None, *,
             version: int = 3, instance_id: str | None = None) -> dict:
        body = {"group_id": group, "generation_id": generation, "member_id": member_id,
                "group_instance_id": instance_id, "protocol_type": "consumer", "protocol_name": "range",
                "assignments": [{"member_id": m, "assignment": a} for m, a in (assignments or {}).items()]}
        if version < 5:
            body["protocol_type"] = body["protocol_name"] = None
        return self.call(SYNC_GROUP, version, body)

    def heartbeat(self, group: str, generation: int, member_id: str, *, version: int = 3,
                  instance_id: str | None = None) -> int:
        return self.call(HEARTBEAT, version, {"group_id": group, "generation_id": generation, "member_id": member_id,
                                              "group_instance_id": instance_id})["error_code"]

    def leave(self, group: str, member_id: str, *, instance_id: str | None = None) -> dict:
        return self.call(LEAVE_GROUP, 4, {"group_id": group, "members": [
            {"member_id": member_id, "group_instance_id": instance_id, "reason": None}]})

    def describe(self, group: str) -> dict:
        return self.call(DESCRIBE_GROUPS, 4, {"groups": [group], "include_authorized_operations": False})["groups"][0]

    def commit(self, group: str, offsets: dict[tuple[str, int], int], *, generation: int = -1, member_id: str = "",
               metadata: str | None = "", version: int = 8, instance_id: str | None = None) -> dict[tuple[str, int], int]:
        topics: dict[str, list] = {}
        for (t, p), o in offsets.items():
            topics.setdefault(t, []).append({"partition_index": p, "committed_offset": o,
                                             "committed_leader_epoch": -1, "commit_timestamp": -1,
                                             "committed_metadata": metadata})
        r = self.call(OFFSET_COMMIT, version, {
            "group_id": group, "generation_id_or_member_epoch": generation, "member_id": member_id,
            "group_instance_id": instance_id, "retention_time_ms": -1,
            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]})
        return {(t["name"], p["partition_index"]): p["error_code"] for t in r["topics"] for p in t["partitions"]}

    def fetch(self, group: str, parts: list[tuple[str, int]] | None, *, version: int = 7) -> dict:
        """{(topic, partition): (offset, leader epoch, metadata, error)} plus the group error at key None."""
        topics = None
        if parts is not None:
            by: dict[str, list[int]] = {}
            for t, p in parts:
                by.setdefault(t, []).append(p)
            topics = [{"name": t, "partition_indexes": ps} for t, ps in by.items()]
        r = self.call(OFFSET_FETCH, version, {"group_id": group, "topics": topics, "require_stable": False})
        out = {(t["name"], p["partition_index"]): (p["committed_offset"], p.get("committed_leader_epoch", -1),
                                                   p["metadata"], p["error_code"])
               for t in r["topics"] for p in t["partitions"]}
        out[None] = r.get("error_code", 0)
        return out


def stable_raw_group(port: int, group: str, topics=("t",), n: int = 1, **join_kw):
    """Form a group of ``n`` dynamic raw members (JoinGroup v4+) and complete its rebalance, the
    leader (the first client) assigning partition i of the first topic to the i-th member; returns (clients, member ids, generation, leader id)."""
    clients = [GroupClient(port) for _ in range(n)]
    ids = []
    for c in clients:
        r = c.join(group, "", **join_kw)
        assert r["error_code"] in (MEMBER_ID_REQUIRED, NONE), r
        ids.append(r["member_id"])
    cids = []
    for i, (c, mid) in enumerate(zip(clients, ids)):
        cids.append(c.join_send(group, mid, topics=list(topics), **join_kw))
        if i == 0 and n > 1:
            # the first member is in (and waits for the others): it is the leader
            observer = GroupClient(port)
            wait_until(lambda: observer.describe(group)["group_state"] == "PreparingRebalance",
                       what="the first member's join")
            observer.close()
    joins = [c.recv(JOIN_GROUP, join_kw.get("version", 5), cid) for c, cid in zip(clients, cids)]
    for r in joins:
        assert r["error_code"] == NONE, r
    gen, leader = joins[0]["generation_id"], joins[0]["leader"]
    assert leader == ids[0]
    assert all(r["generation_id"] == gen for r in joins)
    sync_cids = []
    for c, mid in zip(clients, ids):
        assign = {m: assignment({topics[0]: [i]}) for i, m in enumerate(ids)} if mid == leader else {}
        body = {"group_id": group, "generation_id": gen, "member_id": mid, "group_instance_id": None,
                "protocol_type": None, "protocol_name": None,
                "assignments": [{"member_id": m, "assignment": a} for m, a in assign.items()]}
        sync_cids.append(c.send(SYNC_GROUP, 3, body))
    for c, cid in zip(clients, sync_cids):
        r = c.recv(SYNC_GROUP, 3, cid)
        assert r["error_code"] == NONE, r
    return clients, ids, gen, leader
