"""The Admin's streams-group calls (KIP-1071): list and describe streams groups (ListGroups with
the ``streams`` type, StreamsGroupDescribe) and delete them (DeleteGroups), each at the group's
coordinator through the Admin's request driver. Their committed offsets are a consumer group's
(OffsetFetch): :meth:`samsa.client.admin.AsyncAdmin.list_consumer_group_offsets`. A base of
:class:`samsa.client.admin.AsyncAdmin`."""

from __future__ import annotations

from typing import Iterable

from samsa.client.admin_driver import RequestDriver
from samsa.client.types import Node, StreamsGroupDescription, StreamsGroupListing, StreamsMemberDescription
from samsa.protocol import errors
from samsa.protocol.api_keys import ApiKey

KINDS = ("active", "standby", "warmup")


def _tasks(assignment: dict | None) -> dict[str, dict[str, list[int]]]:
    return {k: {t["subtopology_id"]: sorted(t["partitions"]) for t in (assignment or {}).get(f"{k}_tasks") or []}
            for k in KINDS}


def _streams_group(g: dict, node: Node) -> StreamsGroupDescription:
    members = [StreamsMemberDescription(
        m["member_id"], m["member_epoch"], m.get("instance_id"), m.get("rack_id"), m["client_id"], m["client_host"],
        m["topology_epoch"], m["process_id"],
        None if m.get("user_endpoint") is None else (m["user_endpoint"]["host"], m["user_endpoint"]["port"]),
        m.get("is_classic", False), _tasks(m.get("assignment")), _tasks(m.get("target_assignment")))
        for m in g["members"]]
    return StreamsGroupDescription(g["group_id"], g["group_state"], node, g["group_epoch"], g["assignment_epoch"],
                                   g.get("assignor_name") or "", g.get("topology"), members)


class StreamsAdmin(RequestDriver):
    async def list_streams_groups(self, states: Iterable[str] | None = None) -> list[StreamsGroupListing]:
        """The streams groups of every broker (ListGroups v5 with the type filter ``streams``), sorted."""
        return await self._list_groups_of_type("streams", states, StreamsGroupListing)

    async def describe_streams_groups(self, group_ids: Iterable[str]) -> dict[str, StreamsGroupDescription]:
        """Group id -> description (StreamsGroupDescribe on each coordinator). A group that does
        not exist raises GroupIdNotFoundError, as Kafka's admin client does."""
        return await self._describe_groups_of_type(group_ids, ApiKey.STREAMS_GROUP_DESCRIBE, "streams group",
                                                   _streams_group)

    async def delete_streams_groups(self, group_ids: Iterable[str]) -> dict[str, errors.KafkaError | None]:
        """Delete streams groups with their offsets (DeleteGroups): only empty groups can go.
        Group id -> None (deleted) or the error."""
        return await self._delete_groups(group_ids)
