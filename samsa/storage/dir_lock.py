"""Kafka's ``.lock`` file: one broker per log directory.

The broker takes an exclusive ``flock`` on ``<log.dir>/.lock`` before it reads or writes
anything in the directory and holds it for the life of the process (the kernel drops it
when the process dies, even by SIGKILL). A second broker pointed at the same directory
stops at once, naming the directory and the holder's pid, instead of recovering or
writing files a live broker owns.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from samsa.storage.files import LOCK_FILE


class LogDirLockedError(RuntimeError):
    pass


class LogDirLocks:
    """The held locks of a broker's log directories."""

    def __init__(self, dirs: list[Path]):
        self._fds: list[int] = []
        try:
            for d in dirs:
                self._fds.append(_lock(Path(d)))
        except BaseException:
            self.release()
            raise

    def release(self) -> None:
        for fd in self._fds:
            os.close(fd)  # closing the descriptor drops the flock
        self._fds.clear()


def _lock(d: Path) -> int:
    d.mkdir(parents=True, exist_ok=True)
    fd = os.open(d / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise LogDirLockedError(f"log directory {d} is in use by another broker (pid {holder}); "
                                "is a broker already running on it?") from None
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except OSError:
        pass  # a full directory: the lock holds all the same (the directory may go offline later)
    return fd
