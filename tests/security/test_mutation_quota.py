"""``controller_mutation_rate`` (KIP-599) on a real broker: CreateTopics, CreatePartitions and
DeleteTopics take one token per partition. Samsa's Admin (CreateTopics v7, strict) gets
THROTTLING_QUOTA_EXCEEDED once the bucket is spent, until it refills; librdkafka (CreateTopics
v4, before the error existed) is served and told ``throttle_time_ms``; another client id is
not held back."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin import NewTopic as CKNewTopic

from broker_process import BrokerProcess
from samsa import Admin
from samsa.client.types import NewTopic
from samsa.protocol.errors import ThrottlingQuotaExceededError
from waiting import wait_until

RATE = 5.0  # partition mutations a second; burst: RATE * controller.quota.window.num (2) * 1 s = 10


@pytest.fixture(scope="module")
def mutation_broker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("mutations"), **{
        "controller.quota.window.num": 2, "controller.quota.window.size.seconds": 1})
    b.start()
    with Admin({"bootstrap.servers": b.bootstrap}) as admin:
        admin.alter_client_quotas([({"client-id": "mutator"}, {"controller_mutation_rate": RATE}),
                                   ({"client-id": "old-mutator"}, {"controller_mutation_rate": RATE})])
    yield b
    b.stop()


def test_strict_quota_refuses_until_the_bucket_refills(mutation_broker):
    conf = {"bootstrap.servers": mutation_broker.bootstrap, "client.id": "mutator"}
    with Admin(conf) as admin, Admin({**conf, "client.id": "other"}) as other:
        admin.create_topics([NewTopic("mq-a", 12, 1)])  # the burst (10) may be overdrawn once: -2 tokens
        with pytest.raises(ThrottlingQuotaExceededError, match="throttling quota has been exceeded"):
            admin.create_topics([NewTopic("mq-b", 1, 1)])
        other.create_topics([NewTopic("mq-other", 20, 1)])  # another client id: its own (no) quota
        admin.create_topics([NewTopic("mq-b", 1, 1)], validate_only=True)  # validation mutates nothing
        # 2 tokens owed at 5 a second: ~0.4 s (the connection was muted for as long)
        wait_until(lambda: _tries(admin.create_topics, [NewTopic("mq-b", 1, 1)]), "the bucket refilled", 10)
        wait_until(lambda: _tries(admin.create_partitions, {"mq-b": 12}), "the bucket refilled", 10)  # 11 more
        with pytest.raises(ThrottlingQuotaExceededError):
            admin.delete_topics(["mq-a"])
        wait_until(lambda: _tries(admin.delete_topics, ["mq-a"]), "the bucket refilled", 10)
        assert "mq-a" not in admin.list_topics() and admin.describe_topics(["mq-b"])["mq-b"].partitions[11]


def _tries(call, arg) -> bool:
    try:
        call(arg)
        return True
    except ThrottlingQuotaExceededError:
        return False


def test_older_versions_are_served_and_throttled(mutation_broker):
    throttles: list[int] = []
    admin = AdminClient({"bootstrap.servers": mutation_broker.bootstrap, "client.id": "old-mutator",
                         "throttle_cb": lambda event: throttles.append(event.throttle_time)})
    for f in admin.create_topics([CKNewTopic("mq-old-1", 15, 1)]).values():
        f.result(15)  # CreateTopics v4: no THROTTLING_QUOTA_EXCEEDED, the request is served
    for f in admin.create_topics([CKNewTopic("mq-old-2", 1, 1)]).values():
        f.result(15)
    wait_until(lambda: admin.poll(0.2) is not None and any(t > 0 for t in throttles), "a throttle_time_ms > 0", 10)
