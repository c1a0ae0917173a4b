"""A private asyncio event loop on a daemon thread: how the blocking clients run the async ones."""

from __future__ import annotations

import asyncio
import selectors
import threading
from concurrent.futures import Future
from typing import Any, Coroutine, TypeVar

T = TypeVar("T")
S = TypeVar("S", bound="LoopClient")


class IdleSignal:
    """Counts the times a loop went idle (about to block for I/O or a timer), so that another
    thread can wait for the loop to have done everything it could (see :class:`LoopThread`)."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self.count = 0
        self.thread_id: int | None = None  # the loop's thread

    def idle(self) -> None:
        with self._cond:
            self.count += 1
            self._cond.notify_all()

    def wait_past(self, count: int, timeout: float) -> None:
        """Until the loop has gone idle since ``count`` was read (or ``timeout`` seconds)."""
        with self._cond:
            if self.count == count:
                self._cond.wait(timeout)


class _IdleSelector(selectors.DefaultSelector):  # type: ignore[misc,valid-type]
    def __init__(self, signal: IdleSignal):
        super().__init__()
        self._signal = signal

    def select(self, timeout: float | None = None):  # type: ignore[override]
        if timeout is None or timeout > 0:  # nothing ready to run: the loop is about to wait
            self._signal.idle()
        return super().select(timeout)


class LoopThread:
    """``idle``: signalled each time the loop has nothing left to run. A thread that hands the
    loop work and waits for that signal lets the loop run it without fighting for the GIL."""

    def __init__(self, name: str, idle: IdleSignal | None = None):
        self.loop = asyncio.SelectorEventLoop(_IdleSelector(idle)) if idle is not None else asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()
        if idle is not None:
            idle.thread_id = self._thread.ident
        self.closed = False

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for its result from the calling thread."""
        if self.closed:
            coro.close()
            raise RuntimeError("the client is closed")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def submit(self, coro: Coroutine[Any, Any, T]):
        """Start ``coro`` on the loop; a concurrent.futures.Future of its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def future_of(self, task: asyncio.Future) -> Future:
        """From another thread: a concurrent.futures.Future that follows ``task`` (on this loop)."""
        result: Future = Future()

        def done(t: asyncio.Future) -> None:
            if t.cancelled():
                result.cancel()
            elif t.exception() is not None:
                result.set_exception(t.exception())
            else:
                result.set_result(t.result())
        self.loop.call_soon_threadsafe(task.add_done_callback, done)
        return result

    def stop(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self.loop.close()


class LoopClient:
    """A blocking client whose async core runs on its own :class:`LoopThread` (``self._loop``):
    ``with``, and the loop stopped if the client is dropped unclosed. ``close()`` is the client's."""

    _loop: LoopThread
    _closed: bool

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self: S) -> S:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if not getattr(self, "_closed", True) and hasattr(self, "_loop"):
            try:
                self._loop.stop()
            except Exception:  # noqa: BLE001
                pass
