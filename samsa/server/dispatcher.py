"""From a request frame to a response frame: header checks, decoding, the handler, encoding.

What Kafka does with bad input, Samsa does too: an unknown API key, a version the broker
does not support (other than ApiVersions), or a body that does not decode closes that
one connection with a log line; an ApiVersions request in an unknown version gets the
v0-layout UNSUPPORTED_VERSION answer so the client can retry.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from samsa.protocol import api
from samsa.protocol.api_keys import ApiKey
from samsa.protocol.errors import InvalidRequestError
from samsa.security.quotas import (CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, REQUEST_PERCENTAGE, QuotaManager)
from samsa.server.handlers import HANDLERS, Handler, Services
from samsa.server.metrics.counters import FETCH_CONSUMER, FETCH_FOLLOWER, RequestTimes
from samsa.server.network import Connection
from samsa.server.security import SaslSession, SaslState, log_failure

log = logging.getLogger(__name__)
_SIZE = struct.Struct(">i")
# Not throttled (Kafka exempts these from the request quota): authentication and broker-to-broker calls.
_UNTHROTTLED = frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE,
                          ApiKey.WRITE_TXN_MARKERS})
_SASL_KEYS = frozenset({ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})  # both < 256: the frame's second byte


@dataclass
class RequestContext:
    broker: Services
    connection: Connection
    header: api.RequestHeader

    @property
    def version(self) -> int:
        return self.header.api_version


class Dispatcher:
    def __init__(self, broker: Services):
        self.broker = broker
        self.connections: set[Connection] = set()
        self.times: RequestTimes | None = None  # RequestMetrics, when the broker's metrics are on
        self.quotas: QuotaManager | None = None  # set while some client quota is configured
        # told each connection that closes (share sessions end with the connection that opened them)
        self.on_connection_closed: list[Callable[[Connection], None]] = []

    def connection_counts(self) -> dict[str, int]:
        """Open connections per listener name (the broker's metrics)."""
        counts: dict[str, int] = {}
        for conn in list(self.connections):
            counts[conn.listener] = counts.get(conn.listener, 0) + 1
        return counts

    @staticmethod
    def supported_versions() -> list[tuple[int, int, int]]:
        return [(key, h.min_version, h.max_version) for key, h in sorted(HANDLERS.items())]

    def dispatch(self, conn: Connection, frame: bytearray) -> list | Awaitable[list | None] | None:
        auth = conn.auth  # None but on SASL listeners: PLAINTEXT's whole cost of authentication
        # A SASL connection's gate: before (or between) authentications, and every SaslHandshake or
        # SaslAuthenticate (KIP-368's re-authentication comes on an open session).
        if auth is not None and (not auth.admits() or (len(frame) > 1 and frame[0] == 0 and frame[1] in _SASL_KEYS)):
            return self._authenticating(conn, auth, frame)
        return self._dispatch(conn, frame)

    def _authenticating(self, conn: Connection, auth: SaslSession,
                        frame: bytearray) -> list | Awaitable[list | None] | None:
        """A SASL connection's frames while its session drives: the bare tokens that follow a
        SaslHandshake v0, ApiVersions, SaslHandshake and SaslAuthenticate, and (while the session
        is open, during a re-authentication) ordinary requests. A failed authentication is
        answered after ``connection.failed.authentication.delay.ms`` and the connection closed."""
        if auth.raw_tokens:
            error, reply, _ = auth.authenticate(bytes(frame))
            if error:
                return self._refused(conn, auth, None)
            return [_SIZE.pack(len(reply)), reply]
        try:
            api_key = api.peek_request_header(frame)[0]
        except InvalidRequestError as e:
            conn.close(str(e))
            return None
        if api_key in (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE):
            result = self._dispatch(conn, frame)
            return self._refused(conn, auth, result) if auth.failed else result
        if api_key == ApiKey.API_VERSIONS or auth.admits():
            return self._dispatch(conn, frame)
        if auth.state is SaslState.AUTHENTICATED:
            log_failure(conn.peer, "the SASL session expired without re-authentication "
                                   "(connections.max.reauth.ms)")
            conn.close("session expired", quiet=True)
        else:
            name = HANDLERS[api_key].name if api_key in HANDLERS else str(api_key)
            log_failure(conn.peer, f"Unexpected Kafka request of type {name} during SASL handshake")
            conn.close("request before SASL authentication", quiet=True)
        return None

    @staticmethod
    async def _refused(conn: Connection, auth: SaslSession, answer: list | Awaitable[list | None] | None) -> None:
        """KIP-306: the failed authentication's answer (none after a v0 handshake's bare token)
        goes out after ``connection.failed.authentication.delay.ms``, then the connection closes."""
        delay = auth.security.failed_auth_delay_ms
        if delay > 0:
            await asyncio.sleep(delay / 1000)
        if answer is not None and not isinstance(answer, list):
            answer = await answer
        if answer:
            conn.send(answer)
        conn.close(auth.failure, quiet=True)
        return None

    def _dispatch(self, conn: Connection, frame: bytearray) -> list | Awaitable[list | None] | None:
        try:
            api_key, version, correlation_id = api.peek_request_header(frame)
        except InvalidRequestError as e:
            conn.close(str(e))
            return None
        handler = HANDLERS.get(api_key)
        if handler is None:
            conn.close(f"unknown API key {api_key}")
            return None
        if not handler.min_version <= version <= handler.max_version:
            if api_key == ApiKey.API_VERSIONS:
                return api.api_versions_v0_fallback(correlation_id, self.supported_versions())
            conn.close(f"unsupported version {version} of {handler.name} "
                       f"(supported: {handler.min_version}-{handler.max_version})")
            return None
        try:
            header, body = api.decode_request(frame)
        except InvalidRequestError as e:
            conn.close(f"malformed {handler.name} v{version} request: {e}")
            return None
        ctx = RequestContext(self.broker, conn, header)
        if self.quotas is not None and api_key not in _UNTHROTTLED:
            handler = Handler(handler.name, self._throttled(handler.fn, len(frame), self.quotas), handler.min_version,
                              handler.max_version)
        if self.times is not None:
            return self._timed(ctx, handler, body, correlation_id, self.times)
        try:
            result = handler.fn(ctx, body)
        except Exception as e:
            log.exception("%s v%d from %s failed", handler.name, version, conn.peer)
            conn.close(f"internal error handling {handler.name}: {e}")
            return None
        if result is None:
            return None
        if isinstance(result, dict):
            return api.encode_response(api_key, version, correlation_id, result)
        return self._later(result, api_key, version, correlation_id)

    def _timed(self, ctx: RequestContext, handler: Handler, body: dict, correlation_id: int,
               times: RequestTimes) -> list | Awaitable[list | None] | None:
        """``dispatch`` with the RequestMetrics instants taken (kept in ``times``, folded at scrape)."""
        conn, api_key, version = ctx.connection, ctx.header.api_key, ctx.header.api_version
        started = time.perf_counter()
        arrived = conn.arrived_at or started
        also = None  # a Fetch is timed as Fetch and as FetchConsumer or FetchFollower, as Kafka does
        if api_key == ApiKey.FETCH:
            replica_id = (body.get("replica_state") or {}).get("replica_id", -1) if version >= 15 else body["replica_id"]
            also = FETCH_FOLLOWER if replica_id >= 0 else FETCH_CONSUMER
        try:
            result = handler.fn(ctx, body)
        except Exception as e:
            log.exception("%s v%d from %s failed", handler.name, version, conn.peer)
            conn.close(f"internal error handling {handler.name}: {e}")
            return None
        local_done = time.perf_counter()
        if result is not None and not isinstance(result, dict):
            return self._later_timed(result, api_key, version, correlation_id, times, arrived, started, local_done,
                                     also)
        frame = None if result is None else api.encode_response(api_key, version, correlation_id, result)
        sent = time.perf_counter() if result is not None else local_done
        times.record(api_key, version, arrived, started, local_done, local_done, sent)
        if also is not None:
            times.record(also, version, arrived, started, local_done, local_done, sent)
        return frame

    @staticmethod
    async def _later_timed(result: Awaitable[dict | None], api_key: int, version: int, correlation_id: int,
                           times: RequestTimes, arrived: float, started: float, local_done: float,
                           also: int | None) -> Any:
        """The parked part of a timed request."""
        body = await result
        remote_done = time.perf_counter()
        frame = None if body is None else api.encode_response(api_key, version, correlation_id, body)
        sent = time.perf_counter() if body is not None else remote_done
        times.record(api_key, version, arrived, started, local_done, remote_done, sent)
        if also is not None:
            times.record(also, version, arrived, started, local_done, remote_done, sent)
        return frame

    @staticmethod
    def _throttled(fn, size: int, quotas: QuotaManager):
        """``fn`` measured against the client's quotas: the answer carries the throttle time and
        the connection is muted for it (KIP-219)."""
        def run(ctx: RequestContext, body: dict):
            api_key = ctx.header.api_key
            follower = api_key == ApiKey.FETCH and (
                (body.get("replica_state") or {}).get("replica_id", -1) if ctx.version >= 15
                else body.get("replica_id", -1)) >= 0
            started = time.perf_counter()
            result = fn(ctx, body)
            cpu_percent = (time.perf_counter() - started) * 100  # of one second
            if follower:
                return result
            if result is None or isinstance(result, dict):
                return _throttle(ctx, quotas, size, cpu_percent, result)
            return _throttle_later(ctx, quotas, size, cpu_percent, result)
        return run

    @staticmethod
    async def _later(result: Awaitable[dict | None], api_key: int, version: int, correlation_id: int) -> Any:
        body = await result
        if body is None:
            return None
        return api.encode_response(api_key, version, correlation_id, body)


def _fetched_bytes(body: dict) -> int:
    return sum(len(p.get("records") or b"") for t in body.get("responses", ()) for p in t["partitions"])


def _throttle(ctx: RequestContext, quotas: QuotaManager, size: int, cpu_percent: float,
              result: dict | None) -> dict | None:
    conn, api_key = ctx.connection, ctx.header.api_key
    user, client = conn.principal.name, ctx.header.client_id or ""
    ms = quotas.record(REQUEST_PERCENTAGE, user, client, cpu_percent)
    if api_key == ApiKey.PRODUCE:
        ms = max(ms, quotas.record(PRODUCER_BYTE_RATE, user, client, size))
    elif api_key == ApiKey.FETCH and result is not None:
        ms = max(ms, quotas.record(CONSUMER_BYTE_RATE, user, client, _fetched_bytes(result)))
    if ms > 0:
        if result is not None and "throttle_time_ms" in result:
            result["throttle_time_ms"] = max(result["throttle_time_ms"], ms)
        conn.mute(ms)
    return result


async def _throttle_later(ctx: RequestContext, quotas: QuotaManager, size: int, cpu_percent: float,
                          result: Awaitable[dict | None]) -> dict | None:
    return _throttle(ctx, quotas, size, cpu_percent, await result)
