"""Distributed mode: configs, offsets and statuses in compacted topics; connectors and tasks
spread over the workers of one ``group.id`` by the group protocol (:mod:`samsa.connect.group`).

One thread, the herder's, alone changes the Worker and this worker's assignment, as Kafka's
DistributedHerder: REST writes, connectors asking for new task configs, records read from the
config topic and rebalances all become work on its queue or flags it looks at each turn. The
config topic's reader only updates the snapshot (``configs``, ``task_config``, ``target``)
and tells the herder what changed; the group member (heartbeats on the client's loop) only
records the assignment a rebalance gave.

Config topic records (Kafka's keys and JSON): ``connector-<name>`` ``{"properties": {...}}``,
``task-<name>-<n>`` ``{"properties": {...}}``, ``commit-<name>`` ``{"tasks": n}`` (the task
configs before it take effect together), ``target-state-<name>`` ``{"state": ..., "state.v2":
...}`` and ``restart-connector-<name>``. Only the group's leader writes them: a follower
answers a REST write with :class:`NotLeaderException` and the REST layer forwards the request
to the leader's URL (from the assignment); a connector's owner sends new task configs to the
leader's ``PUT /connectors/{name}/tasks``. With ``connect.protocol=sessioned`` (KIP-507) the
leader keeps a session key in the config topic (``session-key``, renewed every
``inter.worker.key.ttl.ms``) and that request is signed with it (HMAC of the body).
"""

from __future__ import annotations

import base64
import concurrent.futures
import hashlib
import hmac
import json
import secrets
import logging
import threading
import time
from collections import deque
from typing import Any, Callable

from samsa.client.admin import Admin
from samsa.client.loop import LoopThread
from samsa.client.metadata import ClusterMetadata
from samsa.connect import rest_client
from samsa.connect.config import integer
from samsa.connect.errors import (BadRequestException, ConflictException, ConnectException, ConnectRestException,
                                  NotAssignedException, NotLeaderException)
from samsa.connect.group import (COMPATIBLE, CONFIG_MISMATCH, EAGER, SESSIONED, ConnectAssignment, ConnectMember,
                                 IncrementalAssignor, Task, WorkerState)
from samsa.connect.herder import Herder
from samsa.connect.status import FAILED, KafkaStatusStore, TargetState
from samsa.connect.storage.kafka_log import KafkaBasedLog, ensure_topic
from samsa.connect.storage.kafka_offsets import KafkaOffsetStore
from samsa.connect.worker import Worker

log = logging.getLogger(__name__)

REQUEST_TIMEOUT = 90.0  # Kafka's REST request timeout
RECONFIGURE_BACKOFF = 0.25
HMACS = {"HmacSHA1": hashlib.sha1, "HmacSHA224": hashlib.sha224, "HmacSHA256": hashlib.sha256,
         "HmacSHA384": hashlib.sha384, "HmacSHA512": hashlib.sha512}


def _json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def target_state_record(state: TargetState) -> dict[str, str]:
    """Kafka's value: STOPPED (KIP-875) is ``state.v2``, with ``state`` PAUSED for older workers."""
    if state is TargetState.STOPPED:
        return {"state": TargetState.PAUSED.value, "state.v2": state.value}
    return {"state": state.value}


def _target_state_of(value: dict[str, Any] | None) -> TargetState:
    raw = (value or {}).get("state.v2") or (value or {}).get("state") or TargetState.STARTED.value
    try:
        return TargetState(raw)
    except ValueError:
        log.warning("Unknown target state %r in the config topic: taken as STARTED", raw)
        return TargetState.STARTED


class _ConfigEvents:
    """What the config topic's reader saw since the herder last looked (Kafka's ConfigUpdateListener)."""

    def __init__(self) -> None:
        self.connectors: set[str] = set()          # config written or removed
        self.tasks: set[str] = set()               # task configs committed
        self.targets: dict[str, TargetState | None] = {}  # name → the state before
        self.restarts: list[tuple[str, bool, bool]] = []
        self.membership = False                    # the set of connectors changed


class DistributedHerder(Herder):
    def __init__(self, worker_config: dict[str, str], worker_id: str):
        for key in ("group.id", "config.storage.topic", "offset.storage.topic", "status.storage.topic"):
            if not worker_config.get(key):
                raise ValueError(f'Missing required configuration "{key}" which has no default value.')
        protocol = (worker_config.get("connect.protocol") or SESSIONED).strip().lower()
        if protocol not in (EAGER, COMPATIBLE, SESSIONED):
            raise ValueError(f"Invalid value {protocol} for configuration connect.protocol: String must be one of: "
                             f"eager, compatible, sessioned")
        self.protocol = protocol
        w = worker_config
        self.key_ttl_ms = integer(w, "inter.worker.key.ttl.ms", 3600000)
        self.key_algorithm = w.get("inter.worker.key.generation.algorithm") or "HmacSHA256"
        self.signature_algorithm = w.get("inter.worker.signature.algorithm") or "HmacSHA256"
        self.verification_algorithms = [a.strip() for a in (w.get("inter.worker.verification.algorithms")
                                                            or "HmacSHA256").split(",") if a.strip()]
        for key, names in (("inter.worker.key.generation.algorithm", [self.key_algorithm]),
                           ("inter.worker.signature.algorithm", [self.signature_algorithm]),
                           ("inter.worker.verification.algorithms", self.verification_algorithms)):
            for name in names:
                if name not in HMACS:
                    raise ValueError(f"Invalid value {name} for configuration {key}: Not a supported algorithm "
                                     f"(one of {', '.join(HMACS)})")
        bits = w.get("inter.worker.key.size")
        self.key_bytes = int(bits) // 8 if bits else HMACS[self.key_algorithm]().digest_size
        self.session_key: tuple[bytes, str, int] | None = None  # key, algorithm, creation (ms)
        self.offset_store = KafkaOffsetStore()
        self.status_store = KafkaStatusStore(lambda k, v: self.status_log.send(k, v))
        super().__init__(Worker(worker_id, worker_config, self.offset_store, self.status_store), worker_config)
        self.url = f"http://{worker_id}/"
        self.staged: dict[str, dict[int, dict[str, str]]] = {}
        self.config_offset = -1
        self.applied = threading.Condition(self.lock)
        self.events = _ConfigEvents()
        self.assignor = IncrementalAssignor(integer(worker_config, "scheduled.rebalance.max.delay.ms", 300000),
                                            time.monotonic)
        self.loop: LoopThread | None = None
        self.member: ConnectMember | None = None
        # the herder thread's own state
        self.generation = -1
        self.leader_url: str | None = None
        self.is_leader = False
        self.started_connectors: set[str] = set()
        self.started_tasks: set[Task] = set()
        self.scheduled_rebalance = 0.0
        self.requests: deque[tuple[Callable[[], Any], concurrent.futures.Future]] = deque()
        self.wakeup = threading.Condition()
        self.woken = False
        self.stopping = False
        self.thread = threading.Thread(target=self._run, name=f"DistributedHerder-{worker_id}", daemon=True)
        self.forwarder = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="connect-forward")

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> None:
        w = self.worker_config
        client = {"bootstrap.servers": w["bootstrap.servers"]}
        with Admin(client) as admin:
            ensure_topic(admin, w["config.storage.topic"], 1, integer(w, "config.storage.replication.factor", 3),
                         {"cleanup.policy": "compact"})
            ensure_topic(admin, w["offset.storage.topic"], integer(w, "offset.storage.partitions", 25),
                         integer(w, "offset.storage.replication.factor", 3), {"cleanup.policy": "compact"})
            ensure_topic(admin, w["status.storage.topic"], integer(w, "status.storage.partitions", 5),
                         integer(w, "status.storage.replication.factor", 3), {"cleanup.policy": "compact"})
        self.offset_log = KafkaBasedLog(w["offset.storage.topic"], client, self.offset_store.on_record)
        self.status_log = KafkaBasedLog(w["status.storage.topic"], client, self.status_store.on_record)
        self.config_log = KafkaBasedLog(w["config.storage.topic"], client, self._on_config)
        self.offset_store.send = lambda k, v: self.offset_log.send(k, v)
        self.offset_store.flush = lambda: self.offset_log.flush()
        for kl in (self.offset_log, self.status_log, self.config_log):
            kl.start()
        self.events = _ConfigEvents()  # what was read before joining is the starting point, not a change
        self.loop = LoopThread("connect-group")
        cluster = ClusterMetadata(w["bootstrap.servers"], client_id=f"connect-{self.worker.worker_id}")
        self.member = ConnectMember(
            cluster, w["group.id"], self.url, self.protocol,
            session_timeout_ms=integer(w, "session.timeout.ms", 10000),
            rebalance_timeout_ms=integer(w, "rebalance.timeout.ms", 60000),
            heartbeat_interval_ms=integer(w, "heartbeat.interval.ms", 3000),
            request_timeout_ms=integer(w, "request.timeout.ms", 40000),
            retry_backoff_ms=integer(w, "retry.backoff.ms", 100),
            config_offset=lambda: self.config_offset, assign=self._assign, wake=self._wake)
        self.thread.start()

    def stop(self) -> None:
        self.stopping = True
        self._wake()
        if self.thread.is_alive():
            self.thread.join(120)
        self.forwarder.shutdown(wait=False)
        for kl in (getattr(self, n, None) for n in ("config_log", "status_log", "offset_log")):
            if kl is not None:
                kl.stop()

    def _wake(self) -> None:
        with self.wakeup:
            self.woken = True
            self.wakeup.notify_all()

    # ---------------------------------------------------------------- the herder thread

    def _run(self) -> None:
        try:
            while not self.stopping:
                try:
                    self._tick()
                except Exception:  # noqa: BLE001 - one bad turn must not end the worker
                    log.exception("Uncaught exception in the herder's work thread")
                    time.sleep(0.5)
        finally:
            self._halt()

    def _tick(self) -> None:
        member, loop = self.member, self.loop
        assert member is not None and loop is not None
        if member.pending is not None:
            self._handle_assignment()
        if member.needs_join():
            if member.eager and (self.started_connectors or self.started_tasks):
                log.info("Eager rebalance: stopping every connector and task before joining")
                self._stop_work(set(self.started_connectors), set(self.started_tasks))
                member.current = ConnectAssignment()
            loop.run(member.ensure_active(0.25))
        if member.pending is not None:
            self._handle_assignment()
        stable = not member.needs_join()
        if stable:
            if self.scheduled_rebalance and time.monotonic() >= self.scheduled_rebalance:
                self.scheduled_rebalance = 0.0
                member.request_rejoin("the scheduled rebalance delay expired")
            self._handle_config_events()
            self._renew_session_key()
            self._run_requests()
        with self.wakeup:
            if not self.woken and not self.stopping:
                wait = 0.25 if not stable else 1.0
                if self.scheduled_rebalance:
                    wait = min(wait, max(self.scheduled_rebalance - time.monotonic(), 0.0))
                self.wakeup.wait(wait)
            self.woken = False

    def _halt(self) -> None:
        """Stop everything this worker runs, leave the group (the others take the work at once)."""
        try:
            self._stop_work(set(self.started_connectors), set(self.started_tasks))
            self.worker.stop()
        except Exception:  # noqa: BLE001
            log.exception("Stopping the worker")
        if self.loop is not None and self.member is not None:
            try:
                self.loop.run(self.member.leave("the worker is stopping"), 10)
                self.loop.run(self.member.close(), 10)
                self.loop.run(self.member.cluster.aclose(), 10)
            except Exception:  # noqa: BLE001
                log.debug("Leaving the group", exc_info=True)
            self.loop.stop()
        while self.requests:
            _, future = self.requests.popleft()
            future.set_exception(ConnectException("The worker is stopping"))

    def _submit(self, fn: Callable[[], Any]) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        if self.stopping:
            future.set_exception(ConnectException("The worker is stopping"))
            return future
        self.requests.append((fn, future))
        self._wake()
        return future

    def _call(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` on the herder thread and wait for its result (REST calls)."""
        if threading.current_thread() is self.thread:
            return fn()
        try:
            return self._submit(fn).result(REQUEST_TIMEOUT)
        except concurrent.futures.TimeoutError:
            raise TimeoutError("Request timed out") from None  # Kafka's 500

    def _run_requests(self) -> None:
        while self.requests and not (self.member is not None and self.member.needs_join()):
            fn, future = self.requests.popleft()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn())
            except BaseException as e:  # noqa: BLE001 - the caller gets it
                future.set_exception(e)

    # ---------------------------------------------------------------- the config topic (reader thread)

    def _task_counts(self) -> dict[str, int]:
        return {n: len(self.task_config.get(n, [])) for n in self.configs}

    def _on_config(self, record: Any) -> None:
        """Apply one record to the snapshot and note the change for the herder thread."""
        key = (record.key or b"").decode()
        value = json.loads(record.value) if record.value else None
        ev = self.events
        with self.lock:
            self.config_offset = record.offset
            if key.startswith("connector-"):
                name = key[len("connector-"):]
                if value is None:
                    existed = name in self.configs
                    for d in (self.configs, self.task_config, self.target, self.staged):
                        d.pop(name, None)
                    self.status_store.forget(name)
                    ev.membership |= existed
                    ev.connectors.add(name)
                else:
                    ev.membership |= name not in self.configs
                    if self.configs.get(name) != value["properties"]:
                        ev.connectors.add(name)
                    self.configs[name] = value["properties"]
                    self.target.setdefault(name, TargetState.STARTED)
            elif key.startswith("task-"):
                name, _, n = key[len("task-"):].rpartition("-")
                if value is not None and n.isdigit():
                    self.staged.setdefault(name, {})[int(n)] = value["properties"]
            elif key.startswith("commit-"):
                name = key[len("commit-"):]
                staged = self.staged.pop(name, {})
                count = int((value or {}).get("tasks", 0))
                self.task_config[name] = [staged[i] for i in range(count) if i in staged]
                ev.tasks.add(name)
            elif key.startswith("target-state-"):
                name = key[len("target-state-"):]
                if value is None:
                    self.target.pop(name, None)
                else:
                    state = _target_state_of(value)
                    previous = self.target.get(name)
                    self.target[name] = state
                    if previous is not state:
                        ev.targets.setdefault(name, previous)
            elif key.startswith("restart-connector-") and value is not None:
                ev.restarts.append((key[len("restart-connector-"):], bool(value.get("include-tasks")),
                                    bool(value.get("only-failed"))))
            elif key == "session-key" and value is not None:
                self.session_key = (base64.b64decode(value["key"]), str(value.get("algorithm") or "HmacSHA256"),
                                    int(value.get("creation-timestamp") or 0))
            self.applied.notify_all()
        self._wake()

    def _take_events(self) -> _ConfigEvents:
        with self.lock:
            ev, self.events = self.events, _ConfigEvents()
        return ev

    def _handle_config_events(self) -> None:
        ev = self._take_events()
        member = self.member
        assert member is not None
        owned_c, owned_t = set(member.current.connectors), set(member.current.tasks)
        for name in sorted(ev.connectors):
            with self.lock:
                exists = name in self.configs
            if not exists:  # deleted: stop it now; the next assignment no longer has it
                self._stop_work({name} & owned_c, {t for t in owned_t if t[0] == name})
                self._drop_from_assignment(name)
            elif name in owned_c:
                self._start_connector(name)
        for name in sorted(ev.tasks):
            # new task configs: the tasks stop here and start again after the rebalance that follows
            self._stop_work(set(), {t for t in self.started_tasks if t[0] == name})
            member.request_rejoin(f"the task configs of connector {name} changed")
        if ev.membership:
            member.request_rejoin("the set of connectors changed")
        for name, previous in ev.targets.items():
            self._apply_target(name, previous)
        for name, include_tasks, only_failed in ev.restarts:
            self._restart_owned(name, include_tasks, only_failed)

    def _drop_from_assignment(self, name: str) -> None:
        cur = self.member.current  # type: ignore[union-attr]
        cur.connectors = [c for c in cur.connectors if c != name]
        cur.tasks = [t for t in cur.tasks if t[0] != name]

    # ---------------------------------------------------------------- writing the config topic (leader)

    def _require_leader(self, what: str) -> None:
        if not self.is_leader:
            raise NotLeaderException(f"Cannot {what}: this worker is not the leader", self.leader_url)

    def _write(self, records: list[tuple[str, Any]]) -> None:
        """Write config records and wait until this worker has read them back."""
        futures = [self.config_log.send(k.encode(), None if v is None else _json(v)) for k, v in records]
        offset = max(f.result(30).offset for f in futures)
        with self.lock:
            if not self.applied.wait_for(lambda: self.config_offset >= offset, 30):
                raise TimeoutError("Timed out reading back the config topic")

    def write_connector_config(self, name: str, config: dict[str, str], allow_replace: bool) -> bool:
        def write() -> bool:
            self._require_leader("write connector configs")
            with self.lock:
                exists = name in self.configs
            if exists and not allow_replace:
                raise ConflictException(f"Connector {name} already exists")
            records: list[tuple[str, Any]] = [("connector-" + name, {"properties": config})]
            if not exists:
                records.insert(0, ("target-state-" + name, target_state_record(TargetState.STARTED)))
            self._write(records)
            return not exists
        return self._call(write)

    def write_delete(self, name: str) -> None:
        def write() -> None:
            self._require_leader("delete connector configs")
            self._config(name)
            with self.lock:
                tasks = len(self.task_config.get(name, []))
            self._write([("connector-" + name, None), ("target-state-" + name, None)])
            self.status_store.delete(name, tasks)
        self._call(write)

    def write_target_state(self, name: str, state: TargetState) -> None:
        def write() -> None:
            self._require_leader("change a connector's target state")
            self._config(name)
            records: list[tuple[str, Any]] = []
            if state is TargetState.STOPPED and self.task_config.get(name):
                records.append(("commit-" + name, {"tasks": 0}))  # a stopped connector has no tasks (KIP-875)
            records.append(("target-state-" + name, target_state_record(state)))
            self._write(records)
        self._call(write)

    def restart_connector(self, name: str, include_tasks: bool, only_failed: bool) -> dict[str, Any] | None:
        def write() -> None:
            self._require_leader("restart connectors")
            self._config(name)
            self._write([("restart-connector-" + name, {"include-tasks": include_tasks, "only-failed": only_failed})])
        self._call(write)
        return self.connector_status(name) if include_tasks or only_failed else None

    def restart_task(self, name: str, task: int) -> None:
        """The task's worker restarts it; another worker forwards the request to the leader, which knows it."""
        def restart() -> None:
            self.task_status(name, task)
            member = self.member
            assert member is not None
            if (name, task) in set(member.current.tasks):
                self._start_task(name, task)
            elif self.is_leader:
                raise NotAssignedException("Cannot restart task since it is not assigned to this member",
                                           self.assignor.owner_url((name, task)))
            else:
                raise NotLeaderException("Cannot restart task since it is not assigned to this member",
                                         self.leader_url)
        self._call(restart)

    def alter_offsets(self, name: str, offsets: list[dict[str, Any]] | None) -> str:
        def alter() -> str:
            self._require_leader("alter connector offsets")
            return Herder.alter_offsets(self, name, offsets)
        return self._call(alter)

    def put_task_configs(self, name: str, configs: list[dict[str, str]], signature: tuple[str, str] | None = None,
                         body: bytes = b"") -> None:
        """``PUT /connectors/{name}/tasks`` (between workers): the owner's new task configs, for the leader;
        signed with the session key when the group runs ``sessioned``."""
        if self.member is not None and self.member.sessioned:
            self._verify(signature, body)

        def write() -> None:
            self._require_leader("write task configs")
            self._config(name)
            self._write_task_configs(name, configs)
        self._call(write)

    def _verify(self, signature: tuple[str, str] | None, body: bytes) -> None:
        if signature is None:
            raise BadRequestException("Internal request missing required signature")
        algorithm, encoded = signature
        if algorithm not in self.verification_algorithms:
            raise BadRequestException(
                f"This worker does not support the '{algorithm}' key signing algorithm used by other workers. This "
                f"worker is currently configured to use: [{', '.join(self.verification_algorithms)}]. Check that all "
                f"workers' configuration files permit the same set of signature algorithms, and correct any "
                f"misconfigured worker and restart it.")
        key = self.session_key
        try:
            given = base64.b64decode(encoded, validate=True)
        except ValueError:
            given = b""
        if key is None or not hmac.compare_digest(hmac.new(key[0], body, HMACS[algorithm]).digest(), given):
            raise ConnectRestException(403, "Internal request contained invalid signature.")

    def _sign(self, body: bytes) -> dict[str, str]:
        key = self.session_key
        if key is None:
            raise ConnectException("no session key has been read yet")
        signature = hmac.new(key[0], body, HMACS[self.signature_algorithm]).digest()
        return {"X-Connect-Authorization": base64.b64encode(signature).decode(),
                "X-Connect-Request-Signature-Algorithm": self.signature_algorithm}

    def _renew_session_key(self) -> None:
        """The leader of a sessioned group writes a new key when there is none or it is older than its TTL."""
        member = self.member
        if member is None or not member.sessioned or not self.is_leader:
            return
        now = int(time.time() * 1000)
        if self.session_key is not None and self.session_key[2] + self.key_ttl_ms > now:
            return
        log.info("Writing a new session key (%s) to the config topic", self.key_algorithm)
        self._write([("session-key", {"key": base64.b64encode(secrets.token_bytes(self.key_bytes)).decode(),
                                      "algorithm": self.key_algorithm, "creation-timestamp": now})])

    def _write_task_configs(self, name: str, configs: list[dict[str, str]]) -> None:
        with self.lock:
            if self.task_config.get(name) == configs:
                return
        records: list[tuple[str, Any]] = [(f"task-{name}-{i}", {"properties": c}) for i, c in enumerate(configs)]
        records.append(("commit-" + name, {"tasks": len(configs)}))
        self._write(records)

    # ---------------------------------------------------------------- assignment

    def _assign(self, generation: int, leader: str, members: dict[str, WorkerState],
                version: int) -> dict[str, ConnectAssignment]:
        """The leader's assignment (on the group client's executor, while this worker's herder waits)."""
        self.config_log.read_to_end()
        with self.lock:
            connectors = sorted(self.configs)
            tasks = [(n, i) for n in connectors for i in range(len(self.task_config.get(n, [])))]
            offset = self.config_offset
        ahead = max((s.config_offset for s in members.values()), default=-1)
        if ahead > offset:
            log.warning("A member has read the config topic to offset %d, the leader only to %d: everyone joins again",
                        ahead, offset)
            return {m: ConnectAssignment(CONFIG_MISMATCH, leader, self.url, offset, version=version) for m in members}
        return self.assignor.assign(generation, leader, self.url, offset, connectors, tasks, members, version)

    def _handle_assignment(self) -> None:
        member = self.member
        assert member is not None and member.pending is not None
        assignment, generation = member.pending
        member.pending = None
        if assignment.error:
            log.warning("The leader could not assign (error %d): joining again", assignment.error)
            return
        self.generation = self.worker.generation = generation
        self.leader_url = assignment.leader_url or None
        self.is_leader = assignment.leader == member.member_id
        if self.config_offset < assignment.config_offset:
            self.config_log.read_to_end()
        revoked_c, revoked_t = set(assignment.revoked_connectors), set(assignment.revoked_tasks)
        connectors = (set(member.current.connectors) - revoked_c) | set(assignment.connectors)
        tasks = (set(member.current.tasks) - revoked_t) | set(assignment.tasks)
        log.info("Rebalance of generation %d (leader %s): added connectors %s and tasks %s, revoked connectors %s "
                 "and tasks %s%s", generation, assignment.leader_url, assignment.connectors, assignment.tasks,
                 sorted(revoked_c), sorted(revoked_t),
                 f", next rebalance in {assignment.delay_ms} ms" if assignment.delay_ms else "")
        if revoked_c or revoked_t:
            self._stop_work(revoked_c, revoked_t)
            member.request_rejoin("connectors or tasks were revoked")  # their new owners get them next round
        member.current = ConnectAssignment(0, assignment.leader, assignment.leader_url, assignment.config_offset,
                                           sorted(connectors), sorted(tasks))
        self.scheduled_rebalance = time.monotonic() + assignment.delay_ms / 1000 if assignment.delay_ms else 0.0
        self._handle_config_events()  # what changed meanwhile, before starting what is new
        for name in sorted(connectors - self.started_connectors):
            self._start_connector(name)
        for task in sorted(tasks - self.started_tasks):
            self._start_task(*task)

    def _stop_work(self, connectors: set[str], tasks: set[Task]) -> None:
        tasks = tasks & self.started_tasks
        self.worker.stop_tasks(sorted(tasks))
        self.started_tasks -= tasks
        for name in sorted(connectors & self.started_connectors):
            self.worker.stop_connector(name)
            self.started_connectors.discard(name)

    def _start_connector(self, name: str) -> None:
        with self.lock:
            config, target = self.configs.get(name), self.target.get(name, TargetState.STARTED)
        if config is None:
            return
        self.started_connectors.add(name)
        if not self.worker.start_connector(name, config, target, self._request_reconfigure):
            return
        if target is not TargetState.STOPPED:
            self._reconfigure(name)

    def _request_reconfigure(self, name: str) -> None:
        """A connector asks for new task configs (any thread): the herder thread does it."""
        self._submit(lambda: self._reconfigure(name))

    def _reconfigure(self, name: str) -> None:
        """Write the connector's task configs if they changed: the leader itself, others through it."""
        with self.lock:
            config = self.configs.get(name)
            old = self.task_config.get(name)
            target = self.target.get(name)
        if config is None or target is TargetState.STOPPED or name not in self.started_connectors:
            return
        configs = self.worker.task_configs(name, integer(config, "tasks.max", 1))
        if configs is None or configs == old:
            return
        if self.is_leader:
            self._write_task_configs(name, configs)
        else:
            self.forwarder.submit(self._forward_task_configs, name, configs, self.leader_url)

    def _forward_task_configs(self, name: str, configs: list[dict[str, str]], leader_url: str | None) -> None:
        try:
            if leader_url is None:
                raise ConnectException("no known leader")
            raw = json.dumps(configs).encode()
            headers = self._sign(raw) if self.member is not None and self.member.sessioned else None
            url = leader_url.rstrip("/") + f"/connectors/{name}/tasks?forward=true"
            status, body = rest_client.request("PUT", url, raw=raw, headers=headers)
            if status >= 300:
                raise ConnectException(f"{status} {body}")
        except Exception as e:  # noqa: BLE001 - try again shortly, as Kafka does
            log.warning("Sending the task configs of connector %s to the leader failed (%s): retrying", name, e)
            time.sleep(RECONFIGURE_BACKOFF)
            self._request_reconfigure(name)

    def _start_task(self, name: str, task: int) -> None:
        with self.lock:
            config, configs = self.configs.get(name), self.task_config.get(name, [])
            target = self.target.get(name, TargetState.STARTED)
        if config is None or task >= len(configs):
            return
        self.started_tasks.add((name, task))
        self.worker.start_task(name, task, config, configs[task], target)

    def _apply_target(self, name: str, previous: TargetState | None) -> None:
        with self.lock:
            state = self.target.get(name)
        member = self.member
        if state is None or member is None:
            return
        if state is TargetState.STOPPED or previous is TargetState.STOPPED:
            if name in member.current.connectors:
                self._start_connector(name)
            return
        if name in self.started_connectors:
            self.worker.set_connector_state(name, state)
        self.worker.set_task_states(name, state)

    def _restart_owned(self, name: str, include_tasks: bool, only_failed: bool) -> None:
        member = self.member
        assert member is not None
        if name in member.current.connectors:
            failed = (self.status_store.connector(name) or {}).get("state") == FAILED
            if not only_failed or failed:
                self._start_connector(name)
        if include_tasks:
            for n, t in list(member.current.tasks):
                if n == name and (not only_failed or (self.status_store.task(n, t) or {}).get("state") == FAILED):
                    self._start_task(n, t)

    # ---------------------------------------------------------------- for MirrorMaker and tests

    def wait_stable(self, timeout: float = 60) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.member is not None and not self.member.needs_join() and self.member.pending is None:
                return True
            time.sleep(0.1)
        return False
