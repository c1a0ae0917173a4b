"""Helpers of the share-group tests (KIP-932): plain functions and classes, no fixtures.

:class:`ShareTarget` is one broker: topics, group configs (IncrementalAlterConfigs on the
GROUP resource, as ``kafka-configs --entity-type groups`` sets them), producers. Every wait
is bounded (``WAIT``); nothing asserts on how long anything took.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Callable

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic,
                                   ResourceType)

import one_request
from waiting import wait_until

WAIT = 60.0
# What the tests set per group, within the bounds both brokers get (tests/kafka_process.py).
SHARE_BROKER_CONFIG = {"group.share.min.record.lock.duration.ms": 1000,
                       "group.share.min.heartbeat.interval.ms": 500,
                       "group.share.min.session.timeout.ms": 6000}
FAST = {"share.auto.offset.reset": "earliest", "share.heartbeat.interval.ms": "500"}
SHARE_APIS = (76, 78, 79)  # ShareGroupHeartbeat, ShareFetch, ShareAcknowledge
SHARE_OFFSET_APIS = (90, 91, 92)  # Describe/Alter/DeleteShareGroupOffsets


def round_trip(bootstrap: str, api_key: int, version: int, body: dict) -> dict:
    """One request to a one-broker cluster (which is every group's coordinator) and its answer."""
    return one_request.round_trip(bootstrap, api_key, version, body, "share-tests")


def api_keys(bootstrap: str) -> set[int]:
    """The API keys a broker advertises (ApiVersions v0)."""
    return {k["api_key"] for k in round_trip(bootstrap, 18, 0, {})["api_keys"]}


def share_members(bootstrap: str, group: str) -> list[dict]:
    """The share group's members as ShareGroupDescribe v1 answers them ([] if no such group)."""
    g = round_trip(bootstrap, 77, 1, {"group_ids": [group], "include_authorized_operations": False})["groups"][0]
    return g["members"] if g["error_code"] == 0 else []


def wait_members_assigned(bootstrap: str, group: str, n: int) -> None:
    """Until ``n`` members each have an assignment (the coordinator assigns in the background)."""
    wait_until(lambda: len([m for m in share_members(bootstrap, group)
                            if m["assignment"]["topic_partitions"]]) >= n, f"{n} assigned members of {group}", WAIT)


def share_out(target: "ShareTarget", group: str, topic: str, polls: list[Callable[[], list[str]]],
              closes: list[Callable[[], None]], values: list[str]) -> list[list[str]]:
    """Each poll function in its own thread until every member is assigned, then ``values``
    produced to partition 0 one by one, until all of them came: what each poll function got.
    The consumers are closed (``closes``) in the end."""
    got: list[list[str]] = [[] for _ in polls]
    stop = threading.Event()

    def run(i: int) -> None:
        while not stop.is_set():
            got[i] += polls[i]()
    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(polls))]
    try:
        for t in threads:
            t.start()
        wait_members_assigned(target.bootstrap, group, len(polls))
        p = Producer({"bootstrap.servers": target.bootstrap, "batch.num.messages": 1, "linger.ms": 0})
        for v in values:
            p.produce(topic, v.encode(), partition=0)
            p.poll(0)
        assert p.flush(WAIT) == 0
        wait_until(lambda: sum(map(len, got)) >= len(values), "every record consumed", WAIT)
    finally:
        stop.set()
        for t in threads:
            t.join(10)
        for close in closes:
            close()
    return got


class ShareTarget:
    def __init__(self, name: str, bootstrap: str):
        self.name = name
        self.bootstrap = bootstrap
        self.admin = AdminClient({"bootstrap.servers": bootstrap})

    @classmethod
    def samsa(cls, bootstrap: str) -> "ShareTarget":
        target = cls("samsa", bootstrap)
        target.needs(*SHARE_APIS)
        return target

    def needs(self, *api: int) -> None:
        """These API keys must be advertised: a broker without them fails the test, never skips it."""
        missing = [k for k in api if k not in api_keys(self.bootstrap)]
        assert not missing, f"the {self.name} broker does not advertise API keys {missing}"

    def names(self, prefix: str) -> tuple[str, str]:
        """A fresh topic and group name."""
        tag = f"{prefix}-{self.name}-{uuid.uuid4().hex[:8]}"
        return f"t-{tag}", f"g-{tag}"

    def create_topic(self, topic: str, partitions: int = 1) -> None:
        self.admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(WAIT)
        wait_until(lambda: topic in self.admin.list_topics(topic, timeout=5).topics and
                   not self.admin.list_topics(topic, timeout=5).topics[topic].error, f"topic {topic}", WAIT)

    def group_config(self, group: str, **configs: object) -> None:
        """Set share.* group configs (dots as underscores in the keywords)."""
        fast = dict(FAST)
        if self.name == "kafka":  # Kafka batches assignments (1 s); Samsa assigns at once and has no such key
            fast["share.assignment.interval.ms"] = "100"
        entries = [ConfigEntry(k.replace("_", "."), str(v), incremental_operation=AlterConfigOpType.SET)
                   for k, v in {**{k.replace(".", "_"): v for k, v in fast.items()}, **configs}.items()]
        r = ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)
        self.admin.incremental_alter_configs([r])[r].result(WAIT)

    def produce(self, topic: str, values: list[str], partition: int = 0) -> None:
        p = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True})
        errors: list = []
        for v in values:
            p.produce(topic, v.encode(), partition=partition,
                      on_delivery=lambda err, _m: err and errors.append(err))
        assert p.flush(WAIT) == 0 and not errors, errors

    def produce_transactions(self, topic: str, committed: list[str], aborted: list[str]) -> None:
        """One aborted transaction then one committed one, interleaved with nothing else."""
        p = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": f"tx-{uuid.uuid4().hex[:8]}"})
        p.init_transactions(WAIT)
        p.begin_transaction()
        for v in aborted:
            p.produce(topic, v.encode(), partition=0)
        p.flush(WAIT)
        p.abort_transaction(WAIT)
        p.begin_transaction()
        for v in committed:
            p.produce(topic, v.encode(), partition=0)
        p.commit_transaction(WAIT)


def confluent_share_consumer(target: ShareTarget, group: str, topic: str, **config: object):
    from confluent_kafka import ShareConsumer
    c = ShareConsumer({"bootstrap.servers": target.bootstrap, "group.id": group, "log_level": 3,
                       **{k.replace("_", "."): v for k, v in config.items()}})
    c.subscribe([topic])
    return c


def poll_values(consumer, until, timeout: float = WAIT, on_record=None) -> list[tuple[str, int]]:
    """Poll a confluent ShareConsumer until ``until(received)``: [(value, delivery count)]."""
    received: list[tuple[str, int]] = []
    deadline = time.monotonic() + timeout
    while not until(received):
        assert time.monotonic() < deadline, f"only {received} within {timeout}s"
        for m in consumer.poll(0.5):
            if m.error():
                continue
            received.append((m.value().decode(), m.delivery_count()))
            if on_record is not None:
                on_record(m)
    return received
