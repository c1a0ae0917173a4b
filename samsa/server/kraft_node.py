"""A KRaft broker's metadata side, on its own thread: the replica of the metadata log (a voter in
combined mode, ``process.roles=broker,controller``; an observer on a broker-only node), the
image built from it, the controller of a combined node, and the broker's channel to the active
controller.

Kafka runs its controller and its metadata replication on threads of their own; so does Samsa:
the broker's event loop can wait on an answer of the controller (an admin write, as a
ZooKeeper broker waits on ZooKeeper) without stopping the controller, which may be in the
same process. The broker reaches it only through :class:`MetadataNode`'s methods, which are
safe to call from the broker's thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import copy
import logging
import threading
import time
from typing import Any, Callable

from samsa.broker_config import BrokerConfig
from samsa.client.connection import BrokerConnection
from samsa.cluster.kraft_image import Changes, Registration
from samsa.cluster.metadata import TopicInfo
from samsa.protocol import errors
from samsa.server.controller_node import ControllerServer

log = logging.getLogger(__name__)

# The highest version of each controller API the broker sends (what Samsa's controller answers).
VERSIONS = {62: 4, 63: 2, 56: 3, 19: 7, 20: 6, 37: 3, 44: 1, 43: 2, 45: 0, 67: 0, 55: 2, 30: 3, 31: 3, 49: 1, 51: 0,
            57: 2, 80: 0, 81: 0}


class MetadataView:
    """A copy of what changed in the image, for the broker's thread."""

    def __init__(self, offset: int, topics: dict[str, TopicInfo], removed: set[str],
                 brokers: list[Registration] | None, broker_configs: dict[str | None, dict[str, str]] | None,
                 leader_id: int, acls: bool = False, entities: bool = False):
        self.offset = offset
        self.topics = topics
        self.removed = removed
        self.brokers = brokers
        self.broker_configs = broker_configs
        self.leader_id = leader_id
        self.acls = acls            # whether ACLs changed
        self.entities = entities    # whether quotas, SCRAM credentials or group configs changed


def _not_controller(resp: dict) -> bool:
    """Whether a controller's answer says it is not the active controller (anywhere in it)."""
    if resp.get("error_code") == errors.E_NOT_CONTROLLER:
        return True
    for v in resp.values():
        if isinstance(v, list) and v and isinstance(v[0], dict) and v[0].get("error_code") == errors.E_NOT_CONTROLLER:
            return True
    return False


def _on_event_loop() -> bool:
    """Whether the calling thread is running an event loop (the broker's)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class MetadataNode:
    def __init__(self, config: BrokerConfig):
        self.config = config
        self.node_id = config["node.id"]
        self.voter = "controller" in config["process.roles"]
        self.server = ControllerServer(config, observer=not self.voter, lock_dirs=False)
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="kraft-metadata", daemon=True)
        self._conn: tuple[int, BrokerConnection] | None = None
        self._conn_lock: asyncio.Lock | None = None
        self._unanswered = False  # the last request to the active controller found none before its timeout

    # ---------------------------------------------------------------- lifecycle (broker's thread)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    async def start(self) -> None:
        self._thread.start()
        await self.run(self.server.start())

    async def wait_caught_up(self) -> None:
        async def wait() -> None:
            await self.server.caught_up.wait()
        await self.run(wait())

    async def stop(self) -> None:
        async def stop() -> None:
            if self._conn is not None:
                self._conn[1].close()
            await self.server.stop()
        try:
            await self.run(stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            await asyncio.get_running_loop().run_in_executor(None, self._thread.join, 10)

    # ---------------------------------------------------------------- calls into the metadata thread

    def submit(self, coro) -> concurrent.futures.Future:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    async def run(self, coro) -> Any:
        """Await, from the broker's loop, a coroutine run on the metadata thread."""
        return await asyncio.wrap_future(self.submit(coro))

    def call(self, fn: Callable[[], Any], timeout_s: float = 30) -> Any:
        """``fn()`` on the metadata thread, blocking the caller until it returns."""
        async def run() -> Any:
            return fn()
        return self.submit(run()).result(timeout_s)

    def read_image(self, fn: Callable[[Any], Any], timeout_s: float = 30) -> Any:
        """``fn(image)`` on the metadata thread (it must copy what it keeps), blocking the caller."""
        return self.call(lambda: fn(self.server.image), timeout_s)

    def view(self, changes: Changes | None = None) -> MetadataView:
        """(On the metadata thread.) Copies of what ``changes`` names, or of everything."""
        image = self.server.image
        names = set(image.topics) if changes is None else changes.topics
        topics = {n: copy.deepcopy(image.topics[n]) for n in names if n in image.topics}
        removed = set() if changes is None else set(changes.removed)
        brokers = None
        if changes is None or changes.brokers:
            brokers = [copy.copy(b) for b in image.brokers.values()]
        configs = None
        if changes is None or changes.broker_configs:
            configs = {None: image.broker_configs(None), self.node_id: image.broker_configs(self.node_id)}
        return MetadataView(image.offset, topics, removed, brokers, configs, self.server.leader_id,
                            acls=changes is not None and changes.acls,
                            entities=changes is not None and changes.entities)

    def subscribe(self, loop: asyncio.AbstractEventLoop, callback: Callable[[MetadataView], None]) -> MetadataView:
        """Every later change, as views, on ``loop``; returns the whole image now (in the same order)."""
        def on_changes(changes: Changes) -> None:
            loop.call_soon_threadsafe(callback, self.view(changes))

        def subscribe() -> MetadataView:
            self.server.subscribers.append(on_changes)
            return self.view()
        return self.call(subscribe)

    @property
    def applied_offset(self) -> int:
        return self.server.image.offset

    @property
    def leader_id(self) -> int:
        return self.server.leader_id if hasattr(self.server, "driver") else -1

    # ---------------------------------------------------------------- the channel to the active controller

    async def controller_request(self, api_key: int, body: dict, timeout_ms: int) -> dict:
        """(On the metadata thread.) ``body`` to the active controller, again to the next one when
        the one asked is not (or no longer) active, until ``timeout_ms``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        backoff = self.config["controller.quorum.retry.backoff.ms"] / 1000
        if self._conn_lock is None:
            self._conn_lock = asyncio.Lock()
        last: Exception | None = None
        while loop.time() < deadline:
            leader = self.server.leader_id
            where = self.server.driver.address(leader) if leader >= 0 else None
            if where is None:
                await asyncio.sleep(backoff)
                continue
            conn = None
            try:
                async with self._conn_lock:
                    if self._conn is None or self._conn[0] != leader or not self._conn[1].connected:
                        if self._conn is not None:
                            self._conn[1].close()
                        host, port = where
                        conn = BrokerConnection(host, port, client_id=f"broker-{self.node_id}-to-controller",
                                                request_timeout_ms=timeout_ms, connect_timeout_ms=5000)
                        self._conn = (leader, conn)
                        await conn.connect()
                    conn = self._conn[1]
                version = conn.pick_version(api_key, max_version=VERSIONS[api_key])
                remaining = max(int((deadline - loop.time()) * 1000), 1)
                resp = await conn.request(api_key, body, version, timeout_ms=remaining)
            except (errors.KafkaError, OSError, asyncio.TimeoutError) as e:
                last = e
                if self._conn is not None and self._conn[1] is conn:  # not one another request opened since
                    self._conn[1].close()
                    self._conn = None
                await asyncio.sleep(backoff)
                continue
            if _not_controller(resp):
                await asyncio.sleep(backoff)
                continue
            self._unanswered = False
            return resp
        self._unanswered = True
        raise errors.RequestTimedOutError(f"no active controller answered within {timeout_ms} ms"
                                          + (f" (last: {last})" if last else ""))

    async def request(self, api_key: int, body: dict, timeout_ms: int = 30000) -> dict:
        """From the broker's loop."""
        return await self.run(self.controller_request(api_key, body, timeout_ms))

    def request_sync(self, api_key: int, body: dict, timeout_ms: int = 30000) -> dict:
        """From any thread but the metadata thread, blocking. The broker's event loop calls it too
        (a topic created at once): there, while no active controller answers (a request, the
        heartbeats every ``broker.heartbeat.interval.ms`` too, found none before its timeout, and
        none answered since), it gives up at once with REQUEST_TIMED_OUT instead of stopping the
        broker for ``timeout_ms``; the request is left to finish by its own deadline. Otherwise it
        waits there 2 x ``controller.quorum.request.timeout.ms`` at most."""
        on_loop = _on_event_loop()
        if on_loop and self._unanswered:
            raise errors.RequestTimedOutError("no active controller answers")
        if on_loop:   # a topic created at once: a few seconds at most, not the whole request timeout
            timeout_ms = min(timeout_ms, 2 * self.config["controller.quorum.request.timeout.ms"])
        fut = self.submit(self.controller_request(api_key, body, timeout_ms))
        deadline = time.monotonic() + timeout_ms / 1000 + 5
        while True:
            try:
                return fut.result(0.1)
            except concurrent.futures.TimeoutError:
                if (on_loop and self._unanswered) or time.monotonic() > deadline:
                    raise errors.RequestTimedOutError("no active controller answers") from None
