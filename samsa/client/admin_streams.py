"""The Admin's streams-group calls (KIP-1071): list and describe streams groups (ListGroups with
the ``streams`` type, StreamsGroupDescribe) and delete them (DeleteGroups), each at the group's
coordinator through the Admin's request driver. Their committed offsets are a consumer group's
(OffsetFetch): :meth:`samsa.client.admin.AsyncAdmin.list_consumer_group_offsets`. A base of
:class:`samsa.client.admin.AsyncAdmin`."""

from __future__ import annotations

from typing import Any, Iterable

from samsa.client.admin_driver import RequestDriver
from samsa.client.admin_driver import check as _check
from samsa.client.admin_driver import group_error as _group_error
from samsa.client.connection import BrokerConnection
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
        states = [s for s in states or [] if s]

        async def attempt() -> list[StreamsGroupListing]:
            cluster = await self._ready()
            await cluster.refresh([])
            found: dict[str, StreamsGroupListing] = {}
            for node_id in sorted(cluster.brokers):
                conn = await cluster.node(node_id)
                resp = await conn.request(ApiKey.LIST_GROUPS, {"states_filter": states, "types_filter": ["streams"]},
                                          min_version=5)
                _check(resp["error_code"], None, f"Listing the groups of broker {node_id}")
                for g in resp["groups"]:
                    if g.get("group_type", "streams") == "streams":
                        found[g["group_id"]] = StreamsGroupListing(g["group_id"], g.get("group_state"))
            return [found[k] for k in sorted(found)]
        return await self._call(attempt)

    async def describe_streams_groups(self, group_ids: Iterable[str]) -> dict[str, StreamsGroupDescription]:
        """Group id -> description (StreamsGroupDescribe on each coordinator). A group that does
        not exist raises GroupIdNotFoundError, as Kafka's admin client does."""
        group_ids = list(dict.fromkeys(group_ids))

        async def send(node: Node, conn: BrokerConnection, groups: list[str]) -> dict[str, Any]:
            resp = await conn.request(ApiKey.STREAMS_GROUP_DESCRIBE,
                                      {"group_ids": groups, "include_authorized_operations": False})
            out: dict[str, Any] = {}
            for g in resp["groups"]:
                if g["error_code"] == errors.E_GROUP_ID_NOT_FOUND:
                    out[g["group_id"]] = errors.GroupIdNotFoundError(
                        g.get("error_message") or f"Group {g['group_id']} not found.")
                elif g["error_code"]:
                    out[g["group_id"]] = _group_error(g["error_code"], g.get("error_message"),
                                                      f"Describing streams group {g['group_id']}")
                else:
                    out[g["group_id"]] = _streams_group(g, node)
            return out
        results = await self._for_groups(group_ids, send)
        for g in group_ids:
            if isinstance(results[g], BaseException):
                raise results[g]
        return {g: results[g] for g in group_ids}

    async def delete_streams_groups(self, group_ids: Iterable[str]) -> dict[str, errors.KafkaError | None]:
        """Delete streams groups with their offsets (DeleteGroups): only empty groups can go.
        Group id -> None (deleted) or the error."""
        group_ids = list(dict.fromkeys(group_ids))

        async def send(node: Node, conn: BrokerConnection, groups: list[str]) -> dict[str, Any]:
            resp = await conn.request(ApiKey.DELETE_GROUPS, {"groups_names": groups})
            return {r["group_id"]: _group_error(r["error_code"], None, f"Deleting group {r['group_id']}")
                    if r["error_code"] else None for r in resp["results"]}
        results = await self._for_groups(group_ids, send)
        return {g: results[g] for g in group_ids}
