"""The one way tests wait: for a condition, with a deadline, never for a fixed time."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable


def _tries(predicate: Callable[[], Any], what: str, timeout: float):
    """The rule both waits share: call ``predicate``, yield ``(False, None)`` after each call that
    is not yet truthy (an exception counts as "not yet") and ``(True, value)`` once one is; after
    ``timeout`` seconds raise AssertionError naming ``what`` and the last value or error."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = predicate()
            if last:
                yield True, last
                return
        except Exception as e:  # noqa: BLE001 - reported if the deadline passes
            last = e
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what} (last: {last!r})")
        yield False, None


def wait_until(predicate: Callable[[], Any], what: str = "condition", timeout: float = 60.0,
               interval: float = 0.05) -> Any:
    """Call ``predicate`` until it returns something truthy, and return that.

    An exception from ``predicate`` counts as "not yet" (a broker may be between states).
    After ``timeout`` seconds: AssertionError naming ``what`` and the last value or error seen.
    """
    for done, value in _tries(predicate, what, timeout):
        if done:
            return value
        time.sleep(interval)


async def wait_until_async(predicate: Callable[[], Any], what: str = "condition", timeout: float = 10.0,
                           interval: float = 0.005) -> Any:
    """:func:`wait_until` inside an event loop (a test driving asyncio code in-process): the loop
    runs between the calls, so the tasks under test make progress."""
    for done, value in _tries(predicate, what, timeout):
        if done:
            return value
        await asyncio.sleep(interval)
