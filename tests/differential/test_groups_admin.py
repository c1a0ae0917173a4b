"""The classic group protocol (join, sync, heartbeat, leave, errors), OffsetCommit/Fetch/Delete, and
the cluster-wide admin APIs (DescribeCluster, DescribeLogDirs, ACLs without an authorizer, SCRAM,
quotas, ApiVersions, SASL on a PLAINTEXT listener), as Kafka answers them."""

from __future__ import annotations

import pytest

from harness import create_topic
from waiting import wait_until

PROTO = [{"name": "range", "metadata": b"\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00"}]


def _coordinator(s, group: str, key_type: int = 0) -> int:
    r = wait_until(lambda: (lambda r: r if r["coordinators"][0]["error_code"] == 0 else None)(
        s.call(10, {"key_type": key_type, "coordinator_keys": [group]}, 4)), f"coordinator of {group}", 60)
    return r["coordinators"][0]["error_code"]


def _join(s, group, member_id="", session=10000, rebalance=10000, instance=None, version=7, protocols=None):
    # Kafka answers NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS while its offsets partition loads
    return wait_until(lambda: (lambda r: r if r["error_code"] not in (14, 15, 16) else None)(_join_once(
        s, group, member_id, session, rebalance, instance, version, protocols)), f"JoinGroup on {s.name}", 60)


def _join_once(s, group, member_id, session, rebalance, instance, version, protocols):
    return s.call(11, {"group_id": group, "session_timeout_ms": session, "rebalance_timeout_ms": rebalance,
                       "member_id": member_id, "group_instance_id": instance, "protocol_type": "consumer",
                       "protocols": PROTO if protocols is None else protocols, "reason": None}, version)


def _sync(s, group, generation, member_id, assignments=(), instance=None):
    return wait_until(lambda: (lambda r: r if r["error_code"] not in (14, 15, 16) else None)(_sync_once(
        s, group, generation, member_id, assignments, instance)), f"SyncGroup on {s.name}", 60)


def _sync_once(s, group, generation, member_id, assignments, instance):
    return s.call(14, {"group_id": group, "generation_id": generation, "member_id": member_id,
                       "group_instance_id": instance, "protocol_type": "consumer", "protocol_name": "range",
                       "assignments": list(assignments)}, 5)


def _member(s, group, instance=None):
    """A member that joined and synced: (member_id, generation)."""
    _coordinator(s, group)
    j = _join(s, group, instance=instance)
    if j["error_code"] == 79:  # MEMBER_ID_REQUIRED: join again with the id given
        j = _join(s, group, j["member_id"], instance=instance)
    assert j["error_code"] == 0, j
    sy = _sync(s, group, j["generation_id"], j["member_id"],
               [{"member_id": j["member_id"], "assignment": b""}], instance=instance)
    assert sy["error_code"] == 0, sy
    return j["member_id"], j["generation_id"]


def _describe_group(s, group):
    r = s.call(15, {"groups": [group], "include_authorized_operations": False}, 5)
    g = r["groups"][0]
    return (g["error_code"], g["group_state"], g["protocol_type"], g["protocol_data"],
            [(m["group_instance_id"], m["client_id"]) for m in g["members"]])


def test_join_needs_member_id(diff):
    def run(s):
        _coordinator(s, "diff-g-join")
        j = _join(s, "diff-g-join")
        return j["error_code"], j["member_id"] != "", j["generation_id"], j["protocol_name"], j["error_message"] \
            if "error_message" in j else None
    diff(run)


def test_join_sync_describe(diff):
    def run(s):
        m, gen = _member(s, "diff-g-full")
        return gen, _describe_group(s, "diff-g-full")
    diff(run)


@pytest.mark.parametrize("session", [1, 10**9])
def test_join_invalid_session_timeout(diff, session):
    def run(s):
        _coordinator(s, "diff-g-session")
        return _join(s, "diff-g-session", session=session)["error_code"]
    diff(run)


def test_join_unknown_member(diff):
    def run(s):
        _coordinator(s, "diff-g-unknown")
        return _join(s, "diff-g-unknown", member_id="not-a-member")["error_code"]
    diff(run)


def test_join_inconsistent_protocol(diff):
    def run(s):
        _member(s, "diff-g-proto")
        j = _join_once(s, "diff-g-proto", "", 10000, 10000, "static-x", 7, None) if False else s.call(11, {
            "group_id": "diff-g-proto", "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000,
                        "member_id": "", "group_instance_id": "static-x", "protocol_type": "connect",
                        "protocols": PROTO, "reason": None}, 7)
        return j["error_code"]
    diff(run)


def test_join_empty_protocols(diff):
    def run(s):
        _coordinator(s, "diff-g-noproto")
        return _join(s, "diff-g-noproto", instance="i1", protocols=[])["error_code"]
    diff(run)


def test_sync_bad_generation(diff):
    def run(s):
        m, gen = _member(s, "diff-g-syncgen")
        return _sync(s, "diff-g-syncgen", gen + 5, m)["error_code"]
    diff(run)


def test_sync_unknown_member(diff):
    def run(s):
        m, gen = _member(s, "diff-g-syncmem")
        return _sync(s, "diff-g-syncmem", gen, "nobody")["error_code"]
    diff(run)


def test_sync_unknown_group(diff):
    def run(s):
        _coordinator(s, "diff-g-syncnone")
        return _sync(s, "diff-g-syncnone", 1, "nobody")["error_code"]
    diff(run)


def _heartbeat(s, group, gen, member, instance=None):
    return s.call(12, {"group_id": group, "generation_id": gen, "member_id": member,
                       "group_instance_id": instance}, 4)["error_code"]


def test_heartbeat_cases(diff):
    def run(s):
        m, gen = _member(s, "diff-g-hb")
        return [_heartbeat(s, "diff-g-hb", gen, m), _heartbeat(s, "diff-g-hb", gen + 1, m),
                _heartbeat(s, "diff-g-hb", gen, "nobody"), _heartbeat(s, "diff-g-hb-none", 1, "x")]
    diff(run)


def test_leave_group(diff):
    def run(s):
        m, gen = _member(s, "diff-g-leave")
        r = s.call(13, {"group_id": "diff-g-leave", "members": [{"member_id": m, "group_instance_id": None,
                                                                 "reason": None},
                                                                {"member_id": "nobody", "group_instance_id": None,
                                                                 "reason": None}]}, 5)
        return (r["error_code"], [(x["member_id"] == m, x["error_code"]) for x in r["members"]],
                _describe_group(s, "diff-g-leave"))
    diff(run)


def test_static_member_rejoin(diff):
    def run(s):
        m, gen = _member(s, "diff-g-static", instance="inst-1")
        j = _join(s, "diff-g-static", instance="inst-1")
        fenced = _heartbeat(s, "diff-g-static", gen, m, instance="inst-1")
        return j["error_code"], j["generation_id"] - gen, j["member_id"] != m, fenced
    diff(run)


def test_session_timeout_removes_member(diff):
    def run(s):
        _coordinator(s, "diff-g-expire")
        j = _join(s, "diff-g-expire", session=6000)
        j = _join(s, "diff-g-expire", j["member_id"], session=6000)
        _sync(s, "diff-g-expire", j["generation_id"], j["member_id"], [{"member_id": j["member_id"],
                                                                          "assignment": b""}])
        wait_until(lambda: _describe_group(s, "diff-g-expire")[1] == "Empty", "the member expired", 60, interval=0.5)
        return _describe_group(s, "diff-g-expire"), _heartbeat(s, "diff-g-expire", j["generation_id"],
                                                               j["member_id"])
    diff(run)


def _commit(s, group, topic, offset, gen=-1, member="", partition=0):
    r = s.call(8, {"group_id": group, "generation_id_or_member_epoch": gen, "member_id": member,
                   "group_instance_id": None,
                   "topics": [{"name": topic, "partitions": [{"partition_index": partition,
                                                              "committed_offset": offset,
                                                              "committed_leader_epoch": -1,
                                                              "committed_metadata": "meta"}]}]}, 8)
    return [(p["partition_index"], p["error_code"]) for t in r["topics"] for p in t["partitions"]]


def _fetch_offsets(s, group, topic, partitions=(0,)):
    r = s.call(9, {"group_id": group, "topics": [{"name": topic, "partition_indexes": list(partitions)}],
                   "require_stable": False}, 7)
    return r["error_code"], [(p["partition_index"], p["committed_offset"], p["metadata"], p["error_code"])
                             for t in r["topics"] for p in t["partitions"]]


@pytest.fixture(scope="module")
def otopic(sides):
    for s in sides:
        create_topic(s, "diff-offsets", 2)
    return "diff-offsets"


def test_offset_commit_fetch_simple(diff, otopic):
    def run(s):
        _coordinator(s, "diff-g-oc")
        return _commit(s, "diff-g-oc", otopic, 5), _fetch_offsets(s, "diff-g-oc", otopic, (0, 1))
    diff(run)


def test_offset_commit_unknown_partition(diff, otopic):
    def run(s):
        _coordinator(s, "diff-g-oc2")
        return _commit(s, "diff-g-oc2", otopic, 5, partition=9)
    diff(run)


def test_offset_commit_unknown_topic(diff):
    def run(s):
        _coordinator(s, "diff-g-oc3")
        return _commit(s, "diff-g-oc3", "diff-oc-none", 5)
    diff(run)


def test_offset_commit_bad_generation(diff, otopic):
    def run(s):
        m, gen = _member(s, "diff-g-oc4")
        return [_commit(s, "diff-g-oc4", otopic, 1, gen, m), _commit(s, "diff-g-oc4", otopic, 1, gen + 3, m),
                _commit(s, "diff-g-oc4", otopic, 1, gen, "nobody"), _commit(s, "diff-g-oc4", otopic, 1)]
    diff(run)


def test_offset_fetch_unknown_group(diff, otopic):
    def run(s):
        _coordinator(s, "diff-g-of-none")
        return _fetch_offsets(s, "diff-g-of-none", otopic, (0,))
    diff(run)


def test_offset_fetch_all_topics(diff, otopic):
    def run(s):
        _coordinator(s, "diff-g-of-all")
        _commit(s, "diff-g-of-all", otopic, 3)
        r = s.call(9, {"group_id": "diff-g-of-all", "topics": None, "require_stable": False}, 7)
        return [(t["name"], p["partition_index"], p["committed_offset"]) for t in r["topics"] for p in t["partitions"]]
    diff(run)


def test_offset_delete(diff, otopic):
    def run(s):
        _coordinator(s, "diff-g-od")
        _commit(s, "diff-g-od", otopic, 3)
        r = s.call(47, {"group_id": "diff-g-od", "topics": [{"name": otopic, "partitions": [{"partition_index": 0},
                                                                                            {"partition_index": 1}]}]},
                   0)
        return r["error_code"], [(p["partition_index"], p["error_code"]) for t in r["topics"]
                                 for p in t["partitions"]], _fetch_offsets(s, "diff-g-od", otopic, (0,))
    diff(run)


def test_offset_delete_active_group(diff, otopic):
    def run(s):
        m, gen = _member(s, "diff-g-od2")
        _commit(s, "diff-g-od2", otopic, 3, gen, m)
        r = s.call(47, {"group_id": "diff-g-od2", "topics": [{"name": otopic, "partitions": [{"partition_index": 0}]}]},
                   0)
        return r["error_code"], [(p["partition_index"], p["error_code"]) for t in r["topics"] for p in t["partitions"]]
    diff(run)


def test_offset_delete_unknown_group(diff, otopic):
    def run(s):
        _coordinator(s, "diff-g-od3")
        return s.call(47, {"group_id": "diff-g-od3", "topics": [{"name": otopic, "partitions": [
            {"partition_index": 0}]}]}, 0)["error_code"]
    diff(run)


def test_delete_groups(diff, otopic):
    def run(s):
        _coordinator(s, "diff-g-del")
        _commit(s, "diff-g-del", otopic, 1)
        m, _ = _member(s, "diff-g-del-live")
        r = s.call(42, {"groups_names": ["diff-g-del", "diff-g-del-live", "diff-g-del-none"]}, 2)
        return sorted((x["group_id"], x["error_code"]) for x in r["results"])
    diff(run)


def test_describe_unknown_group(diff):
    diff(lambda s: (_coordinator(s, "diff-g-none"), _describe_group(s, "diff-g-none")))


def test_list_groups_filter(diff):
    def run(s):
        _member(s, "diff-g-listed")
        r = s.call(16, {"states_filter": ["Stable"], "types_filter": []}, 5)
        return r["error_code"], sorted(g["group_id"] for g in r["groups"] if g["group_id"] == "diff-g-listed")
    diff(run)


def test_find_coordinator_invalid_key_type(diff):
    diff(lambda s: [(c["key"], c["error_code"]) for c in s.call(10, {"key_type": 5, "coordinator_keys": ["x"]},
                                                                 4)["coordinators"]])


# ---------------------------------------------------------------------------- cluster-wide APIs

def test_describe_cluster(diff):
    def run(s):
        r = s.call(60, {"include_cluster_authorized_operations": False, "endpoint_type": 1}, 1)
        return r["error_code"], r["endpoint_type"], [(b["broker_id"], b["rack"]) for b in r["brokers"]], \
            r["cluster_authorized_operations"]
    diff(run)


def test_describe_log_dirs(diff):
    def run(s):
        create_topic(s, "diff-logdirs", 2)
        # Kafka lists a partition once its log exists, a moment after the leader is known
        r = wait_until(lambda: (lambda r: r if any(t["name"] == "diff-logdirs" and len(t["partitions"]) == 2
                                                   for d in r["results"] for t in d["topics"]) else None)(
            s.call(35, {"topics": [{"topic": "diff-logdirs", "partitions": [0, 1, 5]}]}, 4)),
            f"the partitions of diff-logdirs in {s.name}'s log dirs", 30)
        return r["error_code"], [(d["error_code"], [(t["name"], sorted((p["partition_index"], p["is_future_key"])
                                                                        for p in t["partitions"]))
                                                     for t in d["topics"]]) for d in r["results"]]
    diff(run)


def test_describe_log_dirs_unknown_topic(diff):
    diff(lambda s: [[t["name"] for t in d["topics"]] for d in s.call(
        35, {"topics": [{"topic": "diff-ld-none", "partitions": [0]}]}, 4)["results"]])


def test_api_versions_unsupported_version(diff):
    diff(lambda s: (lambda r: r if isinstance(r, str) else (r["error_code"], len(r["api_keys"]) > 0))(
        s.fresh_call(18, {}, 0)))


def test_sasl_handshake_on_plaintext(diff):
    diff(lambda s: s.fresh_call(17, {"mechanism": "PLAIN"}, 1))


def test_describe_acls_without_authorizer(diff):
    diff(lambda s: (lambda r: (r["error_code"], r["error_message"], r["resources"]))(s.call(29, {
        "resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1, "principal_filter": None,
        "host_filter": None, "operation": 1, "permission_type": 1}, 3)))


def test_create_acls_without_authorizer(diff):
    diff(lambda s: s.call(30, {"creations": [{"resource_type": 2, "resource_name": "t", "resource_pattern_type": 3,
                                              "principal": "User:bob", "host": "*", "operation": 3,
                                              "permission_type": 3}]}, 3)["results"])


def test_delete_acls_without_authorizer(diff):
    diff(lambda s: [(r["error_code"], r["error_message"]) for r in s.call(31, {"filters": [{
        "resource_type_filter": 2, "resource_name_filter": "t", "pattern_type_filter": 3, "principal_filter": None,
        "host_filter": None, "operation": 3, "permission_type": 3}]}, 3)["filter_results"]])


def test_describe_scram_unknown_user(diff):
    diff(lambda s: (lambda r: (r["error_code"], [(x["user"], x["error_code"], x["error_message"])
                                                  for x in r["results"]]))(
        s.call(50, {"users": [{"name": "diff-nobody"}]}, 0)))


def test_alter_scram_bad_iterations(diff):
    diff(lambda s: [(x["user"], x["error_code"], x["error_message"]) for x in s.call(51, {
        "deletions": [], "upsertions": [{"name": "diff-u", "mechanism": 1, "iterations": 1, "salt": b"salt",
                                         "salted_password": b"x" * 32}]}, 0)["results"]])


def test_alter_scram_unknown_mechanism(diff):
    diff(lambda s: [(x["user"], x["error_code"], x["error_message"]) for x in s.call(51, {
        "deletions": [{"name": "diff-u2", "mechanism": 0}], "upsertions": []}, 0)["results"]])


def test_scram_upsert_then_describe(diff):
    def run(s):
        a = s.call(51, {"deletions": [], "upsertions": [{"name": "diff-scram", "mechanism": 2, "iterations": 8192,
                                                         "salt": b"s" * 16, "salted_password": b"p" * 64}]}, 0)
        # The credential reaches the broker's cache asynchronously (Kafka: a metadata record): wait for it.
        d = wait_until(lambda: (lambda r: r if r["results"] and r["results"][0]["credential_infos"] else None)(
            s.call(50, {"users": [{"name": "diff-scram"}]}, 0)), "the credential visible", 30)
        return ([(x["user"], x["error_code"]) for x in a["results"]],
                [(x["user"], x["error_code"], x["credential_infos"]) for x in d["results"]])
    diff(run)


def test_describe_client_quotas_empty(diff):
    diff(lambda s: (lambda r: (r["error_code"], r["entries"]))(s.call(48, {"components": [
        {"entity_type": "user", "match_type": 0, "match": "diff-q-nobody"}], "strict": False}, 1)))


def test_alter_client_quotas_then_describe(diff):
    def run(s):
        a = s.call(49, {"entries": [{"entity": [{"entity_type": "client-id", "entity_name": "diff-q"}],
                                     "ops": [{"key": "producer_byte_rate", "value": 1024.0, "remove": False}]}],
                        "validate_only": False}, 1)
        d = wait_until(lambda: (lambda r: r if r["entries"] else None)(s.call(48, {"components": [
            {"entity_type": "client-id", "match_type": 0, "match": "diff-q"}], "strict": True}, 1)),
            "the quota visible", 30)
        return [(e["error_code"], e["error_message"]) for e in a["entries"]], d["entries"]
    diff(run)


@pytest.mark.parametrize("key,value", [("producer_byte_rate", -5.0), ("no_such_quota", 1.0),
                                       ("request_percentage", 0.0)])
def test_alter_client_quotas_invalid(diff, key, value):
    diff(lambda s: [(e["error_code"], e["error_message"]) for e in s.call(49, {"entries": [{
        "entity": [{"entity_type": "user", "entity_name": "diff-qi"}],
        "ops": [{"key": key, "value": value, "remove": False}]}], "validate_only": True}, 1)["entries"]])


def test_alter_client_quotas_bad_entity(diff):
    diff(lambda s: [(e["error_code"], e["error_message"]) for e in s.call(49, {"entries": [{
        "entity": [{"entity_type": "planet", "entity_name": "x"}],
        "ops": [{"key": "producer_byte_rate", "value": 1.0, "remove": False}]}], "validate_only": True}, 1)["entries"]])


def test_elect_leaders_preferred(diff):
    def run(s):
        create_topic(s, "diff-elect")
        r = s.call(43, {"election_type": 0, "topic_partitions": [{"topic": "diff-elect", "partitions": [0, 7]}],
                        "timeout_ms": 10000}, 2)
        return r["error_code"], [(t["topic"], sorted((p["partition_id"], p["error_code"])
                                                     for p in t["partition_result"]))
                                 for t in r["replica_election_results"]]
    diff(run)


def test_list_partition_reassignments_none(diff):
    diff(lambda s: (lambda r: (r["error_code"], r["topics"]))(s.call(46, {"timeout_ms": 10000, "topics": None}, 0)))


def test_alter_partition_reassignment_unknown_broker(diff):
    def run(s):
        create_topic(s, "diff-reassign")
        r = s.call(45, {"timeout_ms": 10000, "topics": [{"name": "diff-reassign", "partitions": [
            {"partition_index": 0, "replicas": [1, 9]}, {"partition_index": 4, "replicas": [1]}]}]}, 0)
        return r["error_code"], [(t["name"], [(p["partition_index"], p["error_code"]) for p in t["partitions"]])
                                 for t in r["responses"]]
    diff(run)


def test_describe_transactions_unknown(diff):
    def run(s):
        from test_record_offsets import _txn_setup
        _txn_setup(s, "diff-dt", "diff-dt-id")  # the transaction state topic exists and is loaded
        _coordinator(s, "diff-no-txn", key_type=1)
        return [(t["transactional_id"], t["error_code"]) for t in s.call(
            65, {"transactional_ids": ["diff-no-txn"]}, 0)["transaction_states"]]
    diff(run)


def test_list_transactions_filter(diff):
    diff(lambda s: (lambda r: (r["error_code"], r["unknown_state_filters"], r["transaction_states"]))(s.call(
        66, {"state_filters": ["Nonsense"], "producer_id_filters": [424242]}, 1)))


def test_describe_topic_partitions(diff):
    def run(s):
        create_topic(s, "diff-dtp", 3)
        r = s.fresh_call(75, {"topics": [{"name": "diff-dtp"}, {"name": "diff-dtp-none"}],
                              "response_partition_limit": 2, "cursor": None}, 0)
        if isinstance(r, str):
            return r  # the connection closed: Samsa does not serve the API (GAPS.md)
        return ([(t["name"], t["error_code"], [(p["partition_index"], p["replica_nodes"]) for p in t["partitions"]])
                 for t in r["topics"]], r["next_cursor"])
    diff(run)


def test_offset_for_leader_epoch(diff):
    def run(s):
        create_topic(s, "diff-ofle")
        s.produce("diff-ofle", [(b"k", b"v", 1)])
        r = s.call(23, {"replica_id": -1, "topics": [{"topic": "diff-ofle", "partitions": [
            {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0},
            {"partition": 0, "current_leader_epoch": 99, "leader_epoch": 0},
            {"partition": 3, "current_leader_epoch": -1, "leader_epoch": 0}]}]}, 4)
        return [(p["partition"], p["error_code"], p["end_offset"]) for t in r["topics"] for p in t["partitions"]]
    diff(run)


def test_leave_group_member_id_not_utf8(diff):
    """Issue 33's fuzzed LeaveGroup v1 (4 bytes of the member id replaced, not UTF-8), byte for
    byte: Kafka decodes strings as Java does (U+FFFD for malformed bytes) and answers it."""
    import socket
    import struct

    from samsa.protocol.api import decode_response
    frame = bytes.fromhex(
        "0000004b000d00013a2a5aff000772646b61666b61000a667a2d636c6173736963002c72646b61666b612d34333333636436612d3164"
        "38382d7ffffffe2d613937612d313130646630386433346234")

    clean = {"group_id": "fz-classic", "member_id": "rdkafka-4333cd6a-1d88-0000-a97a-110df08d34b4"}

    def run(s):
        _coordinator(s, "fz-classic")
        # Kafka answers NOT_COORDINATOR until the group's offsets partition is loaded
        first = wait_until(lambda: (lambda r: r if r["error_code"] != 16 else None)(s.call(13, clean, 1)),
                           "the coordinator loaded", 60)
        with socket.create_connection((s.host, s.port), timeout=30) as c:
            c.sendall(frame)
            buf = b""
            while len(buf) < 4 or len(buf) < 4 + struct.unpack(">i", buf[:4])[0]:
                chunk = c.recv(65536)
                if not chunk:
                    return "closed"
                buf += chunk
        return decode_response(13, 1, buf[4:])[1], first
    diff(run)
