"""Authorization of the APIs beyond produce and consume, as Kafka's broker checks them: eve
(authenticated, no ACL) is refused by each with Kafka's error code; carol, with a few ACLs,
gets what they allow (configs of her topic, her groups listed, her records deleted)."""

from __future__ import annotations

import asyncio

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient, ConfigResource,
                                   NewTopic, ResourcePatternType, ResourceType)

from broker_process import BrokerProcess
from samsa.client.connection import BrokerConnection
from samsa.protocol import errors
from samsa.protocol.api_keys import ApiKey
from samsa.security.client import client_security, properties_getter

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'user_admin="admin-pw" user_eve="eve-pw" user_carol="carol-pw";')


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("acl-apis"), **{
        "listener.security.protocol.map": "PLAINTEXT:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN", "listener.name.plaintext.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin", "allow.everyone.if.no.acl.found": "false"})
    b.start()
    conf = _conf(b, "admin")
    admin = AdminClient(conf)
    for f in admin.create_topics([NewTopic(t, 1, 1) for t in ("carol-t", "other-t")]).values():
        f.result(15)
    for group in ("carol-g1", "other-g"):  # groups with committed offsets, Empty
        c = Consumer({**conf, "group.id": group, "enable.auto.commit": False})
        c.commit(offsets=[TopicPartition("carol-t", 0, 0)], asynchronous=False)
        c.close()
    T, G = ResourceType.TOPIC, ResourceType.GROUP
    acls = [AclBinding(T, "carol-t", ResourcePatternType.LITERAL, "User:carol", "*", op, AclPermissionType.ALLOW)
            for op in (AclOperation.DESCRIBE_CONFIGS, AclOperation.DELETE, AclOperation.READ)]
    acls.append(AclBinding(G, "carol-", ResourcePatternType.PREFIXED, "User:carol", "*", AclOperation.DESCRIBE,
                           AclPermissionType.ALLOW))
    for f in admin.create_acls(acls).values():
        f.result(15)
    yield b
    b.stop()


def _conf(b: BrokerProcess, user: str) -> dict:
    return {"bootstrap.servers": b.bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": user, "sasl.password": f"{user}-pw"}


def _calls(user: str, port: int, calls: list[tuple[int, dict]]) -> list[dict]:
    """Each request on one authenticated connection, and its response."""
    sec = client_security(properties_getter({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                                             "sasl.username": user, "sasl.password": f"{user}-pw"}))

    async def run() -> list[dict]:
        conn = BrokerConnection("127.0.0.1", port, security=sec)
        await conn.connect()
        try:
            return [await conn.request(key, body) for key, body in calls]
        finally:
            conn.close()
    return asyncio.run(run())


TXN = {"transactional_id": "eve-txn", "producer_id": 1, "producer_epoch": 0}
TP = [{"name": "carol-t", "partitions": [0]}]


def test_eve_is_refused_by_every_api(broker):
    C, T, G, X = (errors.E_CLUSTER_AUTHORIZATION_FAILED, errors.E_TOPIC_AUTHORIZATION_FAILED,
                  errors.E_GROUP_AUTHORIZATION_FAILED, errors.E_TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    calls = [
        (ApiKey.DESCRIBE_CONFIGS, {"resources": [{"resource_type": 2, "resource_name": "carol-t",
                                                  "configuration_keys": None},
                                                 {"resource_type": 4, "resource_name": "0",
                                                  "configuration_keys": None}]}),
        (ApiKey.INCREMENTAL_ALTER_CONFIGS, {"resources": [
            {"resource_type": 2, "resource_name": "carol-t",
             "configs": [{"name": "retention.ms", "config_operation": 0, "value": "1000"}]},
            {"resource_type": 4, "resource_name": "", "configs": []}], "validate_only": False}),
        (ApiKey.ALTER_CONFIGS, {"resources": [{"resource_type": 2, "resource_name": "carol-t", "configs": []}],
                                "validate_only": False}),
        (ApiKey.LIST_GROUPS, {}),
        (ApiKey.DESCRIBE_GROUPS, {"groups": ["other-g"], "include_authorized_operations": True}),
        (ApiKey.DELETE_GROUPS, {"groups_names": ["other-g"]}),
        (ApiKey.OFFSET_DELETE, {"group_id": "other-g", "topics": [{"name": "carol-t",
                                                                   "partitions": [{"partition_index": 0}]}]}),
        (ApiKey.ADD_PARTITIONS_TO_TXN, {"transactions": [{**TXN, "verify_only": False, "topics": TP}]}),
        (ApiKey.ADD_OFFSETS_TO_TXN, {**TXN, "group_id": "other-g"}),
        (ApiKey.END_TXN, {**TXN, "committed": True}),
        (ApiKey.TXN_OFFSET_COMMIT, {**TXN, "group_id": "other-g", "generation_id": -1, "member_id": "",
                                    "group_instance_id": None, "topics": [
                                        {"name": "carol-t", "partitions": [{"partition_index": 0,
                                                                            "committed_offset": 0,
                                                                            "committed_leader_epoch": -1,
                                                                            "committed_metadata": ""}]}]}),
        (ApiKey.WRITE_TXN_MARKERS, {"markers": [{"producer_id": 1, "producer_epoch": 0, "transaction_result": True,
                                                 "coordinator_epoch": 0,
                                                 "topics": [{"name": "carol-t", "partition_indexes": [0]}]}]}),
        (ApiKey.OFFSET_FOR_LEADER_EPOCH, {"replica_id": -1, "topics": [
            {"topic": "carol-t", "partitions": [{"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]}),
        (ApiKey.OFFSET_FOR_LEADER_EPOCH, {"replica_id": 7, "topics": [
            {"topic": "carol-t", "partitions": [{"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]}),
        (ApiKey.DESCRIBE_LOG_DIRS, {"topics": None}),
        (ApiKey.DELETE_RECORDS, {"topics": [{"name": "carol-t", "partitions": [{"partition_index": 0, "offset": -1}]}],
                                 "timeout_ms": 5000}),
        (ApiKey.ELECT_LEADERS, {"election_type": 0, "topic_partitions": [{"topic": "carol-t", "partitions": [0]}],
                                "timeout_ms": 5000}),
        (ApiKey.ALTER_PARTITION_REASSIGNMENTS, {"timeout_ms": 5000, "topics": [
            {"name": "carol-t", "partitions": [{"partition_index": 0, "replicas": [0]}]}]}),
        (ApiKey.LIST_PARTITION_REASSIGNMENTS, {"timeout_ms": 5000, "topics": None}),
        (ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, {"users": None}),
        (ApiKey.ALTER_USER_SCRAM_CREDENTIALS, {"deletions": [{"name": "admin", "mechanism": 1}], "upsertions": []}),
        (ApiKey.DESCRIBE_PRODUCERS, {"topics": [{"name": "carol-t", "partition_indexes": [0]}]}),
        (ApiKey.DESCRIBE_TRANSACTIONS, {"transactional_ids": ["eve-txn"]}),
        (ApiKey.LIST_TRANSACTIONS, {"state_filters": [], "producer_id_filters": [], "duration_filter": -1}),
        (ApiKey.DESCRIBE_ACLS, {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
                                "principal_filter": None, "host_filter": None, "operation": 1,
                                "permission_type": 1}),
    ]
    r = iter(_calls("eve", broker.port, calls))
    described = next(r)["results"]
    assert [x["error_code"] for x in described] == [T, C]
    assert [x["error_code"] for x in next(r)["responses"]] == [T, C]
    assert [x["error_code"] for x in next(r)["responses"]] == [T]
    assert next(r)["groups"] == []  # ListGroups: filtered, not an error
    assert [g["error_code"] for g in next(r)["groups"]] == [G]
    assert [g["error_code"] for g in next(r)["results"]] == [G]
    assert next(r)["error_code"] == G
    assert next(r)["error_code"] == C  # AddPartitionsToTxn v4+: brokers only (CLUSTER_ACTION)
    assert next(r)["error_code"] == X
    assert next(r)["error_code"] == X
    assert next(r)["topics"][0]["partitions"][0]["error_code"] == X
    assert next(r)["markers"][0]["topics"][0]["partitions"][0]["error_code"] == C
    assert next(r)["topics"][0]["partitions"][0]["error_code"] == T  # a client: DESCRIBE on the topic
    assert next(r)["topics"][0]["partitions"][0]["error_code"] == C  # a replica: CLUSTER_ACTION
    logdirs = next(r)
    assert (logdirs["error_code"], logdirs["results"]) == (C, [])
    assert next(r)["topics"][0]["partitions"][0]["error_code"] == T
    elected = next(r)
    assert elected["error_code"] == C
    assert elected["replica_election_results"][0]["partition_result"][0]["error_code"] == C
    assert next(r)["error_code"] == C
    assert next(r)["error_code"] == C
    assert next(r)["error_code"] == C
    assert [x["error_code"] for x in next(r)["results"]] == [C]
    assert next(r)["topics"][0]["partitions"][0]["error_code"] == T
    assert next(r)["transaction_states"][0]["error_code"] == X
    assert next(r)["transaction_states"] == []
    assert next(r)["error_code"] == C
    assert "Principal = User:eve is Denied operation = ALTER_CONFIGS" in broker.log_path.read_text()


def test_v3_add_partitions_to_txn_checks_the_id_then_the_topics(broker):
    body = {"v3_and_below_transactional_id": "eve-txn", "v3_and_below_producer_id": 1,
            "v3_and_below_producer_epoch": 0, "v3_and_below_topics": TP}
    sec = client_security(properties_getter({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                                             "sasl.username": "eve", "sasl.password": "eve-pw"}))

    async def run() -> dict:
        conn = BrokerConnection("127.0.0.1", broker.port, security=sec)
        await conn.connect()
        try:
            return await conn.request(ApiKey.ADD_PARTITIONS_TO_TXN, body, 3)
        finally:
            conn.close()
    resp = asyncio.run(run())
    part = resp["results_by_topic_v3_and_below"][0]["results_by_partition"][0]
    assert part["partition_error_code"] == errors.E_TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def test_carol_gets_what_her_acls_allow(broker):
    admin = AdminClient(_conf(broker, "carol"))
    configs = admin.describe_configs([ConfigResource("topic", "carol-t")])
    assert "retention.ms" in next(iter(configs.values())).result(15)
    with pytest.raises(Exception, match="TOPIC_AUTHORIZATION_FAILED|[Aa]uthoriz"):
        next(iter(admin.describe_configs([ConfigResource("topic", "other-t")]).values())).result(15)
    listed = admin.list_consumer_groups().result(15)
    assert [g.group_id for g in listed.valid] == ["carol-g1"]
    [described] = admin.describe_consumer_groups(["carol-g1"], include_authorized_operations=True).values()
    assert set(described.result(15).authorized_operations) == {AclOperation.DESCRIBE}
    [deleted] = admin.delete_records([TopicPartition("carol-t", 0, -1)]).values()
    assert deleted.result(15).low_watermark >= 0
    # As the super user: every group, and the cluster's authorized operations.
    root = AdminClient(_conf(broker, "admin"))
    assert {g.group_id for g in root.list_consumer_groups().result(15).valid} >= {"carol-g1", "other-g"}


def test_describe_topic_partitions_and_update_features_with_acls(broker):
    """DescribeTopicPartitions as Kafka authorizes it: carol's topic described (her operations
    on it), the other named one TOPIC_AUTHORIZATION_FAILED after the others with no id, hidden when
    every topic is asked for; UpdateFeatures needs ALTER on the cluster (admin, a super user,
    has it)."""
    dtp = (ApiKey.DESCRIBE_TOPIC_PARTITIONS, {"topics": [{"name": "other-t"}, {"name": "carol-t"}],
                                              "response_partition_limit": 10, "cursor": None})
    every = (ApiKey.DESCRIBE_TOPIC_PARTITIONS, {"topics": [], "response_partition_limit": 10, "cursor": None})
    update = (ApiKey.UPDATE_FEATURES, {"timeout_ms": 30000, "validate_only": True, "feature_updates": [
        {"feature": "transaction.version", "max_version_level": 1, "upgrade_type": 2}]})
    named, everything, refused = _calls("carol", broker.port, [dtp, every, update])
    assert [(t["name"], t["error_code"], len(t["partitions"])) for t in named["topics"]] == [
        ("carol-t", 0, 1), ("other-t", errors.E_TOPIC_AUTHORIZATION_FAILED, 0)]
    carol_ops = named["topics"][0]["topic_authorized_operations"]
    assert carol_ops == sum(1 << op for op in (3, 8, 6, 10))  # READ, DESCRIBE (implied), DELETE, DESCRIBE_CONFIGS
    assert named["topics"][1]["topic_id"] == bytes(16)
    assert [t["name"] for t in everything["topics"]] == ["carol-t"]
    assert refused["error_code"] == errors.E_CLUSTER_AUTHORIZATION_FAILED
    assert refused["error_message"].endswith("principal=User:carol, listenerName=PLAINTEXT) needs ALTER permission.")
    (allowed,) = _calls("admin", broker.port, [update])
    assert allowed["error_code"] == 0
