"""The Admin client's one request driver: where a call goes, and how it is tried again.

Every public :class:`~samsa.client.admin.AsyncAdmin` method sends through it:

- **node selection** (:class:`To`): any broker, the controller, one broker by id, or the
  coordinator of a key by key type (FindCoordinator, written once here: one batched request
  on v4+, one per key before). Many partitions go to their leaders in
  :meth:`RequestDriver._by_leader`, many groups to their coordinators in
  :meth:`RequestDriver._for_groups`;
- **one retry policy** (:class:`Attempts`): after a lost connection, a client-side timeout
  (``request.timeout.ms``), NOT_CONTROLLER, or (on calls to a coordinator) the coordinator
  moving or loading, the metadata is refreshed and the call sent again, ``retry.backoff.ms``
  doubling up to 1 s, until ``default.api.timeout.ms`` has passed. Other errors in a response
  fail at once, as in Kafka's admin client (a retriable code such as
  UNKNOWN_TOPIC_OR_PARTITION answering DeleteTopics is final).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Collection, Coroutine, Iterable, TypeVar

from samsa.client.connection import BrokerConnection, KafkaConnectionError, KafkaTimeoutError
from samsa.client.metadata import ClusterMetadata
from samsa.client.types import Node, TopicPartition
from samsa.protocol import errors
from samsa.protocol.api_keys import ApiKey

T = TypeVar("T")
L = TypeVar("L")  # a group listing
D = TypeVar("D")  # a group description

GROUP, TRANSACTION = 0, 1  # FindCoordinator key types
# Failures after which a whole call is sent again (to a possibly new controller or coordinator).
RETRY_CALL = (errors.NotControllerError, KafkaConnectionError, KafkaTimeoutError)
# Coordinator errors after which the coordinator is looked up again and the call retried.
COORDINATOR_MOVED = frozenset({errors.E_COORDINATOR_LOAD_IN_PROGRESS, errors.E_COORDINATOR_NOT_AVAILABLE,
                               errors.E_NOT_COORDINATOR})
# Per-partition errors after which a fresh look at the metadata may help.
STALE_LEADER = frozenset({errors.NotLeaderOrFollowerError.code, errors.LeaderNotAvailableError.code,
                          errors.UnknownTopicOrPartitionError.code, errors.FencedLeaderEpochError.code,
                          errors.UnknownLeaderEpochError.code})
# Kafka's descriptions of the errors group and coordinator calls answer with (its protocol guide's wording).
_COORDINATOR_ERROR_TEXT = {
    errors.E_UNKNOWN_TOPIC_OR_PARTITION: "This server does not host this topic-partition.",
    errors.E_OFFSET_METADATA_TOO_LARGE: "The metadata field of the offset request was too large.",
    errors.E_COORDINATOR_LOAD_IN_PROGRESS: "The coordinator is loading and hence can't process requests.",
    errors.E_COORDINATOR_NOT_AVAILABLE: "The coordinator is not available.",
    errors.E_NOT_COORDINATOR: "This is not the correct coordinator.",
    errors.E_ILLEGAL_GENERATION: "Specified group generation id is not valid.",
    errors.E_INVALID_GROUP_ID: "The configured groupId is invalid.",
    errors.E_UNKNOWN_MEMBER_ID: "The coordinator is not aware of this member.",
    errors.E_REBALANCE_IN_PROGRESS: "The group is rebalancing, so a rebalance has been triggered.",
    errors.E_GROUP_AUTHORIZATION_FAILED: "Group authorization failed.",
    errors.E_NON_EMPTY_GROUP: "The group is not empty.",
    errors.E_GROUP_ID_NOT_FOUND: "The group id does not exist.",
    errors.E_GROUP_SUBSCRIBED_TO_TOPIC: "The consumer group is actively subscribed to the topic.",
}


def error(code: int, message: str | None, context: str = "") -> errors.KafkaError:
    """The exception for ``code``: the broker's message, else ``context`` and the error name."""
    if message:
        # Some brokers (Samsa's own included) prefix the message with the error's name.
        return errors.error_for(code, message.removeprefix(errors.error_name(code) + ": "))
    return errors.error_for(code, f"{context}: {errors.error_name(code)}" if context else "")


def check(code: int, message: str | None = None, context: str = "") -> None:
    if code:
        raise error(code, message, context)


def group_error(code: int, message: str | None, context: str) -> errors.KafkaError:
    """The exception for a group or coordinator call's error: the broker's message, else Kafka's wording."""
    if not message and code in _COORDINATOR_ERROR_TEXT:
        return errors.error_for(code, _COORDINATOR_ERROR_TEXT[code])
    return error(code, message, context)


@dataclass(frozen=True)
class To:
    """Where one request goes: ``any`` broker, the ``controller``, a ``node`` by id, or the
    ``coordinator`` of ``key`` (``key_type`` GROUP or TRANSACTION)."""

    kind: str
    node_id: int = -1
    key_type: int = GROUP
    key: str = ""

    @staticmethod
    def node(node_id: int | None) -> "To":
        return ANY if node_id is None else To("node", node_id)

    @staticmethod
    def coordinator(key_type: int, key: str) -> "To":
        return To("coordinator", key_type=key_type, key=key)


ANY = To("any")
CONTROLLER = To("controller")


class Attempts:
    """One call's retry policy: a deadline ``default.api.timeout.ms`` away, a backoff from
    ``retry.backoff.ms`` doubling up to 1 s, and the metadata refreshed between attempts."""

    def __init__(self, cluster: ClusterMetadata, timeout_ms: int, backoff_ms: int):
        self.cluster = cluster
        self.loop = asyncio.get_running_loop()
        self.deadline = self.loop.time() + timeout_ms / 1000
        self.backoff = backoff_ms / 1000

    def expired(self) -> bool:
        """No time left for another attempt."""
        return self.loop.time() + self.backoff >= self.deadline

    async def wait(self, topics: list[str] | None = None) -> None:
        """Back off, then refresh the metadata (of ``topics``; [] for brokers only) for the next attempt."""
        await asyncio.sleep(self.backoff)
        self.backoff = min(self.backoff * 2, 1.0)
        try:
            await self.cluster.refresh(topics if topics is not None else [])
        except errors.KafkaError:
            pass

    async def again(self, failure: BaseException) -> None:
        """Wait for the next attempt, or raise ``failure`` when the deadline would pass."""
        if self.expired():
            raise failure
        await self.wait()


class RequestDriver:
    """The Admin's node selection and retry policy. Needs ``cluster``, ``_ready()``,
    ``default_api_timeout_ms`` and ``retry_backoff_ms`` (AsyncAdmin's)."""

    cluster: ClusterMetadata
    default_api_timeout_ms: int
    retry_backoff_ms: int

    async def _ready(self) -> ClusterMetadata:
        raise NotImplementedError

    def _attempts(self) -> Attempts:
        return Attempts(self.cluster, self.default_api_timeout_ms, self.retry_backoff_ms)

    async def _call(self, attempt: Callable[[], Awaitable[T]], retry: Collection[int] = ()) -> T:
        """Run ``attempt`` under the retry policy: again after a lost connection, a client-side
        timeout, NOT_CONTROLLER, or an error whose code is in ``retry``."""
        await self._ready()  # a failed bootstrap has already waited its time: no retry
        attempts = self._attempts()
        while True:
            try:
                return await attempt()
            except RETRY_CALL as e:
                await attempts.again(e)
            except errors.KafkaError as e:
                if e.code not in retry:
                    raise
                await attempts.again(e)

    async def _connection(self, to: To) -> BrokerConnection:
        cluster = await self._ready()
        if to.kind == "any":
            return await cluster.any()
        if to.kind == "controller":
            return await cluster.controller()
        if to.kind == "coordinator":
            return await cluster.node((await self._coordinator(to.key_type, to.key)).id)
        return await cluster.node(to.node_id)

    async def _send(self, to: To, api_key: int, body: dict[str, Any], **kw: Any) -> dict[str, Any]:
        """One request to ``to``, its response; no retry (see :meth:`_request`)."""
        conn = await self._connection(to)
        resp = await conn.request(api_key, body, **kw)
        assert resp is not None
        return resp

    async def _request(self, to: To, api_key: int, body: dict[str, Any], **kw: Any) -> dict[str, Any]:
        """:meth:`_send` under the retry policy (coordinator moves included for a coordinator)."""
        retry = COORDINATOR_MOVED if to.kind == "coordinator" else ()
        return await self._call(lambda: self._send(to, api_key, body, **kw), retry)

    async def _find_coordinators(self, key_type: int, keys: list[str]) -> dict[str, Node | errors.KafkaError]:
        """Each key's coordinator (FindCoordinator; one batched request on v4+), or its error."""
        cluster = await self._ready()
        conn = await cluster.any()
        version = conn.pick_version(ApiKey.FIND_COORDINATOR)
        if version >= 4:
            resp = await conn.request(ApiKey.FIND_COORDINATOR, {"key_type": key_type, "coordinator_keys": keys},
                                      version=version)
            assert resp is not None
            answers = resp["coordinators"]
        else:
            answers = []
            for key in keys:
                resp = await conn.request(ApiKey.FIND_COORDINATOR, {"key": key, "key_type": key_type},
                                          version=version)
                assert resp is not None
                answers.append(dict(resp, key=key))
        what = "group" if key_type == GROUP else "transactional id"
        return {a["key"]: group_error(a["error_code"], a.get("error_message"),
                                      f"Finding the coordinator of {what} {a['key']}")
                if a["error_code"] else Node(a["node_id"], a["host"], a["port"]) for a in answers}

    async def _coordinator(self, key_type: int, key: str) -> Node:
        """One key's coordinator; its FindCoordinator error raised."""
        found = (await self._find_coordinators(key_type, [key])).get(key) or errors.CoordinatorNotAvailableError(
            f"No coordinator found for {key}")
        if isinstance(found, errors.KafkaError):
            raise found
        return found

    async def _by_leader(self, tps: list[TopicPartition],
                         send: Callable[[BrokerConnection, list[TopicPartition]],
                                        Coroutine[Any, Any, dict[TopicPartition, tuple[int, Any]]]]
                         ) -> dict[TopicPartition, Any]:
        """Send each partition's part to its leader; retry the ones whose leader moved."""
        cluster = await self._ready()
        attempts = self._attempts()
        results: dict[TopicPartition, Any] = {}
        todo = list(dict.fromkeys(tps))
        while todo:
            groups: dict[int, list[TopicPartition]] = defaultdict(list)
            retry: list[tuple[TopicPartition, errors.KafkaError]] = []
            for tp in todo:
                try:
                    groups[await cluster.leader_id(tp.topic, tp.partition)].append(tp)
                except errors.KafkaError as e:
                    if not e.retriable or isinstance(e, errors.UnknownTopicOrPartitionError):
                        raise
                    retry.append((tp, e))
            for leader, group in groups.items():
                try:
                    answers = await send(await cluster.node(leader), group)
                except KafkaConnectionError as e:
                    retry.extend((tp, e) for tp in group)
                    continue
                for tp in group:
                    code, value = answers.get(tp, (errors.UnknownServerError.code, None))
                    if code == 0:
                        results[tp] = value
                    elif code in STALE_LEADER:
                        retry.append((tp, error(code, None, str(tp))))
                    else:
                        raise error(code, None, str(tp))
            if not retry:
                break
            if attempts.expired():
                raise retry[0][1]
            todo = [tp for tp, _ in retry]
            await attempts.wait(sorted({tp.topic for tp in todo}))
        return results

    async def _for_groups(self, group_ids: Iterable[str],
                          send: Callable[[Node, BrokerConnection, list[str]],
                                         Awaitable[dict[str, Any]]]) -> dict[str, Any]:
        """Run ``send`` on each group's coordinator, for all its groups at once.

        ``send`` returns group -> result, an exception standing for a failure. Groups whose
        coordinator moved, is loading or could not be reached are looked up and sent again
        until ``default.api.timeout.ms`` has passed; the result maps every group to its
        result or its exception."""
        cluster = await self._ready()
        attempts = self._attempts()
        results: dict[str, Any] = {}
        todo = list(dict.fromkeys(group_ids))
        while todo:
            retry: dict[str, errors.KafkaError] = {}
            try:
                coordinators = await self._find_coordinators(GROUP, todo)
            except RETRY_CALL as e:
                coordinators = {g: e for g in todo}
            by_node: dict[Node, list[str]] = defaultdict(list)
            for group_id in todo:
                found = coordinators.get(group_id) or errors.CoordinatorNotAvailableError(
                    f"No coordinator found for group {group_id}")
                if isinstance(found, Node):
                    by_node[found].append(group_id)
                elif isinstance(found, RETRY_CALL) or found.code in COORDINATOR_MOVED:
                    retry[group_id] = found
                else:
                    results[group_id] = found
            for node, groups in by_node.items():
                try:
                    answers = await send(node, await cluster.node(node.id), groups)
                except RETRY_CALL as e:
                    retry.update((g, e) for g in groups)
                    continue
                for group_id in groups:
                    answer = answers.get(group_id, errors.UnknownServerError(f"No answer for group {group_id}"))
                    if isinstance(answer, errors.KafkaError) and answer.code in COORDINATOR_MOVED:
                        retry[group_id] = answer
                    else:
                        results[group_id] = answer
            if not retry:
                break
            if attempts.expired():
                results.update(retry)
                break
            todo = list(retry)
            await attempts.wait()
        return results

    async def _list_groups(self, states: Iterable[str] | None, types: list[str], min_version: int | None,
                           listing: Callable[[dict[str, Any]], L | None]) -> list[L]:
        """ListGroups on every broker with these state and type filters: ``listing(group)`` of
        each group it does not make None, sorted by id."""
        states = [s for s in states or [] if s]

        async def attempt() -> list[L]:
            cluster = await self._ready()
            await cluster.refresh([])
            found: dict[str, L] = {}
            for node_id in sorted(cluster.brokers):
                conn = await cluster.node(node_id)
                resp = await conn.request(ApiKey.LIST_GROUPS, {"states_filter": states, "types_filter": types},
                                          min_version=min_version)
                assert resp is not None
                check(resp["error_code"], None, f"Listing the groups of broker {node_id}")
                for g in resp["groups"]:
                    item = listing(g)
                    if item is not None:
                        found[g["group_id"]] = item
            return [found[k] for k in sorted(found)]
        return await self._call(attempt)

    async def _list_groups_of_type(self, group_type: str, states: Iterable[str] | None,
                                   listing: Callable[[str, str | None], L]) -> list[L]:
        """The groups of ``group_type`` on every broker (ListGroups v5 with the type filter),
        one ``listing(group_id, state)`` each, sorted by id."""
        return await self._list_groups(
            states, [group_type], 5, lambda g: listing(g["group_id"], g.get("group_state"))
            if g.get("group_type", group_type) == group_type else None)

    async def _describe_groups_of_type(self, group_ids: Iterable[str], api: ApiKey, what: str,
                                       description: Callable[[dict[str, Any], Node], D]) -> dict[str, D]:
        """Group id -> ``description(group, coordinator)`` from ``api`` (ShareGroupDescribe,
        StreamsGroupDescribe, ...) on each coordinator. A group that does not exist raises
        GroupIdNotFoundError, as Kafka's admin client does; ``what`` names the groups in errors."""
        group_ids = list(dict.fromkeys(group_ids))

        async def send(node: Node, conn: BrokerConnection, groups: list[str]) -> dict[str, Any]:
            resp = await conn.request(api, {"group_ids": groups, "include_authorized_operations": False})
            out: dict[str, Any] = {}
            for g in resp["groups"]:
                if g["error_code"] == errors.E_GROUP_ID_NOT_FOUND:
                    out[g["group_id"]] = errors.GroupIdNotFoundError(
                        g.get("error_message") or f"Group {g['group_id']} not found.")
                elif g["error_code"]:
                    out[g["group_id"]] = group_error(g["error_code"], g.get("error_message"),
                                                     f"Describing {what} {g['group_id']}")
                else:
                    out[g["group_id"]] = description(g, node)
            return out
        results = await self._for_groups(group_ids, send)
        for g in group_ids:
            if isinstance(results[g], BaseException):
                raise results[g]
        return {g: results[g] for g in group_ids}

    async def _delete_groups(self, group_ids: Iterable[str]) -> dict[str, errors.KafkaError | None]:
        """DeleteGroups on each coordinator: group id -> None (deleted) or the error."""
        group_ids = list(dict.fromkeys(group_ids))

        async def send(node: Node, conn: BrokerConnection, groups: list[str]) -> dict[str, Any]:
            resp = await conn.request(ApiKey.DELETE_GROUPS, {"groups_names": groups})
            return {r["group_id"]: group_error(r["error_code"], None, f"Deleting group {r['group_id']}")
                    if r["error_code"] else None for r in resp["results"]}
        results = await self._for_groups(group_ids, send)
        return {g: results[g] for g in group_ids}

    async def _for_group(self, group_id: str,
                         send: Callable[[Node, BrokerConnection], Awaitable[T]]) -> T:
        """One group's call on its coordinator (see :meth:`_for_groups`); failures raise."""
        async def one(node: Node, conn: BrokerConnection, groups: list[str]) -> dict[str, Any]:
            try:
                return {group_id: await send(node, conn)}
            except errors.KafkaError as e:
                if isinstance(e, RETRY_CALL):
                    raise
                return {group_id: e}
        result = (await self._for_groups([group_id], one))[group_id]
        if isinstance(result, BaseException):
            raise result
        return result
