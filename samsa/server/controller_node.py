"""A KRaft controller process (``process.roles=controller``): one voter of the metadata quorum.

It listens on the controller listener(s) (``controller.listener.names``) and answers what a
controller quorum answers there today: ApiVersions, the Raft RPCs of the metadata partition
``__cluster_metadata-0`` (Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch), DescribeQuorum (what
``kafka-metadata-quorum --bootstrap-controller`` asks) and DescribeCluster for the controller
endpoints (KIP-919, how an admin client finds the active controller). The consensus runs in
:class:`~samsa.server.raft_driver.RaftDriver`. Brokers cannot register with it yet: anything
else closes the connection with a log line, as an unknown API does.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from pathlib import Path
from typing import Awaitable, Callable

from samsa.broker_config import BrokerConfig, ConfigError, parse_listener
from samsa.protocol import api, errors
from samsa.protocol.api_keys import ApiKey
from samsa.protocol.errors import InvalidRequestError
from samsa.raft import messages as m
from samsa.raft.consensus import RaftConfig
from samsa.server import kraft_mode
from samsa.server.network import Connection, ConnectionLimits
from samsa.server.raft_driver import (METADATA_TOPIC, RaftDriver, Voter, from_wire_request, to_wire_response)
from samsa.storage.dir_lock import LogDirLocks

log = logging.getLogger(__name__)

CONTROLLER = 2   # DescribeCluster EndpointType (KIP-919)
# The messages Kafka's Errors carry for the codes DescribeQuorum answers with.
_MESSAGES = {
    errors.E_UNKNOWN_TOPIC_OR_PARTITION: "This server does not host this topic-partition.",
    errors.E_NOT_LEADER_OR_FOLLOWER: "For requests intended only for the leader, this error indicates that the broker "
                                     "is not the current leader. For requests intended for any replica, this error "
                                     "indicates that the broker is not a replica of the topic partition.",
}


def _quorum_error(partition: int, code: int) -> dict:
    return {"partition_index": partition, "error_code": code, "error_message": _MESSAGES.get(code, ""),
            "leader_id": 0, "leader_epoch": 0, "high_watermark": 0, "current_voters": [], "observers": []}


class ControllerServer:
    def __init__(self, config: BrokerConfig):
        self.config = config
        self.broker_id = config["node.id"]
        self.connections: set[Connection] = set()
        self.on_connection_closed: list[Callable[[Connection], None]] = []
        self.servers: list[asyncio.AbstractServer] = []
        self.bound: list[tuple[str, str, int]] = []
        self.driver: RaftDriver
        self.cluster_id = ""
        self._dir_locks: LogDirLocks | None = None
        self.started = asyncio.Event()
        self.listener_name = config["controller.listener.names"][0]
        self._handlers: dict[int, tuple[Callable, int, int]] = {
            ApiKey.API_VERSIONS: (self._api_versions, 0, api.api(ApiKey.API_VERSIONS).max_version),
            ApiKey.VOTE: (self._raft, 0, 2),
            ApiKey.BEGIN_QUORUM_EPOCH: (self._raft, 0, 1),
            ApiKey.END_QUORUM_EPOCH: (self._raft, 0, 1),
            ApiKey.FETCH: (self._raft, 13, 17),
            ApiKey.DESCRIBE_QUORUM: (self._describe_quorum, 0, 2),
            ApiKey.DESCRIBE_CLUSTER: (self._describe_cluster, 1, 1),
        }

    # ---- lifecycle

    async def start(self) -> None:
        self.cluster_id = kraft_mode.check_start(self.config) or ""
        meta_dir = Path(self.config["metadata.log.dir"] or self.config.log_dirs[0])
        dirs = list(dict.fromkeys([*(Path(d) for d in self.config.log_dirs), meta_dir]))
        self._dir_locks = LogDirLocks(dirs)
        c = self.config
        self.driver = RaftDriver(
            self.broker_id, [Voter(i, h, p) for i, h, p in kraft_mode.voters(c)], self.cluster_id, meta_dir,
            RaftConfig(election_timeout_ms=c["controller.quorum.election.timeout.ms"],
                       election_backoff_max_ms=c["controller.quorum.election.backoff.max.ms"],
                       fetch_timeout_ms=c["controller.quorum.fetch.timeout.ms"],
                       request_timeout_ms=c["controller.quorum.request.timeout.ms"],
                       retry_backoff_ms=c["controller.quorum.retry.backoff.ms"]),
            idle_interval_ms=c["metadata.max.idle.interval.ms"], fetch_max_bytes=c["controller.quorum.fetch.max.bytes"])
        await self._listen()
        self.driver.start()
        for server in self.servers:
            await server.start_serving()
        self.started.set()
        log.info("[ControllerServer id=%d] started, listening on %s. KRaft controller quorum of voters %s "
                 "(cluster %s): this node takes part in electing the leader and replicating the metadata log "
                 "__cluster_metadata; it answers Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch, DescribeQuorum and "
                 "DescribeCluster. Brokers cannot register with this quorum yet (process.roles=broker is refused).",
                 self.broker_id, ", ".join(f"{n}://{h}:{p}" for n, h, p in self.bound),
                 ",".join(str(v[0]) for v in kraft_mode.voters(c)), self.cluster_id)

    async def _listen(self) -> None:
        loop = asyncio.get_running_loop()
        limits = ConnectionLimits(self.config["socket.request.max.bytes"], self.config["queued.max.requests"])
        names = set(self.config["controller.listener.names"])
        for listener in self.config.listeners:
            name, host, port = parse_listener(listener)
            if name not in names:
                continue
            if self.config.security_protocol(name) != "PLAINTEXT":
                raise ConfigError(f"the controller listener {name} is {self.config.security_protocol(name)}: "
                                  "Samsa's controllers speak PLAINTEXT only for now")
            server = await loop.create_server(lambda name=name: Connection(self, limits, name), host or None, port,
                                              reuse_address=True, start_serving=False)
            for sock in server.sockets:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.servers.append(server)
            self.bound.append((name, host, server.sockets[0].getsockname()[1]))

    async def stop(self) -> None:
        if hasattr(self, "driver") and hasattr(self.driver, "node"):
            await self.driver.resign(self.config["controller.quorum.request.timeout.ms"])
        for server in self.servers:
            server.close()
        parked = [c.task for c in self.connections if c.task is not None]
        for conn in list(self.connections):
            conn.transport.close()
        for task in parked:
            task.cancel()
        await asyncio.gather(*parked, return_exceptions=True)
        if hasattr(self, "driver") and hasattr(self.driver, "log"):
            await self.driver.stop()
        for server in self.servers:
            await server.wait_closed()
        if self._dir_locks is not None:
            self._dir_locks.release()
        log.info("[ControllerServer id=%d] shut down completed", self.broker_id)

    # ---- the connection's dispatcher (samsa.server.network.FrameDispatcher)

    def dispatch(self, conn: Connection, frame) -> list | Awaitable[list | None] | None:
        try:
            api_key, version, correlation_id = api.peek_request_header(frame)
        except InvalidRequestError as e:
            conn.close(str(e))
            return None
        entry = self._handlers.get(api_key)
        if entry is None:
            conn.close(f"API key {api_key} is not served on a KRaft controller listener yet")
            return None
        fn, lo, hi = entry
        if not lo <= version <= hi:
            if api_key == ApiKey.API_VERSIONS:
                return api.api_versions_v0_fallback(correlation_id, self._versions())
            conn.close(f"unsupported version {version} of API key {api_key} (supported: {lo}-{hi})")
            return None
        try:
            header, body = api.decode_request(frame)
            result = fn(api_key, version, body)
        except InvalidRequestError as e:
            conn.close(f"malformed request (API key {api_key} v{version}): {e}")
            return None
        except Exception as e:
            log.exception("API key %d v%d from %s failed", api_key, version, conn.peer)
            conn.close(f"internal error: {e}")
            return None
        if isinstance(result, dict):
            return api.encode_response(api_key, version, correlation_id, result)
        return self._later(result, api_key, version, correlation_id)

    @staticmethod
    async def _later(result: Awaitable[dict], api_key: int, version: int, correlation_id: int) -> list:
        return api.encode_response(api_key, version, correlation_id, await result)

    def _versions(self) -> list[tuple[int, int, int]]:
        return [(k, lo, hi) for k, (_, lo, hi) in sorted(self._handlers.items())]

    # ---- handlers

    def _api_versions(self, key: int, version: int, body: dict) -> dict:
        return {"error_code": 0, "throttle_time_ms": 0,
                "api_keys": [{"api_key": k, "min_version": lo, "max_version": hi} for k, lo, hi in self._versions()]}

    def _raft(self, key: int, version: int, body: dict):
        """As Kafka's KafkaRaftClient: another cluster's request is refused with a top-level
        INCONSISTENT_CLUSTER_ID, one not about __cluster_metadata-0 alone with INVALID_REQUEST."""
        cluster_id = body.get("cluster_id")
        msg = from_wire_request(key, version, body)
        code = (errors.E_INCONSISTENT_CLUSTER_ID if cluster_id is not None and cluster_id != self.cluster_id
                else errors.E_INVALID_REQUEST if msg is None else 0)
        if code:
            if key == ApiKey.FETCH:
                return {"throttle_time_ms": 0, "error_code": code, "session_id": 0, "responses": []}
            return {"error_code": code, "topics": []}
        source = msg.replica_id if isinstance(msg, (m.VoteRequest, m.FetchRequest)) else msg.leader_id
        if isinstance(msg, m.EndQuorumEpochRequest):
            log.info("[RaftManager id=%d] EndQuorumEpoch from %d: it ends epoch %d (preferred candidates %s)",
                     self.broker_id, msg.leader_id, msg.leader_epoch, list(msg.preferred_candidates))
        fut = self.driver.request(source, msg)
        return self._answer(key, fut)

    async def _answer(self, key: int, fut: asyncio.Future) -> dict:
        msg = await fut
        records = None
        if isinstance(msg, m.FetchResponse) and isinstance(msg.records, m.RecordsRange):
            records = self.driver.read_records(msg.records, self.config["controller.quorum.fetch.max.bytes"])
        return to_wire_response(key, msg, records)

    def _describe_quorum(self, key: int, version: int, body: dict) -> dict:
        """As Kafka's KafkaRaftClient answers: each partition asked for other than
        __cluster_metadata-0 with UNKNOWN_TOPIC_OR_PARTITION, a non-leader with
        NOT_LEADER_OR_FOLLOWER (its leader, epoch and high watermark zero), the leader its view."""
        topics = body.get("topics") or []
        if (len(topics) != 1 or topics[0]["topic_name"] != METADATA_TOPIC
                or [p["partition_index"] for p in topics[0]["partitions"]] != [0]):
            return {"error_code": 0, "error_message": "", "topics": [
                {"topic_name": t["topic_name"], "partitions": [_quorum_error(p["partition_index"],
                                                                             errors.E_UNKNOWN_TOPIC_OR_PARTITION)
                                                               for p in t["partitions"]]} for t in topics]}
        part = self.driver.describe_quorum()
        if part["error_code"]:
            part = _quorum_error(0, part["error_code"])
        else:
            part["error_message"] = ""
        out = {"error_code": 0, "error_message": "", "topics": [{"topic_name": METADATA_TOPIC, "partitions": [part]}]}
        if version >= 2 and not part["error_code"]:
            out["nodes"] = [{"node_id": i, "listeners": [{"name": self.listener_name, "host": h, "port": p}]}
                            for i, h, p in kraft_mode.voters(self.config)]
        return out

    def _describe_cluster(self, key: int, version: int, body: dict) -> dict:
        voters = kraft_mode.voters(self.config)
        leader = self.driver.node.leader_id
        return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "endpoint_type": CONTROLLER,
                "cluster_id": self.cluster_id,
                "controller_id": leader if leader >= 0 else self.broker_id,
                "brokers": [{"broker_id": i, "host": h, "port": p, "rack": None} for i, h, p in voters],
                "cluster_authorized_operations": -2147483648}
