"""Open-file descriptors, the resource that bounds how many partitions a broker can host.

Each log segment keeps its ``.log`` file open (indexes are opened only to be written), so
a partition needs at least one descriptor, and connections need one each. The broker
raises its soft limit to the hard limit at start (Kafka's operators set ``ulimit -n`` to
100,000 or more) and refuses to create partitions beyond what is left.
"""

from __future__ import annotations

import os
import resource

#: Descriptors kept free for connections, index writes and the interpreter itself.
MIN_RESERVE = 64


def raise_open_file_limit() -> tuple[int, int]:
    """Raise the soft RLIMIT_NOFILE to the hard one; (soft before, soft now)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if hard == resource.RLIM_INFINITY:
        try:
            target = int(open("/proc/sys/fs/nr_open").read())
        except (OSError, ValueError):
            return soft, soft
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            return soft, target
        except (ValueError, OSError):
            pass
    return soft, soft


def descriptors_in_use() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0


def descriptors_free() -> int:
    """How many more files this process can open, keeping a reserve for everything else."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 1 << 30
    return soft - descriptors_in_use() - max(MIN_RESERVE, soft // 10)
