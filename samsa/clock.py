"""The one wall clock of Samsa's broker side: milliseconds since the epoch, as Kafka stamps
records, segments, leader changes and committed offsets."""

from __future__ import annotations

import time


def now_ms() -> int:
    return int(time.time() * 1000)
