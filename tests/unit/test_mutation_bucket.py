"""The token bucket of ``controller_mutation_rate`` (KIP-599), on a clock the test sets."""

from __future__ import annotations

from samsa.security.quotas import QuotaManager


def _manager() -> QuotaManager:
    q = QuotaManager(mutation_window_s=1, mutation_num=2)
    q.load({"clients/c": {"controller_mutation_rate": "5"}})
    return q


def test_burst_then_refill_at_the_rate():
    q = _manager()
    assert q.mutations("u", "c", 10, now=100.0) == 0        # the burst: 5/s * 2 windows * 1 s
    assert q.mutations("u", "c", 2, now=100.0) == 400       # 2 tokens owed at 5 a second
    assert q.mutations("u", "c", now=100.2) == 200
    assert q.mutations("u", "c", now=100.4) == 0
    assert q.mutations("u", "c", now=200.0) == 0            # refilled, but never beyond the burst
    assert q.mutations("u", "c", 11, now=200.0) == 200


def test_no_quota_no_bucket():
    q = _manager()
    assert q.mutations("u", "other", 1000, now=1.0) is None
    q.load({})
    assert q.mutations("u", "c", 1000, now=1.0) is None
