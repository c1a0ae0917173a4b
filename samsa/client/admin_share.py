"""The Admin's share-group calls (KIP-932): list and describe share groups (ListGroups with
the ``share`` type, ShareGroupDescribe), their offsets (Describe/Alter/DeleteShareGroupOffsets),
deleting them (DeleteGroups). Each goes to the group's coordinator through the Admin's request
driver (its retry policy included). A base of :class:`samsa.client.admin.AsyncAdmin`."""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable, Mapping

from samsa.client.admin_driver import RequestDriver
from samsa.client.admin_driver import group_error as _group_error
from samsa.client.connection import BrokerConnection
from samsa.client.types import (Node, ShareGroupDescription, ShareGroupListing, ShareMemberDescription,
                                SharePartitionOffset, TopicPartition)
from samsa.protocol import errors
from samsa.protocol.api_keys import ApiKey


def _share_group(g: dict, node: Node) -> ShareGroupDescription:
    def tps(assignment: dict) -> list[TopicPartition]:
        return sorted(TopicPartition(t["topic_name"], p) for t in assignment["topic_partitions"]
                      for p in t["partitions"])
    members = [ShareMemberDescription(m["member_id"], m.get("rack_id"), m["member_epoch"], m["client_id"],
                                      m["client_host"], list(m["subscribed_topic_names"]), tps(m["assignment"]))
               for m in g["members"]]
    return ShareGroupDescription(g["group_id"], g["group_state"], node, g["group_epoch"], g["assignment_epoch"],
                                 g["assignor_name"], members)


class ShareAdmin(RequestDriver):
    async def list_share_groups(self, states: Iterable[str] | None = None) -> list[ShareGroupListing]:
        """The share groups of every broker (ListGroups v5 with the type filter ``share``), sorted."""
        return await self._list_groups_of_type("share", states, ShareGroupListing)

    async def describe_share_groups(self, group_ids: Iterable[str]) -> dict[str, ShareGroupDescription]:
        """Group id -> description (ShareGroupDescribe on each coordinator). A group that does
        not exist raises GroupIdNotFoundError, as Kafka's admin client does."""
        return await self._describe_groups_of_type(group_ids, ApiKey.SHARE_GROUP_DESCRIBE, "share group",
                                                   _share_group)

    async def delete_share_groups(self, group_ids: Iterable[str]) -> dict[str, errors.KafkaError | None]:
        """Delete share groups with their state (DeleteGroups): only empty groups can go.
        Group id -> None (deleted) or the error."""
        return await self._delete_groups(group_ids)

    async def list_share_group_offsets(self, group_id: str, partitions: Iterable[TopicPartition] | None = None
                                       ) -> dict[TopicPartition, SharePartitionOffset | errors.KafkaError]:
        """The group's start offsets and lag (DescribeShareGroupOffsets), sorted; ``partitions``
        limits them to those (None: every partition the group has state for)."""
        topics = None
        if partitions is not None:
            by_topic: dict[str, list[int]] = defaultdict(list)
            for tp in dict.fromkeys(partitions):
                by_topic[tp.topic].append(tp.partition)
            topics = [{"topic_name": t, "partitions": ps} for t, ps in by_topic.items()]

        async def send(node: Node, conn: BrokerConnection) -> dict[TopicPartition, Any]:
            resp = await conn.request(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS,
                                      {"groups": [{"group_id": group_id, "topics": topics}]})
            g = next((g for g in resp["groups"] if g["group_id"] == group_id), None)
            if g is None:
                raise errors.UnknownServerError(f"DescribeShareGroupOffsets answered without group {group_id}")
            if g["error_code"]:
                raise _group_error(g["error_code"], g.get("error_message"),
                                   f"Describing the offsets of share group {group_id}")
            out: dict[TopicPartition, Any] = {}
            for t in g["topics"]:
                for p in t["partitions"]:
                    tp = TopicPartition(t["topic_name"], p["partition_index"])
                    if p["error_code"]:
                        out[tp] = _group_error(p["error_code"], p.get("error_message"), f"Offsets of {tp}")
                    else:
                        epoch = p["leader_epoch"]
                        out[tp] = SharePartitionOffset(p["start_offset"], epoch if epoch >= 0 else None,
                                                       p.get("lag", -1))
            return dict(sorted(out.items()))
        return await self._for_group(group_id, send)

    async def alter_share_group_offsets(self, group_id: str, offsets: Mapping[TopicPartition, int]
                                        ) -> dict[TopicPartition, errors.KafkaError | None]:
        """Set the group's start offsets (AlterShareGroupOffsets): only while it has no members.
        A failure of the whole request raises; partition -> None or its error."""
        by_topic: dict[str, list[dict]] = defaultdict(list)
        for tp, offset in offsets.items():
            by_topic[tp.topic].append({"partition_index": tp.partition, "start_offset": int(offset)})
        body = {"group_id": group_id, "topics": [{"topic_name": t, "partitions": ps} for t, ps in by_topic.items()]}

        async def send(node: Node, conn: BrokerConnection) -> dict[TopicPartition, Any]:
            resp = await conn.request(ApiKey.ALTER_SHARE_GROUP_OFFSETS, body)
            if resp["error_code"]:
                raise _group_error(resp["error_code"], resp.get("error_message"),
                                   f"Altering the offsets of share group {group_id}")
            return dict(sorted({TopicPartition(t["topic_name"], p["partition_index"]):
                                (_group_error(p["error_code"], p.get("error_message"), "Altering the offset")
                                 if p["error_code"] else None)
                                for t in resp["responses"] for p in t["partitions"]}.items()))
        return await self._for_group(group_id, send)

    async def delete_share_group_offsets(self, group_id: str, topics: Iterable[str]
                                         ) -> dict[str, errors.KafkaError | None]:
        """Forget the group's state of whole topics (DeleteShareGroupOffsets): only while it has
        no members. A failure of the whole request raises; topic -> None or its error."""
        body = {"group_id": group_id, "topics": [{"topic_name": t} for t in dict.fromkeys(topics)]}

        async def send(node: Node, conn: BrokerConnection) -> dict[str, Any]:
            resp = await conn.request(ApiKey.DELETE_SHARE_GROUP_OFFSETS, body)
            if resp["error_code"]:
                raise _group_error(resp["error_code"], resp.get("error_message"),
                                   f"Deleting the offsets of share group {group_id}")
            return {t["topic_name"]: (_group_error(t["error_code"], t.get("error_message"), "Deleting the offsets")
                                      if t["error_code"] else None) for t in resp["responses"]}
        return await self._for_group(group_id, send)
