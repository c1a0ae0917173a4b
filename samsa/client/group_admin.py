"""Consumer-group administration: list, describe, offsets, reset, delete.

Everything about one group goes to its coordinator (FindCoordinator); listing asks every
broker. Built on :class:`samsa.client.admin.AsyncAdmin`'s cluster connections.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from samsa.client.admin import AsyncAdmin
from samsa.client.connection import BrokerConnection
from samsa.client.types import TopicPartition
from samsa.protocol import codec, errors

FIND_COORDINATOR, OFFSET_COMMIT, OFFSET_FETCH, LIST_GROUPS, DESCRIBE_GROUPS = 10, 8, 9, 16, 15
DELETE_GROUPS, OFFSET_DELETE = 42, 47


@dataclass
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    assignment: list[TopicPartition] = field(default_factory=list)


@dataclass
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    assignor: str
    coordinator: int
    members: list[MemberDescription]


@dataclass
class GroupOffset:
    offset: int
    metadata: str = ""
    leader_epoch: int = -1


def _raise(code: int, what: str) -> None:
    if code:
        raise errors.error_for(code, what)


def decode_assignment(data: bytes) -> list[TopicPartition]:
    if not data or len(data) < 2:
        return []
    version = min(max(int.from_bytes(data[:2], "big", signed=True), 0), 3)
    try:
        body, _ = codec.decode("ConsumerProtocolAssignment", version, memoryview(data), 2)
    except errors.KafkaError:
        return []
    return [TopicPartition(t["topic"], p) for t in body["assigned_partitions"] for p in t["partitions"]]


class GroupAdmin:
    def __init__(self, admin: AsyncAdmin):
        self.admin = admin

    async def coordinator(self, group_id: str) -> tuple[int, BrokerConnection]:
        cluster = await self.admin._ready()
        resp = await (await cluster.any()).request(FIND_COORDINATOR, {"key": group_id, "key_type": 0},
                                                   max_version=3)
        _raise(resp["error_code"], resp.get("error_message") or f"no coordinator for group {group_id}")
        return resp["node_id"], await cluster.node(resp["node_id"])

    async def list_groups(self, states: list[str] | None = None) -> list[dict]:
        cluster = await self.admin._ready()
        await cluster.refresh([])
        out: dict[str, dict] = {}
        for node_id in sorted(cluster.brokers):
            resp = await (await cluster.node(node_id)).request(LIST_GROUPS, {"states_filter": states or []})
            _raise(resp["error_code"], "ListGroups failed")
            for g in resp["groups"]:
                out[g["group_id"]] = g
        return [out[k] for k in sorted(out)]

    async def describe(self, group_id: str) -> GroupDescription:
        node_id, conn = await self.coordinator(group_id)
        resp = await conn.request(DESCRIBE_GROUPS, {"groups": [group_id]})
        g = resp["groups"][0]
        _raise(g["error_code"], f"describe group {group_id}")
        members = [MemberDescription(m["member_id"], m.get("group_instance_id"), m["client_id"], m["client_host"],
                                     decode_assignment(m["member_assignment"])) for m in g["members"]]
        return GroupDescription(group_id, g["group_state"], g["protocol_type"], g["protocol_data"], node_id, members)

    async def offsets(self, group_id: str) -> dict[TopicPartition, GroupOffset]:
        _, conn = await self.coordinator(group_id)
        resp = await conn.request(OFFSET_FETCH, {"group_id": group_id, "topics": None}, min_version=2, max_version=7)
        _raise(resp.get("error_code", 0), f"fetch offsets of group {group_id}")
        out = {}
        for t in resp["topics"]:
            for p in t["partitions"]:
                if p["committed_offset"] >= 0:
                    out[TopicPartition(t["name"], p["partition_index"])] = GroupOffset(
                        p["committed_offset"], p.get("metadata") or "", p.get("committed_leader_epoch", -1))
        return out

    async def alter_offsets(self, group_id: str, offsets: dict[TopicPartition, int]) -> None:
        """Commit as a client outside the group (generation -1): only while the group is empty."""
        _, conn = await self.coordinator(group_id)
        by_topic: dict[str, list] = {}
        for tp, off in offsets.items():
            by_topic.setdefault(tp.topic, []).append({"partition_index": tp.partition, "committed_offset": off,
                                                      "committed_metadata": ""})
        resp = await conn.request(OFFSET_COMMIT, {"group_id": group_id, "generation_id_or_member_epoch": -1,
                                                  "member_id": "", "topics": [{"name": t, "partitions": ps}
                                                                              for t, ps in by_topic.items()]})
        for t in resp["topics"]:
            for p in t["partitions"]:
                _raise(p["error_code"], f"commit {t['name']}-{p['partition_index']} for group {group_id}")

    async def delete_groups(self, group_ids: list[str]) -> dict[str, int]:
        out = {}
        for group_id in group_ids:
            try:
                _, conn = await self.coordinator(group_id)
            except errors.KafkaError as e:
                out[group_id] = e.code
                continue
            resp = await conn.request(DELETE_GROUPS, {"groups_names": [group_id]})
            out[group_id] = resp["results"][0]["error_code"]
        return out

    async def delete_offsets(self, group_id: str, partitions: list[TopicPartition]) -> tuple[int, dict]:
        _, conn = await self.coordinator(group_id)
        by_topic: dict[str, list] = {}
        for tp in partitions:
            by_topic.setdefault(tp.topic, []).append({"partition_index": tp.partition})
        resp = await conn.request(OFFSET_DELETE, {"group_id": group_id, "topics": [
            {"name": t, "partitions": ps} for t, ps in by_topic.items()]})
        return resp["error_code"], {TopicPartition(t["name"], p["partition_index"]): p["error_code"]
                                    for t in resp["topics"] for p in t["partitions"]}
