"""What a client knows about the cluster: brokers, controller, partition leaders.

:class:`ClusterMetadata` bootstraps from ``bootstrap.servers`` (any one reachable server will do),
keeps the answer of the last Metadata request, and hands out one connection per broker,
opening it on first use.
"""

from __future__ import annotations

import asyncio
import logging
import random
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from samsa.client.connection import BrokerConnection, KafkaConnectionError, KafkaTimeoutError, UnresolvableHostError
from samsa.client.types import Node
from samsa.configdef import ConfigError
from samsa.protocol import errors
from samsa.protocol.api_keys import ApiKey
from samsa.security.client import ClientSecurity

log = logging.getLogger(__name__)


def _host_and_ip(host: str, port: int) -> str:
    """``localhost/127.0.0.1:9092``, as Java's clients name a node they cannot reach."""
    try:
        ip = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][4][0]
    except OSError:
        return f"{host}:{port}"
    return f"{host}/{ip}:{port}"


def parse_bootstrap_servers(servers: str | list[str]) -> list[tuple[str, int]]:
    """``"h1:9092,[::1]:9093"`` -> ``[("h1", 9092), ("::1", 9093)]``; ValueError if malformed.
    An endpoint may carry a listener or protocol prefix (``PLAINTEXT://h1:9092``, ``SASL_SSL://h1:9093``):
    the Java client reads past it to host and port, and so does this (the prefix chooses nothing; the
    ``security.protocol`` key does)."""
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    out = []
    for item in (s.strip() for s in items):
        if not item:
            continue
        _, _, address = item.rpartition("://")
        host, sep, port = address.rpartition(":")
        host = host.strip("[]")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"Invalid url in bootstrap.servers: {item}")
        out.append((host, int(port)))
    if not out:
        raise ValueError("No resolvable bootstrap urls given in bootstrap.servers")
    return out


@dataclass
class PartitionMetadata:
    partition: int
    leader: int  # -1: none
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    offline: list[int]
    error_code: int = 0


@dataclass
class TopicMetadata:
    name: str
    topic_id: bytes
    is_internal: bool
    partitions: dict[int, PartitionMetadata] = field(default_factory=dict)
    error_code: int = 0


class ClusterMetadata:
    def __init__(self, bootstrap_servers: str | list[str], *, client_id: str | None = "samsa",
                 request_timeout_ms: int = 30000, connect_timeout_ms: int = 10000,
                 bootstrap_timeout_ms: int | None = None, retry_backoff_ms: int = 100,
                 reconnect_backoff_ms: int = 50, reconnect_backoff_max_ms: int = 1000,
                 metadata_max_age_ms: int = 300000, security: ClientSecurity | None = None):
        self.bootstrap_servers = parse_bootstrap_servers(bootstrap_servers)
        self.security = security  # every connection's TLS and SASL; None: PLAINTEXT
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.connect_timeout_ms = connect_timeout_ms
        self.bootstrap_timeout_ms = request_timeout_ms if bootstrap_timeout_ms is None else bootstrap_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.brokers: dict[int, Node] = {}
        self.controller_id: int | None = None
        self.cluster_id: str | None = None
        self.topics: dict[str, TopicMetadata] = {}
        self._bootstrap_conn: BrokerConnection | None = None
        self._conns: dict[int, BrokerConnection] = {}
        self._connecting: dict[int, asyncio.Task] = {}
        self.reconnect_backoff_ms, self.reconnect_backoff_max_ms = reconnect_backoff_ms, reconnect_backoff_max_ms
        self._node_backoff: dict[int, tuple[float, float]] = {}  # node -> (not before, last backoff in ms)
        self.metadata_max_age_ms = metadata_max_age_ms
        self.refreshed_at = 0.0
        self._warned: set[str] = set()  # bootstrap servers whose first failure was logged

    @property
    def metadata_stale(self) -> bool:
        """Older than metadata.max.age.ms: time to refresh even without an error."""
        return time.monotonic() - self.refreshed_at >= self.metadata_max_age_ms / 1000

    def _connect_failed(self, node_id: int) -> None:
        """reconnect.backoff.ms, doubling per failure up to reconnect.backoff.max.ms, with 20 % jitter."""
        _, last = self._node_backoff.get(node_id, (0.0, 0.0))
        backoff = min(last * 2, self.reconnect_backoff_max_ms) if last else self.reconnect_backoff_ms
        self._node_backoff[node_id] = (time.monotonic() + backoff * random.uniform(0.8, 1.2) / 1000, backoff)

    @property
    def bootstrap_text(self) -> str:
        return ",".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in self.bootstrap_servers)

    def _new_connection(self, host: str, port: int) -> BrokerConnection:
        return BrokerConnection(host, port, self.client_id, request_timeout_ms=self.request_timeout_ms,
                                connect_timeout_ms=self.connect_timeout_ms, security=self.security)

    # ------------------------------------------------------------------ bootstrap / metadata

    async def bootstrap(self) -> None:
        """Connect to the first reachable bootstrap server and read the cluster's metadata.

        Retries (with backoff) until ``bootstrap_timeout_ms``; then raises
        KafkaTimeoutError naming the servers tried and the last failure.
        """
        deadline = time.monotonic() + self.bootstrap_timeout_ms / 1000
        backoff = self.retry_backoff_ms / 1000
        last: Exception | None = None
        unresolvable: dict[str, str] = {}
        while True:
            for host, port in self.bootstrap_servers:
                remaining_ms = int((deadline - time.monotonic()) * 1000)
                if remaining_ms <= 0:
                    break
                conn = self._new_connection(host, port)
                try:
                    await conn.connect(min(self.connect_timeout_ms, remaining_ms))
                except UnresolvableHostError as e:
                    last = e
                    if conn.address not in unresolvable:
                        log.warning("Couldn't resolve server %s from bootstrap.servers as %s", conn.address, e.args[0])
                    unresolvable[conn.address] = e.args[0]
                    continue
                except (KafkaConnectionError, KafkaTimeoutError) as e:
                    last = e
                    if conn.address not in self._warned:
                        self._warned.add(conn.address)
                        log.warning("Connection to node -1 (%s) could not be established. Node may not be available. "
                                    "(%s)", _host_and_ip(host, port), e.args[0] if e.args else e)
                    continue
                if self._bootstrap_conn is not None:
                    self._bootstrap_conn.close()
                self._bootstrap_conn = conn
                await self.refresh()
                return
            if len(unresolvable) == len(self.bootstrap_servers):  # Java's clients refuse these at once
                raise ConfigError(
                    f"No resolvable bootstrap urls given in bootstrap.servers ({self.bootstrap_text}): "
                    + "; ".join(unresolvable.values()))
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                reason = f": {last.args[0]}" if last is not None and last.args else ""
                raise KafkaTimeoutError(
                    f"Could not connect to any bootstrap server ({self.bootstrap_text}) "
                    f"within {self.bootstrap_timeout_ms} ms{reason}")
            await asyncio.sleep(min(backoff, remaining))
            backoff = min(backoff * 2, 1.0)

    async def refresh(self, topics: list[str] | None = None, *, allow_auto_create: bool = False) -> dict[str, Any]:
        """Fetch Metadata (all topics if ``topics`` is None) and update the cache."""
        conn = await self.any()
        body = {
            "topics": None if topics is None else [{"name": t} for t in topics],
            "allow_auto_topic_creation": allow_auto_create,
            "include_topic_authorized_operations": False,
        }
        resp = await conn.request(ApiKey.METADATA, body, min_version=1)
        self._update(resp, full=topics is None)
        return resp

    def _update(self, resp: dict[str, Any], full: bool) -> None:
        self.refreshed_at = time.monotonic()
        self.brokers = {b["node_id"]: Node(b["node_id"], b["host"], b["port"], b.get("rack"))
                        for b in resp["brokers"]}
        controller = resp.get("controller_id", -1)
        self.controller_id = controller if controller >= 0 else None
        self.cluster_id = resp.get("cluster_id")
        if full:
            self.topics = {}
        for t in resp["topics"]:
            if t["name"] is None:
                continue
            if t["error_code"]:
                self.topics.pop(t["name"], None)
                continue
            self.topics[t["name"]] = TopicMetadata(
                t["name"], t.get("topic_id") or bytes(16), t.get("is_internal", False),
                {p["partition_index"]: PartitionMetadata(
                    p["partition_index"], p["leader_id"], p.get("leader_epoch", -1), list(p["replica_nodes"]),
                    list(p["isr_nodes"]), list(p.get("offline_replicas") or []), p["error_code"])
                 for p in t["partitions"]})
        for node_id in [n for n in self._conns if n not in self.brokers]:
            self._conns.pop(node_id).close()

    # ------------------------------------------------------------------ connections

    async def any(self) -> BrokerConnection:
        """A live connection to some broker (the bootstrap one if it still works)."""
        if self._bootstrap_conn is not None and self._bootstrap_conn.connected:
            return self._bootstrap_conn
        for conn in self._conns.values():
            if conn.connected:
                return conn
        for node_id in list(self.brokers):
            try:
                return await self.node(node_id)
            except KafkaConnectionError:
                continue
        await self.bootstrap()
        assert self._bootstrap_conn is not None
        return self._bootstrap_conn

    async def node(self, node_id: int) -> BrokerConnection:
        """The connection to broker ``node_id``, opened if needed."""
        conn = self._conns.get(node_id)
        if conn is not None and conn.connected:
            return conn
        task = self._connecting.get(node_id)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._connect_node(node_id))
            self._connecting[node_id] = task
            task.add_done_callback(lambda _t: self._connecting.pop(node_id, None))
        return await asyncio.shield(task)

    async def _connect_node(self, node_id: int) -> BrokerConnection:
        if node_id not in self.brokers:
            await self.refresh([])
        broker = self.brokers.get(node_id)
        if broker is None:
            raise errors.error_for(8, f"Broker {node_id} is not in the cluster's metadata")  # BROKER_NOT_AVAILABLE
        boot = self._bootstrap_conn
        if boot is not None and boot.connected and (boot.host, boot.port) == (broker.host, broker.port):
            self._conns[node_id] = boot
            return boot
        wait = self._node_backoff.get(node_id, (0.0, 0.0))[0] - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        conn = self._new_connection(broker.host, broker.port)
        try:
            await conn.connect()
        except (KafkaConnectionError, KafkaTimeoutError):
            self._connect_failed(node_id)
            raise
        self._node_backoff.pop(node_id, None)
        self._conns[node_id] = conn
        return conn

    async def controller(self) -> BrokerConnection:
        if self.controller_id is None or self.controller_id not in self.brokers:
            await self.refresh([])
        if self.controller_id is None:
            raise errors.NotControllerError("The cluster has no active controller")
        return await self.node(self.controller_id)

    async def leader_for(self, topic: str, partition: int) -> BrokerConnection:
        """The connection to the leader of ``topic``-``partition`` (metadata refreshed if unknown)."""
        return await self.node(await self.leader_id(topic, partition))

    async def leader_id(self, topic: str, partition: int, *, refresh: bool = False) -> int:
        meta = self.topics.get(topic)
        p = meta.partitions.get(partition) if meta else None
        if refresh or p is None or p.leader < 0:
            resp = await self.refresh([topic])
            for t in resp["topics"]:
                if t["name"] == topic and t["error_code"]:
                    raise errors.error_for(t["error_code"], f"Metadata for topic {topic}: {errors.error_name(t['error_code'])}")
            meta = self.topics.get(topic)
            p = meta.partitions.get(partition) if meta else None
        if p is None:
            raise errors.UnknownTopicOrPartitionError(f"Partition {topic}-{partition} does not exist")
        if p.leader < 0:
            raise errors.LeaderNotAvailableError(f"Partition {topic}-{partition} has no leader")
        return p.leader

    def close(self) -> list[BrokerConnection]:
        """Close every connection (returned, for :meth:`BrokerConnection.wait_closed`)."""
        for task in list(self._connecting.values()):
            task.cancel()
        conns = list({id(c): c for c in [*self._conns.values(), self._bootstrap_conn] if c is not None}.values())
        for conn in conns:
            conn.close()
        self._conns.clear()
        self._bootstrap_conn = None
        return conns

    async def aclose(self) -> None:
        """Close every connection and wait until they are released."""
        for conn in self.close():
            await conn.wait_closed()
