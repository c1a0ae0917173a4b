"""Record futures that cost little: one ``concurrent.futures.Future`` per record is what the
API promises, but ``Future()`` makes a Condition (a lock) each time and ``set_result`` takes
it and notifies each time. A batch's futures share one Condition, are made without
``Future.__init__`` and are resolved together under one acquisition.

This sets the attributes ``Future.__init__`` sets (stable since Python 3.2); the objects
are ordinary Futures to their users: ``result``, ``exception``, ``add_done_callback``,
``concurrent.futures.wait`` and ``as_completed`` all work.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from concurrent.futures._base import FINISHED, PENDING
from typing import Any, Sequence

_new = Future.__new__


def pending_future(condition: threading.Condition) -> Future:
    f = _new(Future)
    f._condition = condition
    f._state = PENDING
    f._result = None
    f._exception = None
    f._waiters = []
    f._done_callbacks = []
    return f


def resolve_all(condition: threading.Condition, futures: Sequence[Future], results: Sequence[Any] | None,
                error: BaseException | None) -> None:
    """Finish every still-pending future: with ``results[i]``, or all with ``error``."""
    with_callbacks = []
    with condition:
        for i, f in enumerate(futures):
            if f._state != PENDING:
                continue  # cancelled by its user
            if error is None:
                f._result = results[i]  # type: ignore[index]
            else:
                f._exception = error
            f._state = FINISHED
            for waiter in f._waiters:
                if error is None:
                    waiter.add_result(f)
                else:
                    waiter.add_exception(f)
            if f._done_callbacks:
                with_callbacks.append(f)
        condition.notify_all()
    for f in with_callbacks:
        f._invoke_callbacks()
