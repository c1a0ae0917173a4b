"""The listener: one asyncio protocol object per client connection.

Frames are cut from the byte stream here and handed to the dispatcher one at a time, in
order: Kafka answers a connection's requests in the order they came. A request whose
answer must wait (long-poll fetch, acks=all produce) holds back the ones behind it on the
same connection only; every other connection goes on. While too many frames wait behind
it (``queued.max.requests``, ``queued.max.request.bytes``) the connection stops reading,
so a client cannot queue without bound.

On a listener without TLS a Fetch answer's record sets leave with ``sendfile`` straight
from the segment files (zero copy): the handler reads them as ``FileSlice`` chunks (byte
ranges fixed at the read, their files held open), and the answer's other chunks are written
around them in order. While a slice waits for the socket to take it, the connection is busy:
the answers behind it wait, so a connection's answers stay in request order. A slice whose
file was truncated after the read cannot be sent whole, and its length prefix has gone: the
connection is closed (the client reconnects and fetches again). TLS listeners read the
slices into bytes and write them as before.

Every way out of a request either answers it or closes the connection: a frame that
fails anywhere between the socket and the handler costs that one connection, with a log
line naming the client.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import ssl
import struct
import time
from collections import deque
from dataclasses import dataclass
from typing import Awaitable, Protocol

from samsa.security.principal import ANONYMOUS, KafkaPrincipal
from samsa.security.quotas import ConnectionQuotas
from samsa.server.security import ListenerSecurity, SaslSession, log_failure, ssl_principal
from samsa.storage.files import FileSlice, ShortFileError

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")


class FrameDispatcher(Protocol):
    """Where a connection hands its request frames (the server's Dispatcher)."""

    connections: set["Connection"]

    def dispatch(self, conn: "Connection", frame: memoryview) -> list | Awaitable[list | None] | None: ...


@dataclass(frozen=True)
class ConnectionLimits:
    """The broker's per-connection bounds (Kafka's names)."""

    max_request_bytes: int = 104857600  # socket.request.max.bytes
    max_queued_requests: int = 500  # queued.max.requests
    max_queued_bytes: int = -1  # queued.max.request.bytes; -1: no bound but the count

    def full(self, frames: int, size: int) -> bool:
        return frames >= self.max_queued_requests or 0 < self.max_queued_bytes <= size


# Requests are received straight into a connection's buffer (a BufferedProtocol: recv_into) and
# handed on as memoryviews of it, never sliced out or moved. A full buffer is not reused (its
# frames' views may live on, in a parked request); a new one takes the partial frame at its end.
RECV_BUFFER = 256 * 1024


class Connection(asyncio.BufferedProtocol):
    def __init__(self, dispatcher: FrameDispatcher, limits: ConnectionLimits, listener: str = "",
                 timed: bool = False, security: ListenerSecurity | None = None,
                 counts: ConnectionQuotas | None = None):
        self.dispatcher = dispatcher
        self.counts = counts  # max.connections*, when set
        self.counted = False
        self.security = security
        # Who the client is: the certificate's subject on SSL, the SASL user once authenticated.
        self.principal: KafkaPrincipal = ANONYMOUS
        self.auth: SaslSession | None = None  # SASL listeners only: the dispatcher's gate
        self.tls_task: asyncio.Task | None = None
        self.limits = limits
        self.max_request_bytes = limits.max_request_bytes
        self.listener = listener  # the listener's name (PLAINTEXT), for the connection-count metric
        # With metrics on: when each queued frame arrived (perf_counter), and the frame being handled's.
        self.arrivals: deque[float] | None = deque() if timed else None
        self.arrived_at = 0.0
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.buf = bytearray(RECV_BUFFER)
        self.view = memoryview(self.buf)
        self.start = 0  # where the first unparsed frame begins in buf
        self.end = 0  # the end of the bytes received
        self.queue: deque[memoryview] = deque()
        self.queued_bytes = 0
        self.busy = False
        self.muted = False  # KIP-219: a throttled client's requests wait until the throttle time passes
        self.muted_until = 0.0
        self.closed = False
        self.write_paused = False
        self.read_paused = False
        self.last_active = time.monotonic()
        self.task: asyncio.Future | None = None
        # Plaintext listeners (no TLS): Fetch record sets go out with sendfile on this socket.
        self.zero_copy = False
        self.sock_fd = -1
        # On a selector loop a zero-copy answer is written straight to the socket (writev and
        # sendfile), one writable callback driving it while the socket is full: the answer's
        # chunks left, where to go on, and the future its connection waits on.
        self.loop: asyncio.AbstractEventLoop | None = None
        self.direct = False
        self.out: list | None = None
        self.out_at = 0
        self.out_done: asyncio.Future | None = None

    # ---- asyncio callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        if self.counts is not None:
            refused = self.counts.admit(peer[0] if peer else "?")
            if refused is not None:
                log.info("%s", refused)
                self.closed = True
                transport.abort()
                return
            self.counted = True
        self.dispatcher.connections.add(self)
        security = self.security
        if security is None or security.ssl_context is None:
            sock = transport.get_extra_info("socket")
            if sock is not None:
                self.sock_fd = sock.fileno()
                self.zero_copy = self.sock_fd >= 0
                self.loop = asyncio.get_running_loop()
                # asyncio's selector loops (not uvloop): the socket's writable events without a transport's
                self.direct = self.zero_copy and hasattr(self.loop, "_add_writer")
        if security is not None:
            if security.sasl:
                self.auth = SaslSession(security, self.peer, self._authenticated)
            if security.ssl_context is not None:
                # Busy until the handshake is done: requests that arrive with its last flight are
                # queued, and answered once self.transport is the TLS one.
                self.busy = True
                transport.pause_reading()
                self.tls_task = asyncio.ensure_future(self._start_tls(transport, security))

    def _authenticated(self, principal: KafkaPrincipal) -> None:
        """The SASL session's principal, whichever path (SaslAuthenticate or v0's bare tokens) proved it."""
        self.principal = principal

    async def _start_tls(self, raw: asyncio.BaseTransport, security: ListenerSecurity) -> None:
        """The TLS handshake; a failure (a plaintext client, a missing or untrusted client
        certificate) is one log line with the client's address and a closed connection."""
        try:
            tls = await asyncio.get_running_loop().start_tls(raw, self, security.ssl_context, server_side=True)
        except asyncio.CancelledError:
            raw.abort()
            raise
        except (ssl.SSLError, OSError, ConnectionError, asyncio.TimeoutError) as e:
            reason = getattr(e, "reason", None) or str(e) or type(e).__name__
            log_failure(self.peer, f"SSL handshake failed: {reason}")
            raw.abort()
            self.connection_lost(None)
            return
        finally:
            self.tls_task = None
        if tls is None:
            return
        self.transport = tls  # type: ignore[assignment]
        try:
            self.principal = ssl_principal(security, tls.get_extra_info("ssl_object"))
        except ValueError as e:
            log_failure(self.peer, str(e))
            self.close(str(e), quiet=True)
            return
        self.busy = False
        self.drain()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.counted:
            self.counted = False
            self.counts.release(self.peer.rsplit(":", 1)[0])
        self.closed = True
        self._stop_direct()
        self.queue.clear()
        if self.arrivals is not None:
            self.arrivals.clear()
        if self.task is not None:
            self.task.cancel()
        if self.tls_task is not None:
            self.tls_task.cancel()
        self.dispatcher.connections.discard(self)
        for hook in self.dispatcher.on_connection_closed:
            try:
                hook(self)
            except Exception:  # noqa: BLE001 - one failing hook must not stop the others
                log.exception("a connection-closed hook failed")

    def pause_writing(self) -> None:
        self.write_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self.write_paused = False
        self._update_reading()

    def _update_reading(self) -> None:
        """Read while the client's answers leave and its queue has room; else wait."""
        pause = self.write_paused or self.limits.full(len(self.queue), self.queued_bytes)
        if pause != self.read_paused and not self.closed:
            self.read_paused = pause
            if pause:
                self.transport.pause_reading()
            else:
                self.transport.resume_reading()

    def get_buffer(self, sizehint: int) -> memoryview:
        start, end = self.start, self.end
        room = len(self.buf) - end
        if room >= 4096:
            return self.view[end:]
        # Full: a new buffer, big enough for the frame begun at its end (when its size is known).
        need = RECV_BUFFER
        if end - start >= 4:
            (size,) = _SIZE.unpack_from(self.buf, start)
            if 0 <= size <= self.max_request_bytes:
                need = max(need, size + 4 + 4096)
        buf = bytearray(max(need, end - start + 4096))
        buf[:end - start] = self.view[start:end]
        self.buf, self.view = buf, memoryview(buf)
        self.start, self.end = 0, end - start
        return self.view[self.end:]

    def buffer_updated(self, nbytes: int) -> None:
        self.last_active = time.monotonic()
        buf, view = self.buf, self.view
        self.end = end = self.end + nbytes
        pos = first = self.start
        queue = self.queue
        while end - pos >= 4:
            (size,) = _SIZE.unpack_from(buf, pos)
            if size < 0 or size > self.max_request_bytes:
                self.close(f"request size {size} is out of range (socket.request.max.bytes = "
                           f"{self.max_request_bytes})")
                return
            if end - pos - 4 < size:
                break
            queue.append(view[pos + 4:pos + 4 + size])
            self.queued_bytes += size
            pos += 4 + size
        if pos != first:
            self.start = pos
            if pos == end and pos > len(buf) // 2:
                self._fresh_buffer()
            arrivals = self.arrivals
            if arrivals is not None:
                arrivals.extend([time.perf_counter()] * (len(queue) - len(arrivals)))
        if not self.busy:
            self.drain()
        if self.queue:
            self._update_reading()

    def _fresh_buffer(self) -> None:
        """All received bytes are frames: start the next read in a new buffer rather than at the
        old one's far end (the old one lives as long as views of its frames do)."""
        self.buf = bytearray(RECV_BUFFER)
        self.view = memoryview(self.buf)
        self.start = self.end = 0

    def data_received(self, data: bytes) -> None:
        """For a transport that hands over bytes rather than filling get_buffer's."""
        view = self.get_buffer(len(data))
        if len(view) < len(data):
            keep = self.end - self.start
            buf = bytearray(keep + len(data) + RECV_BUFFER)
            buf[:keep] = self.view[self.start:self.end]
            self.buf, self.view = buf, memoryview(buf)
            self.start, self.end = 0, keep
            view = self.view[keep:]
        view[:len(data)] = data
        self.buffer_updated(len(data))

    def idle_for(self, now: float) -> float:
        """Seconds since the client last sent a byte, or 0 while a request of its is in hand."""
        return 0.0 if self.busy or self.queue else now - self.last_active

    # ---- request processing

    def drain(self) -> None:
        """Handle queued frames in order until one has to wait."""
        dispatch = self.dispatcher.dispatch
        while self.queue and not self.closed:
            if self.muted:
                break
            frame = self.queue.popleft()
            self.queued_bytes -= len(frame)
            if self.arrivals is not None:
                self.arrived_at = self.arrivals.popleft()
            try:
                result = dispatch(self, frame)
            except Exception as e:  # the dispatcher's bug: the one connection pays, not the broker
                log.exception("request from %s failed", self.peer)
                self.close(f"internal error: {e}")
                return
            if result is None:
                continue
            if isinstance(result, list):
                try:
                    result = self._write(result)
                except OSError as e:  # a sendfile that failed (ShortFileError: the file was truncated)
                    self.close(f"fetch answer not sent whole: {e}")
                    return
                if result is None:
                    continue
            self.busy = True
            self.task = asyncio.ensure_future(result)
            self.task.add_done_callback(self._finished)
            break
        if self.read_paused:
            self._update_reading()

    def _finished(self, task: asyncio.Future) -> None:
        self.busy = False
        self.task = None
        if self.closed:
            return
        if task.cancelled():
            self.close("request cancelled")
            return
        try:
            chunks = task.result()
        except (ShortFileError, ConnectionError) as e:  # a sendfile that could not finish
            self.close(f"fetch answer not sent whole: {e}")
            return
        except OSError as e:
            if isinstance(task, asyncio.Task):  # a handler's, not a send's: as any handler bug
                log.exception("request from %s failed", self.peer)
                self.close(f"internal error: {e}")
                return
            self.close(f"fetch answer not sent whole: {e}")  # writing straight to the socket failed
            return
        except Exception as e:  # a handler bug: the one connection pays, not the broker
            log.exception("request from %s failed", self.peer)
            self.close(f"internal error: {e}")
            return
        if chunks:
            try:
                rest = self._write(chunks)
            except (ShortFileError, OSError) as e:
                self.close(f"fetch answer not sent whole: {e}")
                return
            if rest is not None:
                self.busy = True
                self.task = asyncio.ensure_future(rest)
                self.task.add_done_callback(self._finished)
                return
        self.drain()

    # ---- writing answers

    def _write(self, chunks: list):
        """Write an answer's chunks in order; a coroutine sending the rest when a file slice has
        to wait for the socket (the caller keeps the connection busy until it is done), else None."""
        slices = False
        for c in chunks:
            if type(c) is FileSlice:
                slices = True
                break
        if not slices:
            self.transport.writelines(chunks)
            return None
        if not self.zero_copy:  # TLS: the bytes through the transport, as before
            self.transport.writelines([c.read() if type(c) is FileSlice else c for c in chunks])
            return None
        if self.direct and self.transport.get_write_buffer_size() == 0:
            return self._send_direct(chunks)
        rest = self._send_now(chunks)
        return None if rest is None else self._send_later(rest)

    def _send_direct(self, chunks: list) -> asyncio.Future | None:
        """Write an answer straight to the socket (the transport's buffer is empty, and the busy
        connection writes nothing else until it is done): runs of byte chunks with one writev,
        file slices with sendfile, as far as the socket takes them now. None when all went; else
        a future done when the rest has gone, one writable callback sending it meanwhile."""
        self.out, self.out_at = chunks, 0
        if self._push():
            self.out = None
            return None
        self.out_done = fut = self.loop.create_future()
        self.loop._add_writer(self.sock_fd, self._writable)  # type: ignore[attr-defined]
        return fut

    def _push(self) -> bool:
        """Send the current answer's chunks on from where it stopped; True when all went."""
        chunks, i = self.out, self.out_at
        fd = self.sock_fd
        n = len(chunks)
        while i < n:
            c = chunks[i]
            if type(c) is FileSlice:
                if not c.send_now(fd):
                    self.out_at = i
                    return False
                c.close()
                i += 1
                continue
            j = i + 1
            while j < n and type(chunks[j]) is not FileSlice:
                j += 1
            run = chunks[i:j] if j - i < 256 else [b"".join(chunks[i:j])]
            size = 0
            for x in run:
                size += len(x)
            try:
                sent = os.writev(fd, run)
            except BlockingIOError:
                sent = 0
            if sent < size:  # the socket is full: the rest of the run waits, as one chunk
                chunks[i:j] = [memoryview(b"".join(run))[sent:]]
                self.out_at = i
                return False
            i = j
        self.out_at = i
        return True

    def _writable(self) -> None:
        """The socket has room: send more of the current answer."""
        fut = self.out_done
        if self.closed or fut is None or fut.done():
            self._stop_direct()
            return
        try:
            done = self._push()
        except BaseException as e:  # noqa: BLE001 - the connection's task reports it (and closes)
            self._stop_direct()
            fut.set_exception(e)
            return
        if done:
            self._stop_direct()
            fut.set_result(None)

    def _stop_direct(self) -> None:
        """No answer in hand any more: the writable callback off, the slices not sent closed."""
        if self.out_done is not None:
            self.out_done = None
            if not self.loop.is_closed():
                self.loop._remove_writer(self.sock_fd)  # type: ignore[attr-defined]
        out, self.out = self.out, None
        if out:
            for c in out[self.out_at:]:
                if type(c) is FileSlice:
                    c.close()

    def _send_now(self, chunks: list) -> list | None:
        """Send as far as the socket takes without waiting; the chunks left (the first a file
        slice partly sent, or waiting for the transport's buffer to empty), or None when all went."""
        transport = self.transport
        pending: list = []
        for i, c in enumerate(chunks):
            if type(c) is not FileSlice:
                pending.append(c)
                continue
            if pending:
                transport.writelines(pending)
                pending = []
            if transport.get_write_buffer_size() == 0 and c.send_now(self.sock_fd):
                c.close()
                continue
            return chunks[i:]
        if pending:
            transport.writelines(pending)
        return None

    async def _send_later(self, chunks: list) -> None:
        """The rest of an answer: each waiting file slice through loop.sendfile (which waits for
        the transport's buffer to empty first), then on without waiting while the socket takes it."""
        loop = asyncio.get_running_loop()
        try:
            while chunks:
                first = chunks[0]
                for fd, pos, n in first.remaining():
                    if self.closed:
                        return None
                    try:
                        with open(fd, "rb", buffering=0, closefd=False) as f:
                            sent = await loop.sendfile(self.transport, f, pos, n)
                    except NotImplementedError:  # a loop without sendfile (uvloop): the bytes, copied
                        data = FileSlice([(os.dup(fd), pos, n)], 0).read()
                        self.transport.write(data)
                        sent = len(data)
                    if sent < n:
                        raise ShortFileError(f"segment file ended {n - sent} bytes before the fetched range")
                first.close()
                if self.closed:
                    return None
                chunks = self._send_now(chunks[1:]) or []
        finally:
            for c in chunks:
                if type(c) is FileSlice:
                    c.close()
        return None

    def mute(self, ms: int) -> None:
        """Read no request for ``ms`` (a quota's throttle time, KIP-219); the answer already went."""
        if ms <= 0 or self.closed:
            return
        loop = asyncio.get_running_loop()
        until = loop.time() + ms / 1000
        if self.muted and until <= self.muted_until:
            return
        self.muted, self.muted_until = True, until
        loop.call_at(until, self._unmute, until)

    def _unmute(self, until: float) -> None:
        if until != self.muted_until:  # a later mute holds
            return
        self.muted = False
        if not self.busy and not self.closed:
            self.drain()

    def send(self, chunks: list) -> None:
        if not self.closed:
            self.transport.writelines([c.read() if type(c) is FileSlice else c for c in chunks])

    def close(self, reason: str, quiet: bool = False) -> None:
        """Close with a log line naming the client (``quiet``: the caller has logged it)."""
        if not self.closed:
            if not quiet:
                log.warning("closing connection from %s: %s", self.peer, reason)
            self.closed = True
            self._stop_direct()
            self.queue.clear()
            if self.arrivals is not None:
                self.arrivals.clear()
            self.transport.close()


def set_buffer_sizes(sock: socket.socket, send: int, receive: int) -> None:
    """``socket.send.buffer.bytes`` and ``socket.receive.buffer.bytes`` on a listening socket
    (its connections inherit them); -1 (or 0) leaves the OS default (autotuning). The send
    buffer bounds how much of a fetch answer one ``sendfile`` hands over before the loop waits
    for the client to read: Samsa's default, 262144 (Kafka's is 102400), halves those wake-ups,
    which cost a Python loop more than Java's (reads 1.3-1.8x faster here, at less CPU per
    byte); an autotuned buffer of megabytes cost the broker twice the CPU per byte sent."""
    if send > 0:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send)
    if receive > 0:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive)


def close_idle(connections: set[Connection], max_idle_ms: int) -> None:
    """Close the connections silent for longer than ``connections.max.idle.ms``."""
    now = time.monotonic()
    for conn in list(connections):
        idle = conn.idle_for(now)
        if idle * 1000 > max_idle_ms:
            conn.close(f"idle for {idle:.0f} s (connections.max.idle.ms = {max_idle_ms})")
