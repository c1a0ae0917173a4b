"""The share coordinator's RPCs (KIP-932), sent by share partitions' leaders:
InitializeShareGroupState (83), ReadShareGroupState (84), WriteShareGroupState (85),
DeleteShareGroupState (86), ReadShareGroupStateSummary (87).

Each partition of a request goes to :class:`samsa.coordinator.share.ShareCoordinator`; its
:class:`~samsa.coordinator.share.PersisterError` becomes the partition's error, worded as
Kafka 4.4 words it. Inter-broker APIs: CLUSTER_ACTION on the cluster when an authorizer is set.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable

from samsa.coordinator.share import PartitionState, PersisterError, ShareKey
from samsa.coordinator.share.coordinator import batches_from_wire, batches_to_wire
from samsa.protocol import errors
from samsa.protocol.api_keys import ApiKey
from samsa.server.handlers import handles
from samsa.server.handlers.authz import Op, allowed_cluster

# Kafka's prefix for NOT_COORDINATOR and its kin, per API.
_ACTION = {ApiKey.INITIALIZE_SHARE_GROUP_STATE: "initialize share group state",
           ApiKey.READ_SHARE_GROUP_STATE: "read share group state",
           ApiKey.WRITE_SHARE_GROUP_STATE: "write share group state",
           ApiKey.DELETE_SHARE_GROUP_STATE: "delete share group state",
           ApiKey.READ_SHARE_GROUP_STATE_SUMMARY: "read share group state summary"}

_DEFAULT_MESSAGES = {errors.E_NOT_COORDINATOR: "This is not the correct coordinator.",
                     errors.E_COORDINATOR_NOT_AVAILABLE: "The coordinator is not available.",
                     errors.E_COORDINATOR_LOAD_IN_PROGRESS: "The coordinator is loading and hence can't process "
                                                            "requests."}


def _message(api: ApiKey, e: PersisterError) -> str | None:
    if e.code in _DEFAULT_MESSAGES:
        return f"Unable to {_ACTION[api]}: {_DEFAULT_MESSAGES[e.code]}"
    text = str(e)
    return None if text == f"error {e.code}" else text


async def _each(ctx, req: dict, api: ApiKey, op: Callable[[ShareKey, dict], Awaitable[dict]],
                failed: dict) -> dict:
    """Run ``op`` on every partition of the request, in parallel; a result list by topic."""
    if not req["group_id"]:  # Kafka 4.4 answers an empty group id with no results at all
        return {"results": []}
    authorized = allowed_cluster(ctx, Op.CLUSTER_ACTION)

    async def one(topic_id: bytes, p: dict) -> dict:
        base = {"partition": p["partition"]}
        if not authorized:
            return {**base, **failed, "error_code": errors.E_CLUSTER_AUTHORIZATION_FAILED, "error_message": None}
        try:
            out = await op(ShareKey(req["group_id"], uuid.UUID(bytes=bytes(topic_id)), p["partition"]), p)
            return {**base, "error_code": 0, "error_message": None, **out}
        except PersisterError as e:
            return {**base, **failed, "error_code": e.code, "error_message": _message(api, e)}

    results = []
    for t in req["topics"]:
        parts = await asyncio.gather(*(one(t["topic_id"], p) for p in t["partitions"]))
        results.append({"topic_id": t["topic_id"], "partitions": list(parts)})
    return {"results": results}


@handles(ApiKey.INITIALIZE_SHARE_GROUP_STATE)
async def initialize_share_group_state(ctx, req: dict) -> dict:
    async def op(key: ShareKey, p: dict) -> dict:
        await ctx.broker.share.initialize(key, p["state_epoch"], p["start_offset"])
        return {}
    return await _each(ctx, req, ApiKey.INITIALIZE_SHARE_GROUP_STATE, op, {})


@handles(ApiKey.READ_SHARE_GROUP_STATE)
async def read_share_group_state(ctx, req: dict) -> dict:
    async def op(key: ShareKey, p: dict) -> dict:
        s = await ctx.broker.share.read(key, p["leader_epoch"])
        return {"state_epoch": s.state_epoch, "start_offset": s.start_offset,
                "state_batches": batches_to_wire(s.batches)}
    return await _each(ctx, req, ApiKey.READ_SHARE_GROUP_STATE, op,
                       {"state_epoch": 0, "start_offset": 0, "state_batches": []})


@handles(ApiKey.WRITE_SHARE_GROUP_STATE)
async def write_share_group_state(ctx, req: dict) -> dict:
    async def op(key: ShareKey, p: dict) -> dict:
        await ctx.broker.share.write(key, PartitionState(
            p["state_epoch"], p["leader_epoch"], p["start_offset"], p.get("delivery_complete_count", -1),
            batches_from_wire(p["state_batches"])))
        return {}
    return await _each(ctx, req, ApiKey.WRITE_SHARE_GROUP_STATE, op, {})


@handles(ApiKey.DELETE_SHARE_GROUP_STATE)
async def delete_share_group_state(ctx, req: dict) -> dict:
    async def op(key: ShareKey, p: dict) -> dict:
        await ctx.broker.share.delete(key)
        return {}
    return await _each(ctx, req, ApiKey.DELETE_SHARE_GROUP_STATE, op, {})


@handles(ApiKey.READ_SHARE_GROUP_STATE_SUMMARY)
async def read_share_group_state_summary(ctx, req: dict) -> dict:
    async def op(key: ShareKey, p: dict) -> dict:
        s = await ctx.broker.share.read_summary(key, p["leader_epoch"])
        return {"state_epoch": s.state_epoch, "leader_epoch": s.leader_epoch, "start_offset": s.start_offset,
                "delivery_complete_count": s.delivery_complete_count}
    return await _each(ctx, req, ApiKey.READ_SHARE_GROUP_STATE_SUMMARY, op,
                       {"state_epoch": 0, "leader_epoch": 0, "start_offset": 0, "delivery_complete_count": -1})
