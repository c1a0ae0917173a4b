"""KRaft's consensus core (samsa.raft.consensus) driven event by event: no sockets, no clocks.

Each test builds a node from what a restart would read (quorum-state, log offsets), hands it
events with the time, and looks at the outputs: messages, quorum-state writes, log writes and
truncations, the high watermark, the timer."""

from __future__ import annotations

import json
import random

import pytest

from samsa.protocol import codec
from samsa.protocol.errors import (E_DUPLICATE_VOTER, E_FENCED_LEADER_EPOCH, E_INCONSISTENT_CLUSTER_ID,
                                   E_NOT_LEADER_OR_FOLLOWER, E_POSITION_OUT_OF_RANGE, E_REQUEST_TIMED_OUT,
                                   E_SNAPSHOT_NOT_FOUND, E_UNKNOWN_LEADER_EPOCH, E_UNSUPPORTED_VERSION,
                                   E_VOTER_NOT_FOUND)
from samsa.raft import messages as m
from samsa.raft.consensus import (TRANSITIONS, Ev, LogState, RaftConfig, RaftInvariantError, RaftNode, RaftState)
from samsa.raft.messages import (NO_ID, Append, AppendRefused, Appended, AppendToLog, Batch,
                                 BeginQuorumEpochRequest, BeginQuorumEpochResponse, Committed, EndQuorumEpochRequest,
                                 EpochEndOffset, FetchRequest, FetchResponse, FetchSnapshotRequest,
                                 FetchSnapshotResponse, InstallSnapshot, LeaderIdAndEpoch, PersistQuorumState,
                                 Received, RecordsRange, Resign, Send, SetTimer, SnapshotChunk, SnapshotId,
                                 SnapshotTaken, TimerExpired, TruncateTo, VoteRequest, VoteResponse,
                                 WriteSnapshotChunk)
from samsa.raft.quorum_state import QuorumStateData

CFG = RaftConfig(election_timeout_ms=100, fetch_timeout_ms=200, request_timeout_ms=150, retry_backoff_ms=5,
                 fetch_max_wait_ms=50, election_backoff_max_ms=100)
CID = "cluster"


def node(node_id=1, voters=(1, 2, 3), *, qs=None, log=LogState(), now=0):
    n = RaftNode(node_id, voters, cluster_id=CID, config=CFG, quorum_state=qs, log=log, rng=random.Random(7))
    n.out = n.start(now)
    return n


def sends(outputs, kind=None):
    return [o for o in outputs if isinstance(o, Send) and (kind is None or isinstance(o.message, kind))]


def of(outputs, kind):
    return [o for o in outputs if isinstance(o, kind)]


def timer(outputs):
    return of(outputs, SetTimer)[-1].deadline_ms


def fire(n, now):
    return n.handle(TimerExpired(), now)


def answer(n, request: Send, response, now):
    return n.handle(Received(request.destination, response, request.correlation_id), now)


def vote(n, candidate, epoch, last_epoch, last_offset, now=1, pre_vote=False, cid=99):
    out = n.handle(Received(candidate, VoteRequest(CID, n.node_id, epoch, candidate, last_epoch, last_offset,
                                                   pre_vote), cid), now)
    return out, sends(out, VoteResponse)[0].message


def elect(n, now=0):
    """Drive node n (Unattached) to leader: election timeout, pre-votes, votes from every voter."""
    out = fire(n, timer(n.out))
    t = timer(n.out)
    for s in sends(out, VoteRequest):
        out2 = answer(n, s, VoteResponse(0, NO_ID, n.epoch, True), t)
        if n.state == RaftState.CANDIDATE:
            break
    for s in sends(out2, VoteRequest):
        out3 = answer(n, s, VoteResponse(0, NO_ID, n.epoch, True), t)
        if n.state == RaftState.LEADER:
            return out3
    raise AssertionError(n.state)


def log_of(*runs, end):
    """LogState from (epoch, start offset) runs ending at ``end``."""
    return LogState(0, end, tuple(runs))


# ---- the table ----

def test_every_state_has_a_row_for_every_request_and_timer_it_can_get():
    for state in RaftState:
        for ev in (Ev.VOTE_REQUEST, Ev.BEGIN_EPOCH_REQUEST, Ev.END_EPOCH_REQUEST, Ev.FETCH_REQUEST,
                   Ev.FETCH_SNAPSHOT_REQUEST, Ev.HIGHER_EPOCH, Ev.APPEND, Ev.RESIGN, Ev.SNAPSHOT_TAKEN):
            assert (state, ev) in TRANSITIONS, (state, ev)
    # a fetch answer is a follower's, or an observer's that looks for the leader (Unattached)
    assert {s for s, e in TRANSITIONS if e == Ev.FETCH_RESPONSE} == {RaftState.FOLLOWER, RaftState.UNATTACHED}
    assert {s for s, e in TRANSITIONS if e == Ev.CHECK_QUORUM_TIMEOUT} == {RaftState.LEADER}
    # a leader is only ever reached from a candidate's votes (or a lone voter's election timeout)
    to_leader = {(s, e) for (s, e), t in TRANSITIONS.items() if RaftState.LEADER in t.to}
    assert {e for _, e in to_leader} <= {Ev.VOTE_RESPONSE, Ev.ELECTION_TIMEOUT, Ev.FETCH_TIMEOUT}


def test_a_move_the_table_does_not_list_is_refused():
    n = node()
    n._allowed = frozenset({RaftState.UNATTACHED})
    with pytest.raises(RaftInvariantError, match="may not become Leader"):
        n._transition(RaftState.LEADER)


# ---- start-up ----

def test_a_fresh_voter_starts_unattached_with_an_election_timer():
    n = node()
    assert n.state == RaftState.UNATTACHED and n.epoch == 0
    assert 100 <= timer(n.out) < 200   # election timeout, randomised in [T, 2T)
    assert not sends(n.out)


def test_a_lone_voter_elects_itself_and_commits_its_leader_change():
    n = node(voters=(1,))
    out = fire(n, timer(n.out))
    assert n.state == RaftState.LEADER and n.epoch == 1
    qs = of(out, PersistQuorumState)[-1].state
    assert (qs.leader_id, qs.leader_epoch, qs.voted_id) == (1, 1, 1)
    batch = of(out, AppendToLog)[0].batches[0]
    assert batch.control and (batch.base_offset, batch.epoch) == (0, 1)
    assert of(out, Committed)[-1].high_watermark == 1
    out = n.handle(Append("x", 2), 5)
    assert of(out, Appended) == [Appended(1, 2, 1)] and of(out, Committed)[-1].high_watermark == 3


def test_restart_as_the_leader_it_was_resigns():
    n = node(qs=QuorumStateData(leader_id=1, leader_epoch=4, voted_id=1), log=log_of((4, 0), end=3))
    assert n.state == RaftState.RESIGNED and n.epoch == 4
    ends = sends(n.out, EndQuorumEpochRequest)
    assert sorted(s.destination for s in ends) == [2, 3]
    assert ends[0].message.leader_epoch == 4 and ends[0].message.leader_id == 1


def test_restart_keeps_its_vote_and_its_leader():
    n = node(qs=QuorumStateData(leader_id=NO_ID, leader_epoch=3, voted_id=2))
    assert n.state == RaftState.UNATTACHED and (n.epoch, n.voted_id) == (3, 2)
    _, resp = vote(n, 3, 3, 0, 0)
    assert not resp.vote_granted                     # voted for 2 in epoch 3 already
    n = node(qs=QuorumStateData(leader_id=2, leader_epoch=3))
    assert n.state == RaftState.FOLLOWER
    f = sends(n.out, FetchRequest)[0]
    assert f.destination == 2 and f.message.current_leader_epoch == 3 and f.message.fetch_offset == 0


# ---- elections ----

def test_election_timeout_asks_for_pre_votes_without_bumping_the_epoch():
    n = node(log=log_of((2, 0), end=5), qs=QuorumStateData(leader_epoch=2))
    out = fire(n, timer(n.out))
    assert n.state == RaftState.PROSPECTIVE and n.epoch == 2
    assert not of(out, PersistQuorumState)
    reqs = sends(out, VoteRequest)
    assert sorted(r.destination for r in reqs) == [2, 3]
    msg = reqs[0].message
    assert msg.pre_vote and msg.replica_epoch == 3 and msg.replica_id == 1
    assert (msg.last_offset_epoch, msg.last_offset) == (2, 5)


def test_pre_vote_majority_makes_a_candidate_that_persists_its_vote_before_asking():
    n = node()
    out = fire(n, timer(n.out))
    out = answer(n, sends(out, VoteRequest)[0], VoteResponse(0, NO_ID, 0, True), 150)
    assert n.state == RaftState.CANDIDATE and n.epoch == 1 and n.voted_id == 1
    kinds = [type(o) for o in out if isinstance(o, (PersistQuorumState, Send))]
    assert kinds[0] is PersistQuorumState                      # the vote for itself is durable first
    reqs = sends(out, VoteRequest)
    assert {r.destination for r in reqs} == {2, 3} and not reqs[0].message.pre_vote
    assert reqs[0].message.replica_epoch == 1


def test_pre_vote_rejections_and_timeout_go_back_to_unattached():
    n = node()
    out = fire(n, timer(n.out))
    for s in sends(out, VoteRequest):
        answer(n, s, VoteResponse(0, NO_ID, 0, False), 120)
    assert n.state == RaftState.PROSPECTIVE
    fire(n, 10_000)
    assert n.state == RaftState.UNATTACHED and n.epoch == 0


def test_vote_majority_makes_a_leader_that_begins_its_epoch():
    n = node()
    out = elect(n)
    assert n.state == RaftState.LEADER and n.epoch == 1 and n.leader_id == 1
    assert of(out, AppendToLog)[0].batches[0].control
    bqe = sends(out, BeginQuorumEpochRequest)
    assert sorted(s.destination for s in bqe) == [2, 3] and bqe[0].message.leader_epoch == 1
    assert not of(out, Committed)      # the leader change is on one voter of three


def test_one_vote_per_epoch_persisted_before_the_answer():
    n = node()
    out, resp = vote(n, 2, 1, 0, 0)
    assert resp.vote_granted and resp.leader_epoch == 1 and n.epoch == 1 and n.voted_id == 2
    last = of(out, PersistQuorumState)[-1]
    assert (last.state.leader_epoch, last.state.voted_id) == (1, 2)
    assert out.index(last) < out.index(sends(out)[0])     # durable before the answer leaves
    _, resp = vote(n, 3, 1, 0, 0)
    assert not resp.vote_granted                      # another candidate, same epoch
    _, resp = vote(n, 2, 1, 0, 0)
    assert resp.vote_granted                          # the same candidate again (a retry)


@pytest.mark.parametrize("last_epoch,last_offset,granted", [
    (2, 5, True),     # same last epoch, same end
    (2, 9, True),     # longer
    (3, 1, True),     # newer last epoch wins, whatever the length
    (2, 4, False),    # shorter
    (1, 9, False),    # older last epoch, longer
], ids=["same", "longer", "newer-epoch", "shorter", "older-epoch"])
def test_votes_only_for_a_log_at_least_as_up_to_date(last_epoch, last_offset, granted):
    n = node(log=log_of((1, 0), (2, 3), end=5), qs=QuorumStateData(leader_epoch=2))
    _, resp = vote(n, 2, 4, last_epoch, last_offset)
    assert resp.vote_granted is granted
    assert n.epoch == 4                                # the candidate's epoch is taken either way


def test_a_vote_of_an_older_epoch_is_fenced():
    n = node(qs=QuorumStateData(leader_epoch=5))
    _, resp = vote(n, 2, 4, 0, 0)
    assert resp.error_code == E_FENCED_LEADER_EPOCH and not resp.vote_granted and resp.leader_epoch == 5


def test_granting_a_pre_vote_changes_nothing():
    n = node(qs=QuorumStateData(leader_epoch=2))
    out, resp = vote(n, 2, 3, 0, 0, pre_vote=True)
    assert resp.vote_granted
    assert n.epoch == 2 and n.voted_id == NO_ID and not of(out, PersistQuorumState)
    _, resp = vote(n, 3, 3, 0, 0, pre_vote=True)
    assert resp.vote_granted                          # pre-votes are not "the" vote


def test_a_follower_that_hears_its_leader_refuses_pre_votes():
    n = node(qs=QuorumStateData(leader_id=2, leader_epoch=3))
    _, resp = vote(n, 3, 4, 0, 0, pre_vote=True)
    assert resp.vote_granted                          # no fetch answered yet in this epoch
    f = sends(n.out, FetchRequest)[0]
    answer(n, f, FetchResponse(0, -1, 0, LeaderIdAndEpoch(2, 3)), 5)
    _, resp = vote(n, 3, 4, 0, 0, pre_vote=True, now=6)
    assert not resp.vote_granted and resp.leader_id == 2


def test_a_leader_refuses_votes_of_its_epoch_and_follows_a_newer_one():
    n = node()
    elect(n)
    _, resp = vote(n, 2, 1, 9, 9)
    assert not resp.vote_granted
    _, resp = vote(n, 2, 1, 9, 9, pre_vote=True)
    assert not resp.vote_granted
    out, resp = vote(n, 2, 2, 1, 1)
    assert resp.vote_granted and n.state == RaftState.UNATTACHED and n.epoch == 2


def test_a_candidate_hearing_of_a_newer_epoch_steps_down():
    n = node()
    out = fire(n, timer(n.out))
    out = answer(n, sends(out, VoteRequest)[0], VoteResponse(0, NO_ID, 0, True), 150)
    req = sends(out, VoteRequest)[0]
    answer(n, req, VoteResponse(0, 3, 4, False), 151)
    assert n.state == RaftState.FOLLOWER and (n.leader_id, n.epoch) == (3, 4)


def test_a_late_or_duplicated_response_is_dropped():
    n = node()
    out = fire(n, timer(n.out))
    req = sends(out, VoteRequest)[0]
    out = n.handle(Received(req.destination, VoteResponse(0, NO_ID, 0, True), req.correlation_id + 100), 120)
    assert n.state == RaftState.PROSPECTIVE
    answer(n, req, VoteResponse(0, NO_ID, 0, True), 121)
    assert n.state == RaftState.CANDIDATE
    answer(n, req, VoteResponse(0, NO_ID, 1, True), 122)   # the same answer again: not a second vote
    assert n.state == RaftState.CANDIDATE


# ---- BeginQuorumEpoch / EndQuorumEpoch ----

def test_begin_quorum_epoch_makes_a_follower_and_fences_older_epochs():
    n = node(qs=QuorumStateData(leader_epoch=2))
    out = n.handle(Received(3, BeginQuorumEpochRequest(CID, 1, 3, 4), 9), 1)
    assert n.state == RaftState.FOLLOWER and (n.leader_id, n.epoch) == (3, 4)
    assert sends(out, BeginQuorumEpochResponse)[0].message == BeginQuorumEpochResponse(0, 3, 4)
    assert sends(out, FetchRequest)[0].destination == 3
    out = n.handle(Received(2, BeginQuorumEpochRequest(CID, 1, 2, 3), 10), 2)
    assert sends(out)[0].message.error_code == E_FENCED_LEADER_EPOCH and n.leader_id == 3


def test_another_cluster_is_refused():
    n = node()
    out = n.handle(Received(3, BeginQuorumEpochRequest("other", 1, 3, 4), 9), 1)
    assert sends(out)[0].message.error_code == E_INCONSISTENT_CLUSTER_ID and n.epoch == 0


def test_end_quorum_epoch_brings_the_election_forward_for_the_preferred():
    n = node(qs=QuorumStateData(leader_id=2, leader_epoch=3))
    assert timer(n.out) >= 200          # fetch timeout ahead
    out = n.handle(Received(2, EndQuorumEpochRequest(CID, 2, 3, (1, 3)), 4), 10)
    assert sends(out, m.EndQuorumEpochResponse)[0].message.error_code == 0
    assert timer(out) == 10             # first preferred: no backoff
    fire(n, 10)
    assert n.state == RaftState.PROSPECTIVE


def test_a_leader_without_a_majority_fetching_resigns():
    n = node()
    elect(n)
    out = fire(n, 1_000)
    assert n.state == RaftState.RESIGNED and n.epoch == 1
    assert sorted(s.destination for s in sends(out, EndQuorumEpochRequest)) == [2, 3]
    refused = of(n.handle(Append("x"), 1_002), AppendRefused)[0]
    assert refused.error_code == E_NOT_LEADER_OR_FOLLOWER


def test_resign_sends_end_quorum_epoch_with_the_most_caught_up_first():
    n = node()
    elect(n)
    n.handle(Received(3, FetchRequest(CID, 3, 1, 1, 1, 0), 50), 5)
    out = n.handle(Resign(), 6)
    assert n.state == RaftState.RESIGNED
    assert sends(out, EndQuorumEpochRequest)[0].message.preferred_candidates == (3, 2)


def test_a_follower_that_loses_its_leader_becomes_prospective():
    n = node(qs=QuorumStateData(leader_id=2, leader_epoch=3))
    out = fire(n, 200)
    assert n.state == RaftState.PROSPECTIVE and n.epoch == 3 and n.leader_id == 2
    assert all(s.message.pre_vote for s in sends(out, VoteRequest))
    # a voter that still hears the leader says so: back to following it
    req = sends(out, VoteRequest)[0]
    answer(n, req, VoteResponse(0, 2, 3, False), 201)
    assert n.state == RaftState.FOLLOWER and n.leader_id == 2


# ---- Fetch and the high watermark ----

def leader_with(log: LogState, epoch: int, voters=(1, 2, 3)):
    """Node 1 made leader of ``epoch`` over ``log``."""
    n = node(voters=voters, log=log, qs=QuorumStateData(leader_epoch=epoch - 1))
    out = elect(n)
    assert n.epoch == epoch
    n.out = out
    return n


def fetch(n, replica, offset, last_epoch, now, *, hw=2**63 - 1, epoch=None, wait=0, cid=None):
    req = FetchRequest(CID, replica, n.epoch if epoch is None else epoch, offset, last_epoch, 0, max_wait_ms=wait,
                       high_watermark=hw)
    return n.handle(Received(replica, req, cid or now + 1000), now)


def test_high_watermark_is_the_majority_offset_once_the_epoch_has_one():
    n = leader_with(log_of((1, 0), end=5), 2)            # epoch 2 starts at 5 (its leader change)
    assert n.high_watermark is None
    out = fetch(n, 2, 5, 1, 10)                          # voter 2 has the old epoch's entries only
    assert not of(out, Committed) and n.high_watermark is None
    assert sends(out, FetchResponse)[0].message.high_watermark == -1
    out = fetch(n, 2, 6, 2, 11)
    assert of(out, Committed) == [Committed(6)]          # leader and voter 2: a majority of three
    n.handle(Append("a", 3), 12)
    assert n.high_watermark == 6
    out = fetch(n, 3, 9, 2, 13)
    assert of(out, Committed) == [Committed(9)]
    out = fetch(n, 3, 6, 2, 14, cid=77)                  # a stale offset does not move it back
    assert n.high_watermark == 9 and not of(out, Committed)


def test_five_voters_need_three():
    n = leader_with(LogState(), 1, voters=(1, 2, 3, 4, 5))
    n.handle(Append("a", 4), 1)                          # log end 5
    fetch(n, 2, 5, 1, 2)
    assert n.high_watermark is None
    out = fetch(n, 3, 3, 1, 3)
    assert of(out, Committed) == [Committed(3)]          # 5, 5, 3 -> 3


def test_a_fetch_with_nothing_new_waits_for_an_append():
    n = leader_with(LogState(), 1)
    t = n._now
    fetch(n, 2, 1, 1, t + 1)
    assert n.high_watermark == 1
    out = fetch(n, 2, 1, 1, t + 2, hw=1, wait=50, cid=500)
    assert not sends(out, FetchResponse)                 # parked
    assert timer(out) == t + 52
    out = n.handle(Append("a"), t + 20)
    resp = [s for s in sends(out, FetchResponse) if s.correlation_id == 500][0].message
    assert resp.records == RecordsRange(1, 2)
    out = fetch(n, 3, 2, 1, t + 21, hw=1, wait=50, cid=501)   # 3 does not know hw 2 yet: answered at once
    assert sends(out, FetchResponse)[0].message.high_watermark == 2
    out = fetch(n, 2, 2, 1, t + 22, hw=2, wait=50, cid=502)
    assert not sends(out, FetchResponse)
    out = fire(n, t + 72)                                # MaxWaitMs passed: answered empty
    resp = [s for s in sends(out, FetchResponse) if s.correlation_id == 502][0].message
    assert resp.records == () and resp.high_watermark == 2
    # A fetcher that does not tell its high watermark (Fetch v17: NO_HW) waits too, rather than
    # being answered at once, again and again, while nothing happens (an idle quorum's CPU).
    out = fetch(n, 3, 2, 1, t + 80, wait=50, cid=503)
    assert not sends(out, FetchResponse)
    out = n.handle(Append("b"), t + 90)
    resp = [s for s in sends(out, FetchResponse) if s.correlation_id == 503][0].message
    assert resp.records == RecordsRange(2, 3)


def test_fetch_of_another_epoch_is_fenced_or_unknown():
    n = leader_with(LogState(), 3)
    assert sends(fetch(n, 2, 0, 0, 5, epoch=2), FetchResponse)[0].message.error_code == E_FENCED_LEADER_EPOCH
    assert sends(fetch(n, 2, 0, 0, 6, epoch=4), FetchResponse)[0].message.error_code == E_UNKNOWN_LEADER_EPOCH
    f = node(qs=QuorumStateData(leader_id=2, leader_epoch=3), node_id=3)
    resp = sends(fetch(f, 1, 0, 0, 5, epoch=3), FetchResponse)[0].message
    assert resp.error_code == E_NOT_LEADER_OR_FOLLOWER and resp.current_leader == LeaderIdAndEpoch(2, 3)


def test_divergence_is_answered_with_the_epoch_and_where_it_ends():
    n = leader_with(log_of((1, 0), (3, 5), end=8), 4)     # leader: epoch 1 [0,5), 3 [5,8), 4 [8,9)
    resp = sends(fetch(n, 2, 7, 2, 5), FetchResponse)[0].message
    assert resp.diverging_epoch == EpochEndOffset(1, 5) and resp.records == ()
    resp = sends(fetch(n, 2, 9, 3, 6), FetchResponse)[0].message    # epoch 3 ends at 8, not 9
    assert resp.diverging_epoch == EpochEndOffset(3, 8)
    resp = sends(fetch(n, 2, 6, 3, 7), FetchResponse)[0].message    # a prefix: valid
    assert resp.diverging_epoch is None and resp.records == RecordsRange(6, 9)


def test_a_follower_truncates_where_the_leader_says_and_fetches_again():
    f = node(qs=QuorumStateData(leader_id=2, leader_epoch=4), log=log_of((1, 0), (2, 5), end=7))
    req = sends(f.out, FetchRequest)[0]
    assert (req.message.fetch_offset, req.message.last_fetched_epoch) == (7, 2)
    out = answer(f, req, FetchResponse(0, -1, 0, LeaderIdAndEpoch(2, 4), diverging_epoch=EpochEndOffset(1, 5)), 5)
    assert of(out, TruncateTo) == [TruncateTo(5)]
    nxt = sends(out, FetchRequest)[0].message
    assert (nxt.fetch_offset, nxt.last_fetched_epoch) == (5, 1)
    out = answer(f, sends(out, FetchRequest)[0], FetchResponse(0, 6, 0, LeaderIdAndEpoch(2, 4), records=(
        Batch(5, 5, 3), Batch(6, 8, 4))), 6)
    assert of(out, AppendToLog)[0].batches == (Batch(5, 5, 3), Batch(6, 8, 4))
    assert of(out, Committed) == [Committed(6)]
    assert sends(out, FetchRequest)[0].message.fetch_offset == 9


def test_a_follower_never_truncates_below_its_high_watermark():
    f = node(qs=QuorumStateData(leader_id=2, leader_epoch=4), log=log_of((1, 0), (2, 5), end=7))
    req = sends(f.out, FetchRequest)[0]
    out = answer(f, req, FetchResponse(0, 7, 0, LeaderIdAndEpoch(2, 4)), 5)
    assert f.high_watermark == 7
    with pytest.raises(RaftInvariantError, match="below the high watermark"):
        answer(f, sends(out, FetchRequest)[0],
               FetchResponse(0, 7, 0, LeaderIdAndEpoch(2, 4), diverging_epoch=EpochEndOffset(1, 5)), 6)


def test_follower_high_watermark_is_capped_by_its_log_and_never_goes_back():
    f = node(qs=QuorumStateData(leader_id=2, leader_epoch=1))
    out = answer(f, sends(f.out, FetchRequest)[0],
                 FetchResponse(0, 10, 0, LeaderIdAndEpoch(2, 1), records=(Batch(0, 3, 1),)), 1)
    assert of(out, Committed) == [Committed(4)]
    out = answer(f, sends(out, FetchRequest)[0], FetchResponse(0, -1, 0, LeaderIdAndEpoch(2, 1)), 2)
    assert f.high_watermark == 4 and not of(out, Committed)


def test_describe_quorum_is_the_leaders_view():
    n = leader_with(LogState(), 1)
    t = n._now
    fetch(n, 2, 1, 1, t + 1)
    fetch(n, 7, 0, 0, t + 2)                              # an observer
    d = n.describe_quorum()
    assert (d["error_code"], d["leader_id"], d["leader_epoch"], d["high_watermark"]) == (0, 1, 1, 1)
    assert [(r["replica_id"], r["log_end_offset"], r["last_fetch_timestamp"], r["last_caught_up_timestamp"])
            for r in d["current_voters"]] == [(1, 1, t + 2, t + 2), (2, 1, t + 1, t + 1), (3, -1, -1, -1)]
    assert [(r["replica_id"], r["log_end_offset"], r["last_caught_up_timestamp"]) for r in d["observers"]] == [
        (7, 0, -1)]
    f = node(node_id=3, qs=QuorumStateData(leader_id=1, leader_epoch=1))
    assert f.describe_quorum()["error_code"] == E_NOT_LEADER_OR_FOLLOWER
    codec.encode_bytes("DescribeQuorumResponse", 1, {"topics": [{"topic_name": "__cluster_metadata",
                                                                 "partitions": [d]}]})


def test_an_observer_finds_the_leader_through_the_bootstrap_servers():
    o = node(node_id=9, voters=(1, 2, 3))
    assert o.state == RaftState.UNATTACHED and not o.is_voter()
    first = sends(o.out, FetchRequest)
    assert [s.destination for s in first] == [1]        # one bootstrap server at a time
    out = answer(o, first[0], FetchResponse(E_NOT_LEADER_OR_FOLLOWER, -1, 0, LeaderIdAndEpoch(NO_ID, 2)), 1)
    assert o.state == RaftState.UNATTACHED and o.epoch == 2
    out = fire(o, 10) if not sends(out, FetchRequest) else out
    nxt = sends(out, FetchRequest)[0]
    assert nxt.destination == 2
    out = answer(o, nxt, FetchResponse(E_FENCED_LEADER_EPOCH, -1, 0, LeaderIdAndEpoch(3, 4)), 11)
    assert o.state == RaftState.FOLLOWER and (o.leader_id, o.epoch) == (3, 4)
    assert sends(out, FetchRequest)[0].destination == 3
    # an observer never asks for votes, even when its leader goes quiet
    out = fire(o, 10_000)
    assert o.state == RaftState.UNATTACHED and not sends(out, VoteRequest)


def test_a_failed_request_is_retried_after_the_backoff_not_the_request_timeout():
    """The driver says at once when a request will get no answer (a refused connection: a dead
    bootstrap server or leader); the observer asks the next bootstrap server after the backoff,
    as Kafka's does, not after the 2 s request timeout (brokers took 4 s to find a new active
    controller in the nemesis, longer than its 3 s broker session: every broker fenced)."""
    o = node(node_id=9, voters=(1, 2, 3))
    first = sends(o.out, FetchRequest)[0]
    assert first.destination == 1
    out = o.handle(m.RequestFailed(1, first.correlation_id + 1), 5)    # not that request's: ignored
    assert not sends(out, FetchRequest) and timer(out) >= o.config.request_timeout_ms
    out = o.handle(m.RequestFailed(1, first.correlation_id), 5)
    second = sends(out, FetchRequest)
    assert [s.destination for s in second] == [2]                      # the next one, at once
    out = o.handle(m.RequestFailed(2, second[0].correlation_id), 6)
    third = sends(out, FetchRequest)
    assert [s.destination for s in third] == [3]
    out = o.handle(m.RequestFailed(3, third[0].correlation_id), 7)
    assert not sends(out, FetchRequest)                                # 1 again only after its backoff
    assert timer(out) == 5 + o.config.retry_backoff_ms
    assert [s.destination for s in sends(fire(o, 5 + o.config.retry_backoff_ms), FetchRequest)] == [1]


# ---- snapshots ----

def snapshotted_leader():
    n = leader_with(LogState(), 1, voters=(1, 2, 3))
    n.handle(Append("a", 9), 1)                          # log [0, 10)
    fetch(n, 2, 10, 1, 2)
    assert n.high_watermark == 10
    out = n.handle(SnapshotTaken(SnapshotId(10, 1), 100), 3)
    assert of(out, m.DeleteLogBefore) == [m.DeleteLogBefore(10)]
    return n


def test_a_fetch_below_the_log_start_gets_the_snapshot_id():
    n = snapshotted_leader()
    resp = sends(fetch(n, 3, 3, 1, 5), FetchResponse)[0].message
    assert resp.snapshot_id == SnapshotId(10, 1) and resp.records == () and resp.log_start_offset == 10
    resp = sends(fetch(n, 3, 0, 0, 6), FetchResponse)[0].message
    assert resp.snapshot_id == SnapshotId(10, 1)
    resp = sends(fetch(n, 3, 10, 1, 7), FetchResponse)[0].message   # at the snapshot's end: valid
    assert resp.snapshot_id is None and resp.diverging_epoch is None


def test_fetch_snapshot_is_served_in_chunks_and_checked():
    n = snapshotted_leader()

    def fs(snap, pos, max_bytes=40):
        out = n.handle(Received(3, FetchSnapshotRequest(CID, 3, 1, snap, pos, max_bytes), 900 + pos), 8)
        return sends(out, FetchSnapshotResponse)[0].message
    resp = fs(SnapshotId(10, 1), 80)
    assert (resp.error_code, resp.size, resp.position) == (0, 100, 80)
    assert resp.unaligned_records == SnapshotChunk(SnapshotId(10, 1), 80, 20)
    assert fs(SnapshotId(9, 1), 0).error_code == E_SNAPSHOT_NOT_FOUND
    assert fs(SnapshotId(10, 1), 100).error_code == E_POSITION_OUT_OF_RANGE


def test_a_follower_fetches_the_snapshot_then_the_log_after_it():
    f = node(node_id=3, qs=QuorumStateData(leader_id=1, leader_epoch=2))
    leader = LeaderIdAndEpoch(1, 2)
    out = answer(f, sends(f.out, FetchRequest)[0], FetchResponse(0, 12, 10, leader, snapshot_id=SnapshotId(10, 1)), 1)
    req = sends(out, FetchSnapshotRequest)[0]
    assert (req.message.snapshot_id, req.message.position) == (SnapshotId(10, 1), 0)
    out = answer(f, req, FetchSnapshotResponse(0, leader, SnapshotId(10, 1), 6, 0, b"abcd"), 2)
    assert of(out, WriteSnapshotChunk) == [WriteSnapshotChunk(SnapshotId(10, 1), 0, b"abcd")]
    req = sends(out, FetchSnapshotRequest)[0]
    assert req.message.position == 4
    out = answer(f, req, FetchSnapshotResponse(0, leader, SnapshotId(10, 1), 6, 4, b"ef"), 3)
    assert of(out, InstallSnapshot) == [InstallSnapshot(SnapshotId(10, 1))]
    assert of(out, Committed) == [Committed(10)]
    assert not sends(out, FetchRequest)                  # not before the snapshot is loaded
    out = f.handle(m.SnapshotLoaded(SnapshotId(10, 1), frozenset({1, 2, 3, 5})), 4)
    assert f.voters == {1, 2, 3, 5}                      # the snapshot's VotersRecord
    nxt = sends(out, FetchRequest)[0].message
    assert (nxt.fetch_offset, nxt.last_fetched_epoch, nxt.log_start_offset) == (10, 1, 10)


def test_a_snapshot_of_uncommitted_offsets_is_refused():
    n = leader_with(LogState(), 1)
    n.handle(Append("a", 4), 1)
    with pytest.raises(RaftInvariantError, match="uncommitted"):
        n.handle(SnapshotTaken(SnapshotId(5, 1), 10), 2)


# ---- the messages and the quorum-state file ----

def test_message_fields_are_kafkas_names():
    """Each dataclass field is a field of the Kafka message (top level or its partition), as the
    codec spells it, so the I/O layer maps them one to one."""
    pairs = {m.VoteRequest: "VoteRequest", m.VoteResponse: "VoteResponse",
             m.BeginQuorumEpochRequest: "BeginQuorumEpochRequest",
             m.BeginQuorumEpochResponse: "BeginQuorumEpochResponse",
             m.EndQuorumEpochRequest: "EndQuorumEpochRequest", m.EndQuorumEpochResponse: "EndQuorumEpochResponse",
             m.FetchRequest: "FetchRequest", m.FetchResponse: "FetchResponse",
             m.FetchSnapshotRequest: "FetchSnapshotRequest", m.FetchSnapshotResponse: "FetchSnapshotResponse",
             m.AddRaftVoterRequest: "AddRaftVoterRequest", m.AddRaftVoterResponse: "AddRaftVoterResponse",
             m.RemoveRaftVoterRequest: "RemoveRaftVoterRequest", m.RemoveRaftVoterResponse: "RemoveRaftVoterResponse",
             m.UpdateRaftVoterRequest: "UpdateRaftVoterRequest", m.UpdateRaftVoterResponse: "UpdateRaftVoterResponse"}
    # FetchRequest v18's HighWatermark (KIP-1166) and AddRaftVoter v1's AckWhenCommitted: newer than
    # the schemas Samsa has for those two (Fetch v17, AddRaftVoter v0)
    extra = {m.FetchRequest: {"high_watermark"}, m.AddRaftVoterRequest: {"ack_when_committed"}}
    for cls, name in pairs.items():
        names = set()

        def walk(fields):
            for f in fields:
                names.add(codec.snake(f["name"]))
                walk(f.get("fields", []))
        walk(codec.schemas()[name]["fields"])
        for f in cls.__dataclass_fields__:
            key = {"preferred_candidates": "candidate_id"}.get(f, f)
            assert key in names or f in extra.get(cls, ()), (name, f)


def test_quorum_state_json_is_kafkas():
    qs = QuorumStateData(leader_id=2, leader_epoch=7, voted_id=2)
    text = qs.to_json()
    assert text == ('{"leaderId":2,"leaderEpoch":7,"votedId":2,"votedDirectoryId":"AAAAAAAAAAAAAAAAAAAAAA",'
                    '"data_version":1}')
    assert QuorumStateData.from_json(text) == qs
    v0 = json.dumps({"clusterId": "", "leaderId": 1, "leaderEpoch": 3, "votedId": -1, "appliedOffset": 0,
                     "currentVoters": [{"voterId": 1}], "data_version": 0})
    assert QuorumStateData.from_json(v0) == QuorumStateData(1, 3, -1)
    for bad in ("", "[]", '{"data_version":7}', '{"leaderId":"x","data_version":1}',
                '{"votedDirectoryId":"short","data_version":1}'):
        with pytest.raises(ValueError):
            QuorumStateData.from_json(bad)


# ---- dynamic voters (KIP-853) ----

def dynamic_leader():
    n = RaftNode(1, (1, 2, 3), cluster_id=CID, config=CFG, rng=random.Random(7), kraft_version=1)
    n.out = n.start(0)
    out = elect(n)
    first = of(out, AppendToLog)[0].batches[0]        # the first leader writes the voter set beside its LeaderChange
    assert (first.base_offset, first.last_offset, first.control, first.voters) == (0, 2, True, {1, 2, 3})
    t = n._now
    fetch(n, 2, 3, 1, t + 1)                             # commits that batch: hw 3
    assert n.high_watermark == 3
    return n, t + 1


def admin(n, request, now, cid=4242):
    out = n.handle(Received(0, request, cid), now)
    answers = [s.message for s in sends(out) if s.destination == 0]
    return out, (answers[0] if answers else None)


def test_only_a_first_leader_writes_the_voter_set_beside_its_leader_change():
    log = LogState(end_offset=3, epochs=((1, 0),), voter_sets=((0, frozenset({1, 2, 3})),))
    n = RaftNode(1, (1, 2, 3), cluster_id=CID, config=CFG, rng=random.Random(7), kraft_version=1, log=log,
                 quorum_state=QuorumStateData(leader_epoch=1))
    n.out = n.start(0)
    batch = of(elect(n), AppendToLog)[0].batches[0]
    assert (batch.base_offset, batch.last_offset, batch.voters, batch.data) == (3, 3, None, ("LeaderChange", 1))
    s = leader_with(LogState(), 1)                       # static voters (kraft.version 0): the marker alone
    assert of(s.out, AppendToLog)[0].batches[0].voters is None


def test_voter_changes_need_kraft_version_1():
    n = leader_with(LogState(), 1)
    _, resp = admin(n, m.AddRaftVoterRequest(CID, 4), n._now)
    assert resp.error_code == E_UNSUPPORTED_VERSION


def test_add_voter_appends_a_voters_record_and_answers_once_committed():
    n, t = dynamic_leader()
    _, resp = admin(n, m.AddRaftVoterRequest(CID, 2), t + 1)
    assert resp.error_code == E_DUPLICATE_VOTER
    _, resp = admin(n, m.AddRaftVoterRequest(CID, 4), t + 2)
    assert resp.error_code == E_REQUEST_TIMED_OUT      # 4 has not fetched: not a caught-up observer
    fetch(n, 4, 3, 1, t + 3)                             # observer 4 caught up
    out, resp = admin(n, m.AddRaftVoterRequest(CID, 4), t + 4)
    assert resp is None                                  # answered when committed
    batch = of(out, AppendToLog)[0].batches[0]
    assert batch.control and batch.voters == {1, 2, 3, 4} and batch.base_offset == 3
    assert n.voters == {1, 2, 3, 4}                      # in force once appended
    _, resp = admin(n, m.RemoveRaftVoterRequest(CID, 3), t + 5, cid=4243)
    assert resp.error_code == E_REQUEST_TIMED_OUT      # one change at a time
    out = fetch(n, 2, 4, 1, t + 6)
    assert n.high_watermark == 3                         # 2 of 4 voters: not a majority any more
    out = fetch(n, 4, 4, 1, t + 7)
    assert n.high_watermark == 4
    assert [s.message for s in sends(out) if s.destination == 0] == [m.AddRaftVoterResponse(0)]


def test_remove_voter_and_a_leader_that_removes_itself_resigns():
    n, t = dynamic_leader()
    _, resp = admin(n, m.RemoveRaftVoterRequest(CID, 7), t + 1)
    assert resp.error_code == E_VOTER_NOT_FOUND
    out, resp = admin(n, m.RemoveRaftVoterRequest(CID, 1), t + 2)
    assert resp is None and n.voters == {2, 3} and n.state == RaftState.LEADER
    fetch(n, 2, 4, 1, t + 3)
    assert n.high_watermark == 3                         # the leader's own log no longer counts
    out = fetch(n, 3, 4, 1, t + 4)
    assert n.high_watermark == 4
    assert [s.message for s in sends(out) if s.destination == 0] == [m.RemoveRaftVoterResponse(0)]
    out = fire(n, t + 4)
    assert n.state == RaftState.RESIGNED
    fire(n, t + 10_000)
    assert n.state == RaftState.UNATTACHED and not n.is_voter()   # an observer now


def test_a_follower_takes_voter_sets_from_the_log_and_truncation_undoes_them():
    f = node(node_id=3, qs=QuorumStateData(leader_id=1, leader_epoch=2))
    out = answer(f, sends(f.out, FetchRequest)[0], FetchResponse(0, 1, 0, LeaderIdAndEpoch(1, 2), records=(
        Batch(0, 0, 2, control=True), Batch(1, 1, 2, control=True, voters=frozenset({1, 3})))), 1)
    assert f.voters == {1, 3}
    answer(f, sends(out, FetchRequest)[0], FetchResponse(0, 1, 0, LeaderIdAndEpoch(1, 2),
                                                         diverging_epoch=EpochEndOffset(2, 1)), 2)
    assert f.voters == {1, 2, 3} and f.log.end == 1


def test_update_voter_rewrites_the_same_set_and_answers_at_once():
    n, t = dynamic_leader()
    _, resp = admin(n, m.UpdateRaftVoterRequest(CID, n.epoch - 1, 2), t + 1)
    assert resp.error_code == E_FENCED_LEADER_EPOCH
    _, resp = admin(n, m.UpdateRaftVoterRequest(CID, n.epoch + 1, 2), t + 1)
    assert resp.error_code == E_UNKNOWN_LEADER_EPOCH
    _, resp = admin(n, m.UpdateRaftVoterRequest(CID, n.epoch, 7), t + 1)
    assert resp.error_code == E_VOTER_NOT_FOUND
    out, resp = admin(n, m.UpdateRaftVoterRequest(CID, n.epoch, 2), t + 2)
    assert resp == m.UpdateRaftVoterResponse(0)           # answered once appended, as Kafka's leader does
    batch = of(out, AppendToLog)[0].batches[0]
    assert batch.control and batch.voters == {1, 2, 3} and n.voters == {1, 2, 3}
    _, resp = admin(n, m.UpdateRaftVoterRequest(CID, n.epoch, 3), t + 3, cid=4243)
    assert resp.error_code == E_REQUEST_TIMED_OUT        # one change at a time: that VotersRecord is not committed
    fetch(n, 2, 4, 1, t + 4)
    _, resp = admin(n, m.UpdateRaftVoterRequest(CID, n.epoch, 3), t + 5, cid=4244)
    assert resp == m.UpdateRaftVoterResponse(0)
    f = node(node_id=3, qs=QuorumStateData(leader_id=1, leader_epoch=2))
    _, resp = admin(f, m.UpdateRaftVoterRequest(CID, 2, 3), 1)
    assert resp.error_code == E_NOT_LEADER_OR_FOLLOWER
    s = leader_with(LogState(), 1)                         # static voters (kraft.version 0)
    fetch(s, 2, 1, 1, s._now + 1)
    out, resp = admin(s, m.UpdateRaftVoterRequest(CID, s.epoch, 2), s._now + 2)
    assert resp == m.UpdateRaftVoterResponse(0) and not of(out, AppendToLog)   # nothing written
    _, resp = admin(s, m.UpdateRaftVoterRequest(CID, s.epoch, 9), s._now + 3)
    assert resp.error_code == E_VOTER_NOT_FOUND


def test_voter_changes_go_to_the_leader():
    f = node(node_id=3, qs=QuorumStateData(leader_id=1, leader_epoch=2))
    _, resp = admin(f, m.AddRaftVoterRequest(CID, 4), 1)
    assert resp.error_code == E_NOT_LEADER_OR_FOLLOWER


def test_a_pre_vote_granted_by_a_voter_that_moved_to_the_asked_epoch_counts():
    """Apache Kafka 4.4's voter answers a pre-vote for epoch + 1 from inside that epoch (no leader):
    a grant, not news of a newer epoch; with it the prospective stands in epoch + 1."""
    n = node()
    out = fire(n, timer(n.out))
    reqs = sends(out, VoteRequest)
    assert n.state == RaftState.PROSPECTIVE and reqs[0].message.replica_epoch == n.epoch + 1
    answer(n, reqs[0], VoteResponse(0, NO_ID, n.epoch + 1, True), 120)
    assert n.state == RaftState.CANDIDATE and n.epoch == 1
