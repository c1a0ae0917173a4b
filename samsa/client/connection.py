"""One client connection to one broker: connect, negotiate versions, pipeline requests.

Requests are matched to responses by correlation id, so any number may be in flight at
once. Right after connecting, the connection asks the broker which versions of each API
it speaks (ApiVersions); :meth:`BrokerConnection.request` then uses the highest version
both sides know, within what the caller allows.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import ssl
import struct
from importlib import metadata
from typing import Any

from samsa.protocol import api, errors
from samsa.protocol.api_keys import ApiKey
from samsa.security.client import ClientSecurity
from samsa.security.sasl import SaslAuthenticationError
from samsa.timeouts import within

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
_CORRELATION = struct.Struct(">i")
_ERROR = struct.Struct(">h")

API_VERSIONS_FIRST_TRY = 3


class KafkaConnectionError(errors.NetworkError):
    """The broker could not be reached, or the connection broke with requests in flight."""


class UnresolvableHostError(KafkaConnectionError):
    """The broker's host name did not resolve (DNS): retrying soon will not help."""


class KafkaTimeoutError(errors.RequestTimedOutError):
    """No answer (or no connection) within the time allowed."""


def _software_version() -> str:
    try:
        return metadata.version("samsa")
    except metadata.PackageNotFoundError:
        return "0.0.0"


class BrokerConnection:
    """An asyncio connection to ``host:port``. Not thread-safe: use it from one loop."""

    def __init__(self, host: str, port: int, client_id: str | None = "samsa", *,
                 request_timeout_ms: int = 30000, connect_timeout_ms: int = 10000,
                 security: ClientSecurity | None = None):
        self.security = security  # None: PLAINTEXT
        self._reauth: asyncio.TimerHandle | None = None
        self.host = host
        self.port = port
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.connect_timeout_ms = connect_timeout_ms
        self.api_versions: dict[int, tuple[int, int]] = {}
        self.finalized_features: dict[str, int] = {}  # feature name -> finalized max level (KIP-584)
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._read_task: asyncio.Task | None = None
        self._pending: dict[int, tuple[int, int, asyncio.Future]] = {}
        self._next_id = 0
        self._closed_error: errors.KafkaError | None = None

    def __repr__(self) -> str:
        return f"<BrokerConnection {self.address} {'connected' if self.connected else 'closed'}>"

    @property
    def address(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def connected(self) -> bool:
        return self._writer is not None and self._closed_error is None

    # ------------------------------------------------------------------ connect / close

    async def connect(self, timeout_ms: int | None = None) -> None:
        """Open the socket and negotiate API versions; KafkaConnectionError if it fails."""
        timeout = (self.connect_timeout_ms if timeout_ms is None else timeout_ms) / 1000
        tls = self.security.ssl_context if self.security is not None else None
        try:
            self._reader, self._writer = await within(
                asyncio.open_connection(self.host, self.port, ssl=tls, server_hostname=self.host if tls else None),
                timeout)
        except asyncio.TimeoutError:
            raise KafkaConnectionError(
                f"Timed out after {int(timeout * 1000)} ms connecting to {self.address}") from None
        except socket.gaierror as e:
            raise UnresolvableHostError(f"DNS resolution failed for {self.host}: {e.strerror}") from None
        except ssl.SSLError as e:
            raise KafkaConnectionError(f"SSL handshake with {self.address} failed: {e.reason or e}") from None
        except OSError as e:
            reason = os.strerror(e.errno) if e.errno else str(e)
            raise KafkaConnectionError(f"Connection to {self.address} failed: {reason}") from None
        self._closed_error = None
        self._read_task = asyncio.get_running_loop().create_task(self._read_loop())
        try:
            await self._negotiate(timeout_ms)
            if self.security is not None and self.security.sasl:
                await self._authenticate(timeout_ms)
        except BaseException:
            self.close()
            raise

    async def _authenticate(self, timeout_ms: int | None = None) -> None:
        """SaslHandshake and SaslAuthenticate rounds; a session lifetime from the broker
        schedules the next authentication before it ends (KIP-368)."""
        sec = self.security
        assert sec is not None
        resp = await self.request(ApiKey.SASL_HANDSHAKE, {"mechanism": sec.mechanism}, min_version=1,
                                  timeout_ms=timeout_ms)
        if resp["error_code"]:
            raise errors.error_for(resp["error_code"], f"SASL mechanism {sec.mechanism} not enabled on "
                                   f"{self.address} (it has {', '.join(resp['mechanisms'])})")
        client = sec.sasl_client()
        try:
            token: bytes | None = client.first()
            lifetime = 0
            while token is not None:
                resp = await self.request(ApiKey.SASL_AUTHENTICATE, {"auth_bytes": token}, timeout_ms=timeout_ms)
                if resp["error_code"]:
                    raise errors.error_for(resp["error_code"], resp.get("error_message") or
                                           f"SASL authentication with {self.address} failed")
                lifetime = resp.get("session_lifetime_ms", 0)
                token = client.next(resp["auth_bytes"])
        except SaslAuthenticationError as e:
            raise errors.SaslAuthenticationFailedError(str(e)) from None
        if lifetime > 0:
            # Re-authenticate at 85-95 % of the session, as Kafka's clients do.
            import random
            delay = lifetime / 1000 * random.uniform(0.85, 0.95)
            self._reauth = asyncio.get_running_loop().call_later(delay, self._start_reauth)

    def _start_reauth(self) -> None:
        if not self.connected:
            return

        async def run() -> None:
            try:
                await self._authenticate()
            except Exception as e:  # noqa: BLE001 - the broker will close the connection; say why
                log.warning("re-authentication with %s failed: %s", self.address, e)
                self._fail(KafkaConnectionError(f"Re-authentication with {self.address} failed: {e}"))
        asyncio.ensure_future(run())

    async def _negotiate(self, timeout_ms: int | None) -> None:
        body = {"client_software_name": "samsa", "client_software_version": _software_version()}
        resp = await self.request(ApiKey.API_VERSIONS, body, version=API_VERSIONS_FIRST_TRY, timeout_ms=timeout_ms)
        if resp["error_code"] == errors.UnsupportedVersionError.code:
            # The broker answered in the v0 layout with its ranges: retry in a version it knows.
            theirs = {k["api_key"]: k["max_version"] for k in resp["api_keys"]}
            retry = min(theirs.get(ApiKey.API_VERSIONS, 0), API_VERSIONS_FIRST_TRY - 1)
            resp = await self.request(ApiKey.API_VERSIONS, body, version=retry, timeout_ms=timeout_ms)
        if resp["error_code"]:
            raise errors.error_for(resp["error_code"], f"ApiVersions to {self.address} failed")
        self.api_versions = {k["api_key"]: (k["min_version"], k["max_version"]) for k in resp["api_keys"]}
        self.finalized_features = {f["name"]: f["max_version_level"] for f in resp.get("finalized_features") or []}

    def close(self) -> None:
        """Close the socket; requests still waiting fail with KafkaConnectionError."""
        self._fail(KafkaConnectionError(f"Connection to {self.address} was closed"))
        if self._read_task is not None and self._read_task is not asyncio.current_task():
            self._read_task.cancel()

    async def wait_closed(self) -> None:
        """Wait until a :meth:`close` has released the socket and the reader task."""
        task, self._read_task = self._read_task, None
        if task is not None and task is not asyncio.current_task():
            await asyncio.gather(task, return_exceptions=True)
        if self._writer is not None:
            try:
                await self._writer.wait_closed()
            except (OSError, RuntimeError):
                pass

    def _fail(self, error: errors.KafkaError) -> None:
        if self._reauth is not None:
            self._reauth.cancel()
            self._reauth = None
        if self._closed_error is None:
            self._closed_error = error
        if self._writer is not None:
            self._writer.close()
        pending, self._pending = self._pending, {}
        for _, _, fut in pending.values():
            if not fut.done():
                fut.set_exception(error)

    # ------------------------------------------------------------------ versions

    def pick_version(self, api_key: int, min_version: int | None = None, max_version: int | None = None) -> int:
        """The highest version of ``api_key`` both sides speak, within [min_version, max_version]."""
        ours = api.api(api_key)
        lo = ours.min_version if min_version is None else max(ours.min_version, min_version)
        hi = ours.max_version if max_version is None else min(ours.max_version, max_version)
        theirs = self.api_versions.get(api_key)
        if theirs is None:
            raise errors.UnsupportedVersionError(f"The broker at {self.address} does not support {ours.name}")
        if max(lo, theirs[0]) > min(hi, theirs[1]):
            raise errors.UnsupportedVersionError(
                f"The broker at {self.address} supports {ours.name} versions {theirs[0]}-{theirs[1]}, "
                f"this request needs {lo}-{hi}")
        return min(hi, theirs[1])

    # ------------------------------------------------------------------ requests

    async def request(self, api_key: int, body: dict[str, Any], version: int | None = None, *,
                      min_version: int | None = None, max_version: int | None = None,
                      timeout_ms: int | None = None, expect_response: bool = True) -> dict[str, Any] | None:
        """Send one request and wait for its response body.

        ``expect_response=False`` is for requests the broker does not answer (acks=0
        Produce): the call returns None once the bytes are written.
        """
        pending = self.send(api_key, body, version, min_version=min_version, max_version=max_version,
                            expect_response=expect_response)
        await self.drain()
        if pending is None:
            return None
        return await self.response(pending, timeout_ms)

    def send(self, api_key: int, body: dict[str, Any], version: int | None = None, *,
             min_version: int | None = None, max_version: int | None = None,
             expect_response: bool = True) -> tuple[int, int, asyncio.Future] | None:
        """Write one request now, without waiting: a handle for :meth:`response` (None if unanswered).

        Requests sent one after another reach the broker in that order."""
        if self._closed_error is not None:
            raise self._closed_error
        if self._writer is None:
            raise KafkaConnectionError(f"Not connected to {self.address}")
        if version is None:
            version = self.pick_version(api_key, min_version, max_version)
        self._next_id = (self._next_id + 1) & 0x7FFFFFFF
        correlation_id = self._next_id
        chunks = api.encode_request(api_key, version, correlation_id, self.client_id, body)
        fut: asyncio.Future | None = None
        if expect_response:
            fut = asyncio.get_running_loop().create_future()
            self._pending[correlation_id] = (api_key, version, fut)
        try:
            self._writer.writelines(chunks)
        except (OSError, RuntimeError) as e:
            self._fail(KafkaConnectionError(f"Connection to {self.address} broke while sending: {e}"))
            raise self._closed_error from None
        return None if fut is None else (api_key, correlation_id, fut)

    async def drain(self) -> None:
        """Wait until the socket has taken what was written (flow control)."""
        try:
            if self._writer is not None:
                await self._writer.drain()
        except (OSError, RuntimeError) as e:
            self._fail(KafkaConnectionError(f"Connection to {self.address} broke while sending: {e}"))
            raise self._closed_error from None

    async def response(self, pending: tuple[int, int, asyncio.Future], timeout_ms: int | None = None) -> dict[str, Any]:
        """The answer to a request written by :meth:`send`, within ``timeout_ms`` (request.timeout.ms)."""
        api_key, correlation_id, fut = pending
        timeout_ms = self.request_timeout_ms if timeout_ms is None else timeout_ms
        try:
            return await within(fut, timeout_ms / 1000)
        except asyncio.TimeoutError:
            self._pending.pop(correlation_id, None)
            raise KafkaTimeoutError(
                f"{api.api(api_key).name} request to {self.address} timed out after {timeout_ms} ms") from None

    async def _read_loop(self) -> None:
        assert self._reader is not None
        try:
            while True:
                (size,) = _SIZE.unpack(await self._reader.readexactly(4))
                frame = await self._reader.readexactly(size)
                (correlation_id,) = _CORRELATION.unpack_from(frame, 0)
                entry = self._pending.pop(correlation_id, None)
                if entry is None:
                    continue  # its caller gave up waiting
                api_key, version, fut = entry
                if fut.done():
                    continue
                try:
                    fut.set_result(self._decode(api_key, version, frame))
                except Exception as e:  # a response we cannot read: fail this request only
                    fut.set_exception(errors.CorruptRecordError(
                        f"Cannot decode {api.api(api_key).name} v{version} response from {self.address}: {e}"))
        except asyncio.CancelledError:
            raise
        except (asyncio.IncompleteReadError, OSError) as e:
            reason = "the broker closed the connection" if isinstance(e, asyncio.IncompleteReadError) else str(e)
            self._fail(KafkaConnectionError(f"Connection to {self.address} lost: {reason}"))

    @staticmethod
    def _decode(api_key: int, version: int, frame) -> dict[str, Any]:
        if api_key == ApiKey.API_VERSIONS and version > 0:
            # A broker that does not know our version answers in the v0 layout (header v0,
            # error_code first in both layouts): read it as v0.
            (error_code,) = _ERROR.unpack_from(frame, 4)
            if error_code == errors.UnsupportedVersionError.code:
                try:
                    return api.decode_response(api_key, 0, frame)[1]
                except errors.KafkaError:
                    pass  # librdkafka's mock answers in the version asked: read it as that
        return api.decode_response(api_key, version, frame)[1]
