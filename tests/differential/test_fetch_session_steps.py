"""Fetch sessions (KIP-227) on both brokers, step by step: full fetch opening a session,
incremental fetches carrying only partitions with news, wrong epochs, unknown and closed
sessions, forgotten partitions, v12 sessions asked in v13 and back (error codes 70, 71, 106).
The steps are in ``tests/fetch_session_scenarios.py``."""

from __future__ import annotations

import os
import time

from fetch_session_scenarios import EXPECTED, run
from harness import normalise


def test_fetch_session_steps(diff):
    topic = f"diff-fetch-sessions-{os.getpid()}-{int(time.time())}"
    kafka, _ = diff(lambda side: run(side.host, side.port, topic))
    # what Kafka answers is still what it answered when the compat test's EXPECTED was recorded
    assert kafka == normalise(EXPECTED)
