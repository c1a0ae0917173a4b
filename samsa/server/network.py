"""The listener: one asyncio protocol object per client connection.

Frames are cut from the byte stream here and handed to the dispatcher one at a time, in
order: Kafka answers a connection's requests in the order they came. A request whose
answer must wait (long-poll fetch, acks=all produce) holds back the ones behind it on the
same connection only; every other connection goes on.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections import deque
from typing import Awaitable, Protocol

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")


class FrameDispatcher(Protocol):
    """Where a connection hands its request frames (the server's Dispatcher)."""

    connections: set["Connection"]

    def dispatch(self, conn: "Connection", frame: bytearray) -> list | Awaitable[list | None] | None: ...


class Connection(asyncio.Protocol):
    def __init__(self, dispatcher: FrameDispatcher, max_request_bytes: int, listener: str = "",
                 timed: bool = False):
        self.dispatcher = dispatcher
        self.listener = listener  # the listener's name (PLAINTEXT), for the connection-count metric
        # With metrics on: when each queued frame arrived (perf_counter), and the frame being handled's.
        self.arrivals: deque[float] | None = deque() if timed else None
        self.arrived_at = 0.0
        self.max_request_bytes = max_request_bytes
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.buf = bytearray()
        self.queue: deque[bytearray] = deque()
        self.busy = False
        self.closed = False
        self.write_paused = False
        self.task: asyncio.Future | None = None

    # ---- asyncio callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.dispatcher.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.queue.clear()
        if self.arrivals is not None:
            self.arrivals.clear()
        if self.task is not None:
            self.task.cancel()
        self.dispatcher.connections.discard(self)

    def pause_writing(self) -> None:
        self.write_paused = True
        self.transport.pause_reading()

    def resume_writing(self) -> None:
        self.write_paused = False
        self.transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        pos, end = 0, len(buf)
        while end - pos >= 4:
            (size,) = _SIZE.unpack_from(buf, pos)
            if size < 0 or size > self.max_request_bytes:
                self.close(f"request size {size} is out of range (socket.request.max.bytes = "
                           f"{self.max_request_bytes})")
                return
            if end - pos - 4 < size:
                break
            self.queue.append(buf[pos + 4:pos + 4 + size])
            pos += 4 + size
        if pos:
            del buf[:pos]
            arrivals = self.arrivals
            if arrivals is not None:
                arrivals.extend([time.perf_counter()] * (len(self.queue) - len(arrivals)))
        if not self.busy:
            self.drain()

    # ---- request processing

    def drain(self) -> None:
        """Handle queued frames in order until one has to wait."""
        dispatch = self.dispatcher.dispatch
        while self.queue and not self.closed:
            frame = self.queue.popleft()
            if self.arrivals is not None:
                self.arrived_at = self.arrivals.popleft()
            result = dispatch(self, frame)
            if result is None:
                continue
            if isinstance(result, list):
                self.transport.writelines(result)
                continue
            self.busy = True
            self.task = asyncio.ensure_future(result)
            self.task.add_done_callback(self._finished)
            return

    def _finished(self, task: asyncio.Future) -> None:
        self.busy = False
        self.task = None
        if self.closed or task.cancelled():
            return
        try:
            chunks = task.result()
        except Exception as e:  # a handler bug: the one connection pays, not the broker
            log.exception("request from %s failed", self.peer)
            self.close(f"internal error: {e}")
            return
        if chunks:
            self.transport.writelines(chunks)
        self.drain()

    def send(self, chunks: list) -> None:
        if not self.closed:
            self.transport.writelines(chunks)

    def close(self, reason: str) -> None:
        if not self.closed:
            log.warning("closing connection from %s: %s", self.peer, reason)
            self.closed = True
            self.queue.clear()
            if self.arrivals is not None:
                self.arrivals.clear()
            self.transport.close()
