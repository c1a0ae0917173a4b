"""KRaft's consensus under a randomised simulation (``raft_sim``): thousands of seeds of message
loss, duplication, reordering, partitions, crashes and restarts, snapshots, clients, an observer
(a broker fetching the metadata log) and, on odd seeds, voters added and removed (KIP-853), checking
Raft's safety properties and liveness after the heal. A failing seed's message starts with
``seed=N n=M`` and ends with the trace of its last events; ``SAMSA_RAFT_SEEDS=N`` runs N seeds per
quorum size (default 1000), ``SAMSA_RAFT_SEED=N`` only that one.

The last tests put known bugs into the core and check that the simulation catches each: the
properties can fail."""

from __future__ import annotations

import dataclasses
import os

import pytest

import raft_sim
from samsa.raft import consensus
from samsa.raft.consensus import RaftNode, Transition, RaftState, Ev

SEEDS = int(os.environ.get("SAMSA_RAFT_SEEDS", "1000"))
ONE_SEED = os.environ.get("SAMSA_RAFT_SEED")


def seeds():
    return [int(ONE_SEED)] if ONE_SEED else range(SEEDS)


@pytest.mark.parametrize("n", [3, 5], ids=["3-voters", "5-voters"])
def test_safety_and_liveness_over_many_seeds(n):
    exercised = {"elections": 0, "crashes": 0, "truncations": 0, "snapshots installed": 0, "observer commits": 0,
                 "voter changes": 0}
    for seed in seeds():
        sim = raft_sim.Simulation(seed, n).run()   # raises SafetyViolation with the seed and a trace
        exercised["elections"] += len(sim.leaders)
        exercised["observer commits"] += sim.nodes[n + 1].hw
        exercised["voter changes"] += sim.voter_changes
        for _, *what in sim.trace:
            if len(what) > 1 and what[1] == "CRASH":
                exercised["crashes"] += 1
            elif len(what) > 1 and what[1] == "truncate":
                exercised["truncations"] += 1
            elif len(what) > 1 and what[1] == "install snapshot":
                exercised["snapshots installed"] += 1
    if not ONE_SEED and SEEDS >= 200:
        # the runs did meet what the properties are about
        assert all(count > 0 for count in exercised.values()), exercised


def _first_violation(n: int, limit: int = 400, **kw) -> str:
    for seed in range(limit):
        try:
            raft_sim.Simulation(seed, n, **kw).run()
        except raft_sim.SafetyViolation as e:
            return str(e)
        except consensus.RaftInvariantError as e:   # the core itself noticed
            return f"seed={seed} core: {e}"
    return ""


def test_two_votes_in_one_epoch_are_caught(monkeypatch):
    """Bug: a voter votes for every candidate of an epoch (no leader known), not just the first."""
    monkeypatch.setattr(RaftNode, "_may_vote_for", lambda self, candidate: self.leader_id == consensus.NO_ID)
    found = _first_violation(3)
    assert found.startswith("seed="), "no seed caught a voter voting twice in one epoch"
    assert "--- last events ---" in found and "two leaders in epoch" in found, found[:300]


def test_a_high_watermark_from_a_minority_is_caught(monkeypatch):
    """Bug: the leader counts an offset committed once the fastest voter has it."""
    def minority_hw(self):
        offsets = sorted([self.log.end] + [v.end_offset for v in self.v.voters.values()], reverse=True)
        if offsets[0] > self.v.epoch_start_offset and (self.high_watermark is None or offsets[0] > self.high_watermark):
            self._set_high_watermark(offsets[0])
            self._wake_parked()
    monkeypatch.setattr(RaftNode, "_update_high_watermark", minority_hw)
    found = _first_violation(3)
    assert found.startswith("seed="), "no seed caught a high watermark moved by a minority"


def test_a_vote_for_a_stale_log_is_caught(monkeypatch):
    """Bug: votes are granted without the log up-to-date check."""
    monkeypatch.setattr(RaftNode, "_log_up_to_date", lambda self, epoch, end: True)
    found = _first_violation(3)
    assert found.startswith("seed="), "no seed caught a leader elected without the committed entries"


def test_a_follower_that_does_not_truncate_is_caught(monkeypatch):
    """Bug: a follower ignores DivergingEpoch and appends after its divergent suffix."""
    original = RaftNode._on_fetch_response

    def no_truncation(self, ev):
        resp = ev.message
        if resp.diverging_epoch is not None:
            ev = dataclasses.replace(ev, message=dataclasses.replace(resp, diverging_epoch=None))
        return original(self, ev)
    monkeypatch.setitem(consensus.TRANSITIONS, (RaftState.FOLLOWER, Ev.FETCH_RESPONSE),
                        Transition(no_truncation, frozenset()))
    found = _first_violation(3)
    assert found.startswith("seed="), "no seed caught divergent logs"


def test_a_high_watermark_over_older_epochs_only_is_caught(monkeypatch):
    """Bug: the leader moves the high watermark before an offset of its own epoch is on a majority
    (over entries of older epochs only: Raft's figure 8), so it can go behind what was committed."""
    def any_epoch_hw(self):
        offsets = sorted([self.log.end] + [v.end_offset for v in self.v.voters.values()], reverse=True)
        majority = offsets[len(self.voters) // 2]
        if majority > 0 and (self.high_watermark is None or majority > self.high_watermark):
            self._set_high_watermark(majority)
            self._wake_parked()
    monkeypatch.setattr(RaftNode, "_update_high_watermark", any_epoch_hw)
    found = _first_violation(3)
    assert found.startswith("seed="), "no seed caught a high watermark of older epochs"


def test_a_new_leader_telling_its_old_high_watermark_is_caught(monkeypatch):
    """Bug: a new leader answers Fetch with the high watermark it knew before its election, which
    may be behind what its followers had committed."""
    monkeypatch.setattr(RaftNode, "_hw_wire", lambda self: -1 if self.high_watermark is None else self.high_watermark)
    found = _first_violation(3)
    assert found.startswith("seed="), "no seed caught a high watermark going back"


def test_two_voter_changes_at_once_are_caught(monkeypatch):
    """Bug (KIP-853): the leader takes a voter change before the previous one is committed, so
    two voter sets without a common majority can both elect and commit."""
    monkeypatch.setattr(RaftNode, "_voter_change_pending", lambda self: False)
    found = _first_violation(5)
    assert found.startswith("seed="), "no seed caught two uncommitted voter changes"


def test_a_quorum_that_cannot_elect_is_caught(monkeypatch):
    """Liveness: voters that refuse every vote never elect a leader after the heal."""
    monkeypatch.setattr(RaftNode, "_log_up_to_date", lambda self, epoch, end: False)
    found = _first_violation(3, limit=1)
    assert found.startswith("seed=0 n=3: no leader committed an append within"), found[:300]
