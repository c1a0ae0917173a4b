"""The KRaft part of a node: its replica of the metadata log, the image built from it, and on a
controller, the controller.

A controller (``process.roles`` with ``controller``) is one voter of the metadata quorum. It
listens on the controller listener(s) (``controller.listener.names``) and answers ApiVersions,
the Raft RPCs of the metadata partition ``__cluster_metadata-0`` (Vote, BeginQuorumEpoch,
EndQuorumEpoch, Fetch), DescribeQuorum (what ``kafka-metadata-quorum --bootstrap-controller``
asks), DescribeCluster for the controller endpoints (KIP-919), and, while it is the active
controller (the Raft leader, caught up with the log), what brokers send a controller: broker
registration and heartbeats, AlterPartition, and the metadata writes (CreateTopics,
DeleteTopics, CreatePartitions, IncrementalAlterConfigs, ElectLeaders,
AlterPartitionReassignments, AllocateProducerIds), decided by ``cluster.kraft_controller`` and
written to the log before they are answered. Anything else closes the connection with a log
line, as an unknown API does.

A broker-only node runs the same without a listener, as an observer of the quorum: it fetches
the log from the leader and builds its image, which the broker follows (``cluster.kraft_cluster``).
The consensus runs in :class:`~samsa.server.raft_driver.RaftDriver`.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from pathlib import Path
from typing import Awaitable, Callable

from samsa.broker_config import BrokerConfig, ConfigError, parse_listener
from samsa.cluster.kraft_controller import ControllerLogic, Decision
from samsa.cluster.kraft_image import Changes, MetadataImage, snapshot_records
from samsa.protocol import api, errors
from samsa.protocol import metadata_records as mr
from samsa.protocol.api_keys import ApiKey
from samsa.protocol.errors import InvalidRequestError
from samsa.raft import messages as m
from samsa.raft.consensus import RaftConfig, RaftState
from samsa.server import kraft_mode
from samsa.server.network import Connection, ConnectionLimits
from samsa.server.raft_driver import (METADATA_TOPIC, MetadataLog, RaftDriver, Voter, _now, from_wire_request,
                                     to_wire_response, voters_record)
from samsa.storage.dir_lock import LogDirLocks
from samsa.storage.config import LogConfig
from samsa.storage.kraft import (METADATA_PARTITION_DIR, Snapshot, parse_uuid, read_meta_props, read_metadata_log,
                                 uuid_string, write_snapshot)

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
    def __init__(self, config: BrokerConfig, *, observer: bool = False, lock_dirs: bool = True):
        self.config = config
        self.observer = observer     # a broker-only node: no listener, no vote
        self.lock_dirs = lock_dirs   # False when the broker of this process locks them
        self.image = MetadataImage()
        self.logic: ControllerLogic | None = None
        # Called on this loop with what each round of applied records changed.
        self.subscribers: list[Callable[[Changes], None]] = []
        self._waiters: list[tuple[int, asyncio.Future]] = []
        self._write_lock = asyncio.Lock()
        self._unapplied: int | None = None   # the last offset of a write that timed out uncommitted
        self.active_epoch = -1       # the leader epoch this node is the active controller in, or -1
        self._active_tasks: list[asyncio.Task] = []
        self.caught_up = asyncio.Event()  # the image holds what the log had committed when this node started
        self._applied_epoch = -1          # the leader epoch of the last record applied
        self._bytes_since_snapshot = 0
        self._last_snapshot_ms = 0
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
        w = self._controller_write
        self._handlers: dict[int, tuple[Callable, int, int]] = {
            ApiKey.BROKER_REGISTRATION: (w, 0, 4),
            ApiKey.BROKER_HEARTBEAT: (w, 0, 2),
            ApiKey.ALTER_PARTITION: (w, 2, 3),
            ApiKey.CREATE_TOPICS: (w, 2, 7),
            ApiKey.DELETE_TOPICS: (w, 1, 6),
            ApiKey.CREATE_PARTITIONS: (w, 0, 3),
            ApiKey.INCREMENTAL_ALTER_CONFIGS: (w, 0, 1),
            ApiKey.ELECT_LEADERS: (w, 0, 2),
            ApiKey.ALTER_PARTITION_REASSIGNMENTS: (w, 0, 0),
            ApiKey.ALLOCATE_PRODUCER_IDS: (w, 0, 0),
            ApiKey.CREATE_ACLS: (w, 1, 3),
            ApiKey.DELETE_ACLS: (w, 1, 3),
            ApiKey.ALTER_CLIENT_QUOTAS: (w, 0, 1),
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (w, 0, 0),
            ApiKey.UPDATE_FEATURES: (w, 0, 2),
            ApiKey.API_VERSIONS: (self._api_versions, 0, api.api(ApiKey.API_VERSIONS).max_version),
            ApiKey.VOTE: (self._raft, 0, 2),
            ApiKey.BEGIN_QUORUM_EPOCH: (self._raft, 0, 1),
            ApiKey.END_QUORUM_EPOCH: (self._raft, 0, 1),
            ApiKey.FETCH: (self._raft, 13, 18),
            ApiKey.FETCH_SNAPSHOT: (self._raft, 0, 1),
            ApiKey.ENVELOPE: (self._envelope, 0, 0),
            ApiKey.DESCRIBE_QUORUM: (self._describe_quorum, 0, 2),
            ApiKey.DESCRIBE_CLUSTER: (self._describe_cluster, 1, 1),
            ApiKey.ADD_RAFT_VOTER: (self._voter_change, 0, 0),
            ApiKey.REMOVE_RAFT_VOTER: (self._voter_change, 0, 0),
            ApiKey.UPDATE_RAFT_VOTER: (self._voter_change, 0, 0),
        }

    # ---- lifecycle

    async def start(self) -> None:
        self.cluster_id = kraft_mode.check_start(self.config) or ""
        meta_dir = Path(self.config["metadata.log.dir"] or self.config.log_dirs[0])
        dirs = list(dict.fromkeys([*(Path(d) for d in self.config.log_dirs), meta_dir]))
        if self.lock_dirs:
            self._dir_locks = LogDirLocks(dirs)
        c = self.config
        self.logic = ControllerLogic(self.image, self.cluster_id, session_timeout_ms=c["broker.session.timeout.ms"],
                                     unclean_default=c["unclean.leader.election.enable"])
        props = read_meta_props(meta_dir) or {}
        self.driver = RaftDriver(
            self.broker_id, [Voter(i, h, p) for i, h, p in kraft_mode.voters(c)], self.cluster_id, meta_dir,
            RaftConfig(election_timeout_ms=c["controller.quorum.election.timeout.ms"],
                       election_backoff_max_ms=c["controller.quorum.election.backoff.max.ms"],
                       fetch_timeout_ms=c["controller.quorum.fetch.timeout.ms"],
                       request_timeout_ms=c["controller.quorum.request.timeout.ms"],
                       retry_backoff_ms=c["controller.quorum.retry.backoff.ms"]),
            idle_interval_ms=c["metadata.max.idle.interval.ms"], fetch_max_bytes=c["controller.quorum.fetch.max.bytes"],
            log_config=LogConfig(segment_bytes=c["metadata.log.segment.bytes"], segment_ms=c["metadata.log.segment.ms"]),
            bootstrap_servers=kraft_mode.bootstrap_servers(c) if kraft_mode.dynamic(c) else [],
            listener_name=self.listener_name,
            directory_id=parse_uuid(props["directory.id"]) if props.get("directory.id") else m.ZERO_UUID)
        latest = MetadataLog.latest_snapshot_in(meta_dir / METADATA_PARTITION_DIR)
        if latest is not None:
            self._load_snapshot(latest[1])
        self._last_snapshot_ms = _now()
        self.driver.on_snapshot_installed = self._snapshot_installed
        self.driver.on_committed = self._committed
        self.driver.on_leader_changed = self._leadership
        if not self.observer:
            await self._listen()
            self.driver.own_endpoints = [(n, h or "localhost", p) for n, h, p in self.bound]
        self.driver.start()
        for server in self.servers:
            await server.start_serving()
        self.started.set()
        quorum = (",".join(str(v[0]) for v in kraft_mode.voters(c)) if not kraft_mode.dynamic(c) else
                  "%s (dynamic, kraft.version %d; bootstrap servers %s)" % (
                      ",".join(map(str, sorted(self.driver.node.voters))) or "(none known yet)",
                      self.driver.kraft_version, ",".join(c["controller.quorum.bootstrap.servers"])))
        if self.observer:
            log.info("[MetadataNode id=%d] started: an observer of the KRaft controller quorum of voters %s "
                     "(cluster %s), following the metadata log __cluster_metadata", self.broker_id, quorum,
                     self.cluster_id)
            return
        log.info("[ControllerServer id=%d] started, listening on %s. KRaft controller quorum of voters %s "
                 "(cluster %s): this node takes part in electing the leader and replicating the metadata log "
                 "__cluster_metadata, and serves brokers while it is the active controller.",
                 self.broker_id, ", ".join(f"{n}://{h}:{p}" for n, h, p in self.bound), quorum, self.cluster_id)

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
        self._deactivate()
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
        """With the features this node supports (v3+), kraft.version among them: what a Kafka
        leader asks a controller it is to add as a voter (KIP-853)."""
        return {"error_code": 0, "throttle_time_ms": 0,
                "api_keys": [{"api_key": k, "min_version": lo, "max_version": hi} for k, lo, hi in self._versions()],
                "supported_features": [{"name": n, "min_version": lo, "max_version": hi}
                                       for n, (lo, hi) in sorted(kraft_mode.supported_features().items())]}

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
            if key == ApiKey.FETCH_SNAPSHOT:
                return {"throttle_time_ms": 0, "error_code": code, "topics": []}
            return {"error_code": code, "topics": []}
        source = (msg.replica_id if isinstance(msg, (m.VoteRequest, m.FetchRequest, m.FetchSnapshotRequest))
                  else msg.leader_id)
        if key == ApiKey.FETCH:
            parts = (body.get("topics") or [{}])[0].get("partitions") or [{}]
            self.driver.saw_replica(msg.replica_id, parts[0].get("replica_directory_id") or m.ZERO_UUID)
        if isinstance(msg, m.BeginQuorumEpochRequest):
            for ep in body.get("leader_endpoints") or ():
                if ep["name"] == self.listener_name:
                    self.driver.learned(msg.leader_id, ep["host"], ep["port"])
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
        elif isinstance(msg, m.FetchSnapshotResponse) and isinstance(msg.unaligned_records, m.SnapshotChunk):
            records = self.driver.read_snapshot(msg.unaligned_records)
        return to_wire_response(key, msg, records,
                                self.driver.leader_endpoint() if isinstance(msg, m.FetchResponse) else ())

    def _voter_change(self, key: int, version: int, body: dict):
        """AddRaftVoter, RemoveRaftVoter, UpdateRaftVoter (KIP-853), as Kafka's KafkaRaftClient
        answers them: another cluster's with INCONSISTENT_CLUSTER_ID, an endpoint missing for
        the controller listener with INVALID_REQUEST, the rest decided by the Raft leader (not
        the leader: NOT_LEADER_OR_FOLLOWER) and answered once the new voter set is committed, or
        REQUEST_TIMED_OUT after the request's timeout."""
        cluster_id = body.get("cluster_id")
        listeners = {ln["name"]: (ln["host"], ln["port"]) for ln in body.get("listeners") or ()}
        vid, vdir = body["voter_id"], body["voter_directory_id"]
        record = None
        if cluster_id is not None and cluster_id != self.cluster_id:
            code, why = errors.E_INCONSISTENT_CLUSTER_ID, None
        elif key != ApiKey.REMOVE_RAFT_VOTER and self.listener_name not in listeners:
            code, why = errors.E_INVALID_REQUEST, (f"the voter's endpoints {sorted(listeners)} name no endpoint for "
                                                   f"the controller listener {self.listener_name}")
        elif key != ApiKey.REMOVE_RAFT_VOTER and vdir == m.ZERO_UUID:
            code, why = errors.E_INVALID_REQUEST, "the voter's directory id is missing"
        elif key == ApiKey.UPDATE_RAFT_VOTER and not (
                body["k_raft_version_feature"]["min_supported_version"] <= self.driver.kraft_version
                <= body["k_raft_version_feature"]["max_supported_version"]):
            code, why = errors.E_INVALID_REQUEST, f"the voter does not support kraft.version {self.driver.kraft_version}"
        else:
            code, why = 0, None
        if key == ApiKey.UPDATE_RAFT_VOTER:
            def shape(code_: int, _why=None) -> dict:
                leader = self.driver.node.leader
                where = self.driver.address(leader.leader_id) if leader.leader_id >= 0 else None
                return {"throttle_time_ms": 0, "error_code": code_, "current_leader": {
                    "leader_id": leader.leader_id, "leader_epoch": leader.leader_epoch,
                    "host": where[0] if where else "", "port": where[1] if where else -1}}
        else:
            def shape(code_: int, why_=None) -> dict:
                return {"throttle_time_ms": 0, "error_code": code_,
                        "error_message": why_ if code_ else None}
        if code:
            return shape(code, why)
        if key == ApiKey.ADD_RAFT_VOTER:
            msg = m.AddRaftVoterRequest(cluster_id, vid, body["timeout_ms"], vdir)
        elif key == ApiKey.REMOVE_RAFT_VOTER:
            msg = m.RemoveRaftVoterRequest(cluster_id, vid, vdir)
        else:
            msg = m.UpdateRaftVoterRequest(cluster_id, body["current_leader_epoch"], vid, vdir)
        if key != ApiKey.REMOVE_RAFT_VOTER:
            record = voters_record(vid, vdir, [(n, h, p) for n, (h, p) in listeners.items()])
            feature = body.get("k_raft_version_feature")
            if feature:
                record["k_raft_version_feature"] = dict(feature)
        fut = self.driver.voter_change(-1, msg, record)
        timeout = body.get("timeout_ms") or self.config["controller.quorum.request.timeout.ms"] * 15

        async def answer() -> dict:
            try:
                out = await asyncio.wait_for(asyncio.shield(fut), timeout / 1000)
            except asyncio.TimeoutError:
                return shape(errors.E_REQUEST_TIMED_OUT, "the new voter set was not committed in time")
            log.info("[RaftManager id=%d] %s of voter %d (directory %s): %s", self.broker_id, type(msg).__name__,
                     vid, uuid_string(vdir), errors.error_name(out.error_code) if out.error_code else "done")
            return shape(out.error_code, getattr(out, "error_message", None))
        return answer()

    def _envelope(self, key: int, version: int, body: dict):
        """A request a Kafka broker forwards (KIP-590): the inner request decided as if sent here,
        its answer returned inside. Samsa's brokers send the controller requests themselves."""
        inner = bytes(body.get("request_data") or b"")
        try:
            api_key, inner_version, correlation_id = api.peek_request_header(inner)
            entry = self._handlers.get(api_key)
            if entry is None or entry[0] != self._controller_write or not entry[1] <= inner_version <= entry[2]:
                return {"error_code": errors.E_UNSUPPORTED_VERSION, "response_data": None}
            _, inner_body = api.decode_request(inner)
        except (InvalidRequestError, KeyError, ValueError):
            return {"error_code": errors.E_INVALID_REQUEST, "response_data": None}

        async def answer() -> dict:
            out = await self._controller_write(api_key, inner_version, inner_body)
            frame = b"".join(bytes(c) for c in api.encode_response(api_key, inner_version, correlation_id, out))
            return {"error_code": 0, "response_data": frame[4:]}    # without its size prefix
        return answer()

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
                            for i, h, p in self.driver.voter_endpoints()]
        return out

    def _describe_cluster(self, key: int, version: int, body: dict) -> dict:
        voters = self.driver.voter_endpoints()
        leader = self.driver.node.leader_id
        return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "endpoint_type": CONTROLLER,
                "cluster_id": self.cluster_id,
                "controller_id": leader if leader >= 0 else self.broker_id,
                "brokers": [{"broker_id": i, "host": h, "port": p, "rack": None} for i, h, p in voters],
                "cluster_authorized_operations": -2147483648}

    # ---- the metadata image: the committed records, applied in order

    def _committed(self, high_watermark: int) -> None:
        changes = Changes()
        image = self.image
        while image.offset + 1 < high_watermark:
            start = image.offset + 1
            buf = self.driver.log.read(start, high_watermark, 1 << 20)
            progressed = False
            for offset, epoch, kind, name, _version, data in read_metadata_log(buf):
                if offset < start:
                    continue
                if offset >= high_watermark:
                    break
                if kind is None:
                    image.apply(offset, name, data, changes)
                else:
                    image.offset = offset
                self._applied_epoch = epoch
                progressed = True
            if not progressed:
                break
            self._bytes_since_snapshot += len(buf)
        self._maybe_snapshot()
        if not self.caught_up.is_set() and self.driver.node.leader.leader_id >= 0:
            self.caught_up.set()
        if changes:
            for fn in list(self.subscribers):
                try:
                    fn(changes)
                except Exception:
                    log.exception("[MetadataNode id=%d] a subscriber of the metadata image failed", self.broker_id)
        self._wake_waiters()

    def _wake_waiters(self) -> None:
        """Those waiting in :meth:`applied` for an offset the image now holds."""
        waiting, self._waiters = self._waiters, []
        for offset, fut in waiting:
            if offset <= self.image.offset:
                if not fut.done():
                    fut.set_result(None)
            else:
                self._waiters.append((offset, fut))

    # ---- snapshots (KIP-630): the image written down, the log before it let go

    def _load_snapshot(self, path: Path) -> Changes:
        """The image as ``path`` has it (the log continues from its end offset); what changed."""
        from samsa.storage.kraft import decode_snapshot
        end, _, epoch = path.name.split(".")[0].partition("-")
        before = set(self.image.topics)
        self.image.reset()
        changes = Changes(brokers=True, broker_configs=True, features=True, acls=True, entities=True)
        snap = decode_snapshot(path.read_bytes())
        for name, _version, data in snap.records:
            self.image.apply(self.image.offset, name, data, changes)
        self.image.offset = int(end) - 1
        self._applied_epoch = int(epoch)
        changes.topics = set(self.image.topics)
        changes.removed = before - changes.topics
        log.info("[MetadataNode id=%d] loaded snapshot %s: %d records, %d topics, %d brokers", self.broker_id,
                 path.name, len(snap.records), len(self.image.topics), len(self.image.brokers))
        return changes

    def _snapshot_installed(self, path: Path) -> None:
        changes = self._load_snapshot(path)
        self._bytes_since_snapshot = 0
        self._last_snapshot_ms = _now()
        for fn in list(self.subscribers):
            fn(changes)

    def _maybe_snapshot(self) -> None:
        c = self.config
        interval = c["metadata.log.max.snapshot.interval.ms"]
        due = self._bytes_since_snapshot >= c["metadata.log.max.record.bytes.between.snapshots"] or (
            interval > 0 and self._bytes_since_snapshot > 0 and _now() - self._last_snapshot_ms >= interval)
        end = self.image.offset + 1
        latest = self.driver.log.latest_snapshot()
        if not due or end <= 0 or (latest is not None and latest[0].end_offset >= end):
            return
        sid = m.SnapshotId(end, self._applied_epoch)
        voters = (list(self.driver.voter_sets.at(end).values()) or None) if self.driver.dynamic else None
        path = write_snapshot(self.driver.log.dir, Snapshot(records=snapshot_records(self.image),
                                                            kraft_version=self.driver.kraft_version, voters=voters),
                              end, self._applied_epoch)
        self._bytes_since_snapshot = 0
        self._last_snapshot_ms = _now()
        log.info("[MetadataNode id=%d] wrote snapshot %s of the metadata at offset %d", self.broker_id, path.name,
                 end - 1)
        self.driver.snapshot_taken(sid, path.stat().st_size)

    async def applied(self, offset: int, timeout_ms: int) -> None:
        """Until the image holds ``offset`` (TimeoutError after ``timeout_ms``)."""
        if self.image.offset >= offset:
            return
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append((offset, fut))
        await asyncio.wait_for(fut, timeout_ms / 1000)

    # ---- the active controller

    @property
    def leader_id(self) -> int:
        return self.driver.node.leader.leader_id

    def _leadership(self) -> None:
        node = self.driver.node
        if self.observer or node.state != RaftState.LEADER:
            self._deactivate()
            return
        if self.active_epoch != node.epoch:
            self._deactivate()
            self._active_tasks.append(asyncio.ensure_future(self._activate(node.epoch)))

    def _deactivate(self) -> None:
        if self.active_epoch >= 0:
            log.info("[QuorumController id=%d] no longer the active controller (epoch %d)", self.broker_id,
                     self.active_epoch)
        self.active_epoch = -1
        self._unapplied = None
        for t in self._active_tasks:
            t.cancel()
        self._active_tasks = []

    async def _activate(self, epoch: int) -> None:
        """Leader in ``epoch``: active once everything before this epoch is committed and applied."""
        end = self.driver.log.log.log_end_offset
        while self.driver.high_watermark < end or self.image.offset + 1 < end:
            await asyncio.sleep(0.01)
            if self.driver.node.state != RaftState.LEADER or self.driver.node.epoch != epoch:
                return
        self.logic.became_active(_now())
        self.active_epoch = epoch
        log.info("[QuorumController id=%d] active controller in epoch %d, metadata at offset %d", self.broker_id,
                 epoch, self.image.offset)
        task = asyncio.ensure_future(self._housekeeping(epoch))
        self._active_tasks.append(task)

    async def _housekeeping(self, epoch: int) -> None:
        """Fencing brokers whose sessions ended; leadership back to preferred replicas."""
        c = self.config
        rebalance_every = c["leader.imbalance.check.interval.seconds"] * 1000
        next_rebalance = _now() + rebalance_every
        while self.active_epoch == epoch:
            await asyncio.sleep(0.25)
            try:
                d = await self._write(lambda: self.logic.fence_expired(_now()))
                if d is not None and d.answer.get("fenced"):
                    log.info("[QuorumController id=%d] fenced broker(s) %s: no heartbeat for broker.session.timeout.ms "
                             "(%d ms)", self.broker_id, d.answer["fenced"], c["broker.session.timeout.ms"])
                if c["auto.leader.rebalance.enable"] and _now() >= next_rebalance:
                    next_rebalance = _now() + rebalance_every
                    await self._write(lambda: self.logic.rebalance(c["leader.imbalance.per.broker.percentage"]))
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("[QuorumController id=%d] housekeeping failed", self.broker_id)

    async def _write(self, decide: Callable[[], Decision]) -> Decision | None:
        """One decision from the image, its records committed and applied; None when this node
        is not the active controller (any more)."""
        async with self._write_lock:
            epoch = self.active_epoch
            if epoch < 0:
                return None
            wait_ms = self.config["controller.quorum.request.timeout.ms"] * 2
            if self._unapplied is not None:
                # An earlier write of this epoch timed out before it committed: deciding on an image
                # without it could contradict it (a zombie leader's ISR applied after its leader moved).
                try:
                    await self.applied(self._unapplied, wait_ms)
                except asyncio.TimeoutError:
                    return None
                if self.active_epoch != epoch:
                    return None
                self._unapplied = None
            d = decide()
            if d.records:
                where = self.driver.append([mr.encode(n, v, data) for n, v, data in d.records])
                if not isinstance(where, m.Appended):
                    return None
                try:
                    await self.applied(where.last_offset, wait_ms)
                except asyncio.TimeoutError:
                    self._unapplied = where.last_offset
                    return None
                if self.active_epoch != epoch:
                    # Deposed while waiting: what was applied at those offsets may be a new leader's
                    # records that replaced ours, so do not answer as though ours committed.
                    return None
                d.offset = where.last_offset
            return d

    def _controller_write(self, key: int, version: int, body: dict):
        logic = self.logic
        now = _now()
        decide = {
            ApiKey.BROKER_REGISTRATION: lambda: logic.register(body, now),
            ApiKey.BROKER_HEARTBEAT: lambda: logic.heartbeat(body, now),
            ApiKey.ALTER_PARTITION: lambda: logic.alter_partition(body),
            ApiKey.CREATE_TOPICS: lambda: logic.create_topics(body),
            ApiKey.DELETE_TOPICS: lambda: logic.delete_topics(body),
            ApiKey.CREATE_PARTITIONS: lambda: logic.create_partitions(body),
            ApiKey.INCREMENTAL_ALTER_CONFIGS: lambda: logic.alter_configs(body),
            ApiKey.ELECT_LEADERS: lambda: logic.elect_leaders(body),
            ApiKey.ALTER_PARTITION_REASSIGNMENTS: lambda: logic.reassign(body),
            ApiKey.ALLOCATE_PRODUCER_IDS: lambda: logic.allocate_producer_ids(body),
            ApiKey.CREATE_ACLS: lambda: logic.create_acls(body),
            ApiKey.DELETE_ACLS: lambda: logic.delete_acls(body),
            ApiKey.ALTER_CLIENT_QUOTAS: lambda: logic.alter_client_quotas(body),
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS: lambda: logic.alter_scram(body),
            ApiKey.UPDATE_FEATURES: lambda: logic.update_features(body, self.broker_id),
        }[key]

        async def answer() -> dict:
            d = await self._write(decide)
            if d is None:
                return _refusal(key, body, errors.E_NOT_CONTROLLER)
            if key == ApiKey.BROKER_REGISTRATION and not d.answer["error_code"]:
                logic.registered(body["broker_id"], d.offset)
                log.info("[QuorumController id=%d] registered broker %d with epoch %d", self.broker_id,
                         body["broker_id"], d.answer["broker_epoch"])
            return d.answer
        return answer()


def _refusal(key: int, body: dict, code: int) -> dict:
    """The answer of a controller request refused as a whole (NOT_CONTROLLER), in its API's shape."""
    if key == ApiKey.BROKER_REGISTRATION:
        return {"throttle_time_ms": 0, "error_code": code, "broker_epoch": -1}
    if key == ApiKey.BROKER_HEARTBEAT:
        return {"throttle_time_ms": 0, "error_code": code, "is_caught_up": False, "is_fenced": True,
                "should_shut_down": False}
    if key == ApiKey.CREATE_TOPICS:
        return {"throttle_time_ms": 0, "topics": [
            {"name": t["name"], "topic_id": bytes(16), "error_code": code, "error_message": None, "num_partitions": -1,
             "replication_factor": -1, "configs": []} for t in body["topics"]]}
    if key == ApiKey.DELETE_TOPICS:
        names = body.get("topic_names") or [t["name"] for t in body.get("topics") or []]
        return {"throttle_time_ms": 0, "responses": [{"name": n, "topic_id": bytes(16), "error_code": code,
                                                      "error_message": None} for n in names]}
    if key == ApiKey.CREATE_PARTITIONS:
        return {"throttle_time_ms": 0, "results": [{"name": t["name"], "error_code": code, "error_message": None}
                                                   for t in body["topics"]]}
    if key == ApiKey.INCREMENTAL_ALTER_CONFIGS:
        return {"throttle_time_ms": 0, "responses": [
            {"error_code": code, "error_message": None, "resource_type": r["resource_type"],
             "resource_name": r["resource_name"]} for r in body["resources"]]}
    if key == ApiKey.ALLOCATE_PRODUCER_IDS:
        return {"throttle_time_ms": 0, "error_code": code, "producer_id_start": -1, "producer_id_len": 0}
    if key == ApiKey.ELECT_LEADERS:
        return {"throttle_time_ms": 0, "error_code": code, "replica_election_results": []}
    if key == ApiKey.ALTER_PARTITION_REASSIGNMENTS:
        return {"throttle_time_ms": 0, "error_code": code, "error_message": None, "responses": []}
    if key == ApiKey.CREATE_ACLS:
        return {"throttle_time_ms": 0, "results": [{"error_code": code, "error_message": None}
                                                   for _ in body["creations"]]}
    if key == ApiKey.DELETE_ACLS:
        return {"throttle_time_ms": 0, "filter_results": [{"error_code": code, "error_message": None,
                                                           "matching_acls": []} for _ in body["filters"]]}
    if key == ApiKey.ALTER_CLIENT_QUOTAS:
        return {"throttle_time_ms": 0, "entries": [{"error_code": code, "error_message": None, "entity": e["entity"]}
                                                   for e in body["entries"]]}
    if key == ApiKey.ALTER_USER_SCRAM_CREDENTIALS:
        users = dict.fromkeys(x["name"] for x in [*body["deletions"], *body["upsertions"]])
        return {"throttle_time_ms": 0, "results": [{"user": u, "error_code": code, "error_message": None}
                                                   for u in users]}
    if key == ApiKey.UPDATE_FEATURES:
        return {"throttle_time_ms": 0, "error_code": code, "error_message": None}
    return {"throttle_time_ms": 0, "error_code": code, "topics": []}        # AlterPartition
