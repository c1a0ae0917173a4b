"""A bounded chaos round (``chaos.py``): random SIGKILLs, the controller's among them, and SIGSTOP
pauses past the ZooKeeper session, under an acks=all idempotent confluent-kafka producer.

Nothing acknowledged is lost or duplicated, the replicas agree, and the cluster stays available
within the bounds the fault-tolerance issue set: no producer stall and no partition without a
live leader (two ISR members alive) longer than the session timeout + 5 s. Those are liveness
bounds with seconds of margin, not performance figures; ``bench/chaos_bench.py`` measures.
"""

from __future__ import annotations

from chaos import run_chaos

SESSION_MS = 3000


def test_random_kills_and_pauses_lose_nothing_and_stay_available(tmp_path):
    report = run_chaos(tmp_path, faults=12, seed=7, session_ms=SESSION_MS)
    print("\n".join(report.lines()))
    assert (report.kills, report.pauses) == (9, 3)
    assert report.acked > 0
    assert (report.lost, report.duplicated) == (0, 0)
    assert report.replicas_identical
    assert report.broker_log_problems == []
    bound = SESSION_MS / 1000 + 5
    assert report.longest_leaderless_s <= bound, report.lines()
    assert report.longest_stall_s <= bound, report.lines()
