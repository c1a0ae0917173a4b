"""``within``: ``asyncio.wait_for`` without Python 3.11's lost cancellation.

On 3.11, ``wait_for`` returns the inner result when the awaiting task is cancelled in the
same loop turn as the inner future completes, so the cancellation is silently dropped; a
``while True`` loop around it then never stops and whoever awaits the cancelled task hangs.
``asyncio.timeout`` counts cancellations (``Task.uncancel``) and never drops one.
"""

from __future__ import annotations

import asyncio
from typing import Awaitable, TypeVar

T = TypeVar("T")


async def within(aw: Awaitable[T], timeout: float | None) -> T:
    """``await aw``, raising ``TimeoutError`` after ``timeout`` seconds (None: no limit)."""
    async with asyncio.timeout(timeout):
        return await aw
