"""A KRaft broker's channel to the active controller (``samsa.server.kraft_node.MetadataNode``),
against two fake controllers on loopback: what it does when the active controller changes while
a request is in flight (found by the KRaft nemesis, ``test_kraft_nemesis.py``)."""

from __future__ import annotations

import asyncio
import struct
from types import SimpleNamespace

from samsa.protocol import api
from samsa.protocol.api_keys import ApiKey
from samsa.server.kraft_node import MetadataNode


async def _fake_controller(answer: bool) -> tuple[asyncio.AbstractServer, int, asyncio.Event, list]:
    """A controller answering ApiVersions, and AlterPartition when ``answer`` (else never);
    the event is set once an AlterPartition arrived; the list counts the connections."""
    asked, connections = asyncio.Event(), []

    async def serve(reader, writer):
        connections.append(writer)
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                key, version, cid = api.peek_request_header(await reader.readexactly(size))
                if key == ApiKey.API_VERSIONS:
                    writer.writelines(api.encode_response(key, version, cid, {"error_code": 0, "api_keys": [
                        {"api_key": 18, "min_version": 0, "max_version": 3},
                        {"api_key": 56, "min_version": 0, "max_version": 3}]}))
                elif key == ApiKey.ALTER_PARTITION:
                    asked.set()
                    if answer:
                        writer.writelines(api.encode_response(key, version, cid, {
                            "throttle_time_ms": 0, "error_code": 0, "topics": []}))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()
    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], asked, connections


def _channel(voters: dict[int, int], leader: int) -> MetadataNode:
    """The channel's state alone (no metadata thread, no controller server): it runs on the test's loop."""
    node = MetadataNode.__new__(MetadataNode)
    node.config = {"controller.quorum.voters": [f"{i}@127.0.0.1:{port}" for i, port in voters.items()],
                   "controller.quorum.retry.backoff.ms": 20}
    node.node_id = 101
    addresses = {i: ("127.0.0.1", port) for i, port in voters.items()}   # the driver's endpoints of the voters
    node.server = SimpleNamespace(leader_id=leader, driver=SimpleNamespace(address=addresses.get))
    node._conn, node._conn_lock, node._unanswered = None, None, False
    return node


def test_a_request_failing_on_the_old_controller_keeps_the_new_ones_connection():
    """A request waits on controller 1; controller 2 becomes active and a second request opens
    a connection to it (closing the one to 1, which fails the first). The first request's
    failure must not close or forget the second's new connection: both are answered by 2, over
    one connection. (It did: the second request then failed with a TypeError, a traceback in
    the broker's log, its AlterPartition lost until the next try.)"""
    async def go():
        old, old_port, old_asked, _ = await _fake_controller(answer=False)
        new, new_port, _, new_connections = await _fake_controller(answer=True)
        async with old, new:
            channel = _channel({1: old_port, 2: new_port}, leader=1)
            body = {"broker_id": 101, "broker_epoch": 1, "topics": []}
            first = asyncio.ensure_future(channel.controller_request(ApiKey.ALTER_PARTITION, body, 10000))
            await asyncio.wait_for(old_asked.wait(), 10)
            channel.server.leader_id = 2
            second = await channel.controller_request(ApiKey.ALTER_PARTITION, body, 10000)
            assert second["error_code"] == 0
            assert (await asyncio.wait_for(first, 10))["error_code"] == 0
            assert len(new_connections) == 1
            channel._conn[1].close()
    asyncio.run(go())
