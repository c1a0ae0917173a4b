"""``within`` keeps a cancellation that arrives as the awaited thing completes (3.11's
``asyncio.wait_for`` drops it, and a loop around it then never stops: a hung close)."""

import asyncio

import pytest

from samsa.timeouts import within


async def _cancel_as_event_fires() -> asyncio.Task:
    event = asyncio.Event()

    async def wait_forever() -> None:
        while True:
            try:
                await within(event.wait(), 10)
            except TimeoutError:
                pass
            event.clear()

    task = asyncio.create_task(wait_forever())
    await asyncio.sleep(0.01)  # a few loop turns: the race under test needs the task parked first
    event.set()
    await asyncio.sleep(0)  # the inner wait completes on this turn
    task.cancel()
    await asyncio.wait([task], timeout=2)
    return task


def test_cancellation_is_never_dropped():
    task = asyncio.run(_cancel_as_event_fires())
    assert task.done() and task.cancelled()


def test_times_out_and_returns():
    async def main() -> tuple:
        with pytest.raises(TimeoutError):
            await within(asyncio.sleep(5), 0.01)
        return await within(asyncio.sleep(0, "x"), 1), await within(asyncio.sleep(0, "y"), None)
    assert asyncio.run(main()) == ("x", "y")
