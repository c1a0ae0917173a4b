"""How a broker takes part in its cluster: alone (the embedded default) or through ZooKeeper.

:class:`LocalCluster` is one broker that leads everything. :class:`ZooKeeperCluster`
registers the broker under ``/brokers/ids``, keeps a live view of brokers, topics and
partition states through ZooKeeper watches, applies every change to the broker (lead,
follow, stop hosting), keeps the ISR of the partitions it leads, and — while it holds
``/controller`` — elects leaders when brokers come and go, moves leadership back to the
preferred replicas and drives reassignments.

ZooKeeper calls of the background work run on one worker thread, in order, so a slow
ZooKeeper never stalls the broker's event loop; their results are applied on the loop.
The thread is a daemon: kazoo waits for ever for a ZooKeeper that is gone, and such a call
must not keep the process from exiting. Admin writes (create, delete, alter) are rare and
run inline.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from concurrent.futures import Future
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable

from samsa.broker_config import BrokerConfig
from samsa.cluster import controller as rules
from samsa.cluster.metadata import BrokerInfo, PartitionState, describe_error
from samsa.cluster.replica_manager import ReplicaManager
from samsa.protocol import errors

if TYPE_CHECKING:
    from kazoo.protocol.states import WatchedEvent

    from samsa.cluster.zookeeper import ZooKeeperMetadataStore

log = logging.getLogger(__name__)

Advertised = Callable[[], BrokerInfo]  # this broker's endpoint, as clients reach it


def _endpoint_list(me: BrokerInfo) -> list[str]:
    """Kafka's ``endpoints`` of /brokers/ids/<id>: NAME://host:port per advertised listener."""
    if not me.endpoints:
        return [f"PLAINTEXT://{me.host}:{me.port}"]
    return [f"{name}://{'[' + h + ']' if ':' in h else h}:{p}" for name, (h, p) in me.endpoints.items()]


class LocalCluster:
    """A single broker: alive alone, its own controller, leader of every partition."""

    replicated = False

    def __init__(self, config: BrokerConfig, replicas: ReplicaManager, advertised: Advertised):
        self.broker_id = config.broker_id
        self.replicas = replicas
        self.advertised = advertised

    async def start(self) -> None:
        for topic in list(self.replicas.cache.topics.values()):
            self.replicas.apply_topic(topic)

    def alive_brokers(self) -> list[BrokerInfo]:
        return [self.advertised()]

    def broker_info(self, broker_id: int) -> BrokerInfo | None:
        return self.advertised() if broker_id == self.broker_id else None

    @property
    def controller_id(self) -> int:
        return self.broker_id

    async def elect_leaders(self, partitions: list[tuple[str, int]], preferred: bool) -> dict[tuple[str, int], int]:
        topics = self.replicas.cache.topics
        return {(t, i): errors.E_ELECTION_NOT_NEEDED if t in topics and i in topics[t].partitions
                else errors.E_UNKNOWN_TOPIC_OR_PARTITION for t, i in partitions}

    async def controlled_shutdown(self) -> None:
        pass

    async def stop(self) -> None:
        pass


class _DaemonWorker:
    """Calls run one at a time on a daemon thread (a ThreadPoolExecutor's threads are joined
    when the interpreter exits, so one call stuck in kazoo would hang the process)."""

    def __init__(self, name: str):
        self._calls: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._run, name=name, daemon=True).start()

    def submit(self, fn: Callable, *args: Any) -> Future:
        future: Future = Future()
        self._calls.put((future, fn, args))
        return future

    def shutdown(self) -> None:
        self._calls.put(None)

    def _run(self) -> None:
        while (call := self._calls.get()) is not None:
            future, fn, args = call
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args))
            except BaseException as e:
                future.set_exception(e)


class ZooKeeperCluster:
    replicated = True

    def __init__(self, config: BrokerConfig, store: "ZooKeeperMetadataStore", replicas: ReplicaManager,
                 advertised: Advertised):
        self.config = config
        self.broker_id = config.broker_id
        self.store = store
        self.replicas = replicas
        self.advertised = advertised
        replicas.isr_writer = self.write_state
        replicas.on_offline = self._partitions_offline
        self.alive: dict[int, BrokerInfo] = {}
        self.bounced: set[int] = set()  # came back as a new life (broker epoch) since the controller last acted
        self.epoch = -1  # this broker's epoch: the czxid of its registration
        self.controller = -1
        self._zk_thread = _DaemonWorker("zookeeper")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._dirty: set[str] = set()  # "brokers", "topics", "controller", "session", or "topic:<name>"
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task] = []
        self._stopping = False

    # ---------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        me = self.advertised()
        endpoints = _endpoint_list(me)
        wait_s = self.config["zookeeper.session.timeout.ms"] / 1000 + 2
        self.epoch = await self._zk(self.store.register_broker, me, endpoints, wait_s)
        log.info("registered broker %d at path /brokers/ids/%d with addresses: %s, czxid (broker epoch): %d",
                 me.id, me.id, ",".join(endpoints), self.epoch)
        self.store.zk.add_listener(self._on_session_state)
        # A start is a new life: if this broker turns out to be the controller (its previous
        # life's /controller node), nobody else saw the old one go.
        self.bounced = {self.broker_id}
        await self._refresh({"brokers", "controller", "topics"})
        self._tasks = [asyncio.ensure_future(self._reconcile_forever()),
                       asyncio.ensure_future(self._every(self.config["replica.lag.time.max.ms"] / 2,
                                                         self.replicas.shrink_isrs))]
        if self.config["auto.leader.rebalance.enable"]:
            self._tasks.append(asyncio.ensure_future(self._every(
                self.config["leader.imbalance.check.interval.seconds"] * 1000, self._rebalance_leaders)))

    async def stop(self) -> None:
        self._stopping = True
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._zk_thread.shutdown()

    async def _zk(self, fn: Callable, *args: Any) -> Any:
        return await asyncio.wrap_future(self._zk_thread.submit(fn, *args))

    async def _every(self, interval_ms: float, fn: Callable) -> None:
        while True:
            await asyncio.sleep(max(interval_ms, 50) / 1000)
            try:
                await fn()
            except Exception as e:
                name = getattr(fn, "__name__", fn)
                if type(e).__module__.startswith("kazoo."):  # ZooKeeper away or session expired: expected
                    log.warning("cluster task %s failed (%s); trying again in the next round", name, describe_error(e))
                else:
                    log.exception("cluster task %s failed", name)

    # ---------------------------------------------------------------- the view

    def alive_brokers(self) -> list[BrokerInfo]:
        return sorted(self.alive.values(), key=lambda b: b.id)

    def broker_info(self, broker_id: int) -> BrokerInfo | None:
        return self.alive.get(broker_id)

    @property
    def controller_id(self) -> int:
        return self.controller

    @property
    def is_controller(self) -> bool:
        return self.controller == self.broker_id

    # ---------------------------------------------------------------- watches → reconcile

    def _watch(self, event: "WatchedEvent") -> None:
        """A ZooKeeper watch fired (on kazoo's thread): mark what to read again."""
        path = event.path or ""
        if path.startswith("/brokers/ids"):
            what = "brokers"
        elif path == "/controller":
            what = "controller"
        elif path == "/brokers/topics":
            what = "topics"
        elif path.startswith("/brokers/topics/") or path.startswith("/config/topics/"):
            what = "topic:" + path.split("/")[3]
        else:
            return
        self._mark(what)

    def _on_session_state(self, state: str) -> None:
        if self._stopping:
            return
        if state == "LOST":
            log.warning("ZooKeeper session expired: will register again and re-read the cluster")
            self._mark("session")
        elif state == "CONNECTED":
            # Connected again, in the same session or a new one: ZooKeeper drops a connection's
            # watches with it, and kazoo does not set them again (it sends no SetWatches), so a
            # change made while the connection was down, or whose notification was lost with
            # it, would never be heard of: read everything again, which sets every watch anew.
            for what in ("brokers", "controller", "topics"):
                self._mark(what)

    def _mark(self, what: str) -> None:
        if self._loop is not None and not self._stopping:
            self._loop.call_soon_threadsafe(self._mark_on_loop, what)

    def _mark_on_loop(self, what: str) -> None:
        self._dirty.add(what)
        self._wake.set()

    async def _reconcile_forever(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            dirty, self._dirty = self._dirty, set()
            try:
                await self._refresh(dirty)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("reading cluster state from ZooKeeper failed (%s); retrying", describe_error(e))
                self._dirty |= dirty
                await asyncio.sleep(0.5)
                self._wake.set()

    async def _refresh(self, dirty: set[str]) -> None:
        if "session" in dirty:
            me = self.advertised()
            self.epoch = await self._zk(self.store.register_broker, me, _endpoint_list(me),
                                        self.config["zookeeper.session.timeout.ms"] / 1000 + 2)
            log.info("registered broker %d again after the session expired, broker epoch %d", me.id, self.epoch)
            dirty |= {"brokers", "controller", "topics"} | {f"topic:{t}" for t in self.replicas.cache.topics}
        if "brokers" in dirty:
            brokers = await self._zk(self.store.brokers, self._watch)
            before = self.alive
            self.alive = {b.id: b for b in brokers}
            for b in brokers:
                old = before.get(b.id)
                if old is not None and b.epoch != old.epoch and -1 not in (b.epoch, old.epoch):
                    log.info("broker %d came back as a new life (broker epoch %d, was %d)", b.id, b.epoch, old.epoch)
                    self.bounced.add(b.id)
            if set(self.alive) != set(before):
                log.info("live brokers: %s", sorted(self.alive))
        if "controller" in dirty:
            await self._elect_controller()
        if "topics" in dirty:
            names = set(await self._zk(self.store.topic_names, self._watch))
            for gone in set(self.replicas.cache.topics) - names:
                await self.replicas.remove_topic_off_loop(gone)
            dirty |= {f"topic:{n}" for n in names}
        for what in sorted(dirty):
            if what.startswith("topic:"):
                name = what[6:]
                topic = await self._zk(self.store.topic, name, self._watch)
                if topic is None:
                    await self.replicas.remove_topic_off_loop(name)
                else:
                    await self.replicas.apply_topic_off_loop(topic)
        if self.is_controller:
            await self._control()
        else:
            self.bounced.clear()  # the controller has seen them

    async def _elect_controller(self) -> None:
        current = await self._zk(self.store.controller_id, self._watch)
        if current == -1 and await self._zk(self.store.try_become_controller, self.broker_id):
            log.info("broker %d is the controller now", self.broker_id)
            current = self.broker_id
            await self._zk(self.store.controller_id, self._watch)
        self.controller = current

    # ---------------------------------------------------------------- writes

    async def write_state(self, topic: str, index: int, state: PartitionState) -> bool:
        """Compare-and-set one partition's state; on success apply it here at once."""
        ok = await self._zk(self.store.update_partition_state, topic, index, state)
        if ok:
            info = self.replicas.cache.topics.get(topic)
            if info is not None and index in info.partitions:
                info.partitions[index] = state
                self.replicas.apply_partition(topic, index, state)
        else:
            self._mark_on_loop(f"topic:{topic}")
        return ok

    # ---------------------------------------------------------------- the controller

    async def _control(self) -> None:
        """Elections after brokers came or went, and reassignments that can finish."""
        alive = set(self.alive)
        bounced = self.bounced & alive
        for name, topic in list(self.replicas.cache.topics.items()):
            unclean = self.replicas.cache.topic_config(name)["unclean.leader.election.enable"]
            finished = False
            for index, state in list(topic.partitions.items()):
                new = rules.on_brokers_bounced(state, alive, bounced, unclean)
                if new is None:
                    new = rules.finish_reassignment(state, alive)
                    if new is not None:
                        finished = True
                if new is not None:
                    if new.leader != state.leader:
                        log.info("controller: %s-%d leader %d -> %d (epoch %d), ISR %s", name, index, state.leader,
                                 new.leader, new.leader_epoch, new.isr)
                    await self.write_state(name, index, new)
            if finished:
                await self._zk(self.store.put_assignment, self.replicas.cache.topics[name])
        self.bounced -= bounced

    async def elect_leaders(self, partitions: list[tuple[str, int]], preferred: bool) -> dict[tuple[str, int], int]:
        """ElectLeaders: preferred (first replica) or unclean (any live replica when none is in sync)."""
        alive = set(self.alive)
        out = {}
        for topic, index in partitions:
            info = self.replicas.cache.topics.get(topic)
            state = info.partitions.get(index) if info else None
            if state is None:
                out[(topic, index)] = errors.E_UNKNOWN_TOPIC_OR_PARTITION
                continue
            if preferred:
                new = rules.preferred_leader(state, alive)
                if new is None:
                    out[(topic, index)] = (errors.E_ELECTION_NOT_NEEDED if state.leader == state.replicas[0]
                                           else errors.E_PREFERRED_LEADER_NOT_AVAILABLE)
                    continue
            else:
                if state.leader in alive:
                    out[(topic, index)] = errors.E_ELECTION_NOT_NEEDED
                    continue
                new = rules.on_brokers_changed(state, alive, unclean=True)
                if new is None or new.leader == -1:
                    out[(topic, index)] = errors.E_ELIGIBLE_LEADERS_NOT_AVAILABLE
                    continue
            ok = await self.write_state(topic, index, new)
            out[(topic, index)] = 0 if ok else errors.E_NOT_CONTROLLER
        return out

    async def _rebalance_leaders(self) -> None:
        if not self.is_controller:
            return
        alive = set(self.alive)
        states = [(t, i, s) for t, info in self.replicas.cache.topics.items() for i, s in info.partitions.items()]
        behind = rules.imbalanced_brokers([s for _, _, s in states], alive,
                                          self.config["leader.imbalance.per.broker.percentage"])
        for topic, index, state in states:
            if state.replicas and state.replicas[0] in behind:
                new = rules.preferred_leader(state, alive)
                if new is not None:
                    log.info("controller: preferred leader election for %s-%d: %d -> %d", topic, index,
                             state.leader, new.leader)
                    await self.write_state(topic, index, new)

    async def reassign(self, topic: str, index: int, target: list[int] | None) -> None:
        """Start (or, with None, cancel) a reassignment of one partition."""
        info = self.replicas.cache.topics[topic]
        state = info.partitions[index]
        if target is None:
            if not (state.adding_replicas or state.removing_replicas):
                return
            original = [r for r in state.replicas if r not in state.adding_replicas]
            new = replace(state, replicas=original, isr=[r for r in state.isr if r in original],
                          adding_replicas=[], removing_replicas=[])
        else:
            base = replace(state, replicas=rules.target_replicas(state), adding_replicas=[], removing_replicas=[])
            new = rules.start_reassignment(base, target)
        info.partitions[index] = new
        await self._zk(self.store.put_assignment, info)
        self.replicas.apply_partition(topic, index, new)
        self._mark_on_loop(f"topic:{topic}")

    # ---------------------------------------------------------------- controlled shutdown

    async def controlled_shutdown(self) -> None:
        """Move leadership off this broker and leave the ISRs before exiting (SIGTERM).

        As Kafka bounds it: ``controlled.shutdown.max.retries`` more attempts,
        ``controlled.shutdown.retry.backoff.ms`` apart, none waiting on a ZooKeeper that is
        unreachable; after that the broker shuts down anyway (the controller moves what is
        left once the session ends)."""
        me = self.broker_id
        attempts = self.config["controlled.shutdown.max.retries"] + 1
        backoff_s = self.config["controlled.shutdown.retry.backoff.ms"] / 1000
        call_timeout_s = self.config["zookeeper.session.timeout.ms"] / 1000
        for attempt in range(1, attempts + 1):
            try:
                if not self.store.zk.connected:
                    raise ConnectionError("ZooKeeper is unreachable")
                remaining = await asyncio.wait_for(self._move_leadership_off(me), call_timeout_s)
                if not remaining:
                    log.info("controlled shutdown of broker %d: leadership moved", me)
                    break
                reason = f"{remaining} partition(s) still led here"
            except asyncio.TimeoutError:
                reason = f"ZooKeeper did not answer within {call_timeout_s:g} s"
            except Exception as e:  # kazoo's errors too: connection loss, session expiry
                reason = describe_error(e)
            log.warning("controlled shutdown of broker %d, attempt %d of %d, failed: %s", me, attempt, attempts,
                        reason)
            if attempt < attempts:
                await asyncio.sleep(backoff_s)
        else:
            log.warning("controlled shutdown of broker %d did not complete; shutting down anyway", me)
        self._stopping = True
        if self.store.zk.connected:
            try:
                await asyncio.wait_for(self._zk(self.store.unregister_broker, me), call_timeout_s)
            except Exception as e:
                log.warning("could not remove /brokers/ids/%d (%s); it goes with the session", me, describe_error(e))

    def _partitions_offline(self, keys: list[tuple[str, int]]) -> None:
        """Their log dir failed here (KIP-112): another in-sync replica leads each, and this broker
        leaves their ISRs, as for a controlled shutdown of just these partitions."""
        self._tasks.append(asyncio.ensure_future(self._leave(keys)))

    async def _leave(self, keys: list[tuple[str, int]]) -> None:
        me = self.broker_id
        for attempt in range(10):
            left = []
            for topic, index in keys:
                info = self.replicas.cache.topics.get(topic)
                state = info.partitions.get(index) if info is not None else None
                if state is None:
                    continue
                new = rules.move_leadership_off(state, me, set(self.alive) - {me})
                if new is None:
                    continue
                try:
                    if await self.write_state(topic, index, new):
                        if new.leader != state.leader:
                            log.info("%s-%d: leadership moved to broker %d (epoch %d), its log dir failed here",
                                     topic, index, new.leader, new.leader_epoch)
                        continue
                except Exception as e:  # ZooKeeper unreachable: try again
                    log.warning("%s-%d: could not leave the ISR after its log dir failed: %s", topic, index,
                                describe_error(e))
                left.append((topic, index))
            if not left:
                return
            keys = left
            await self._refresh({f"topic:{t}" for t, _ in keys})
            await asyncio.sleep(self.config["controlled.shutdown.retry.backoff.ms"] / 1000)

    async def _move_leadership_off(self, me: int) -> int:
        """One attempt: hand each partition led here to another ISR member; how many are left."""
        remaining = 0
        for (topic, index), p in list(self.replicas.partitions.items()):
            new = rules.move_leadership_off(p.state, me, set(self.alive) - {me})
            if new is not None and not await self.write_state(topic, index, new):
                remaining += 1
        if remaining:
            await self._refresh({f"topic:{t}" for t in self.replicas.cache.topics})
        return remaining
