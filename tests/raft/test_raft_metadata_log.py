"""The metadata log under the Raft driver (``raft_driver.MetadataLog``): samsa's PartitionLog in
``__cluster_metadata-0``, what a restarted node tells the core, truncation, and the VotersRecords
of dynamic voters (KIP-853)."""

from __future__ import annotations

from samsa.protocol import metadata_records as mr
from samsa.protocol.records import build_batch
from samsa.raft import messages as m
from samsa.raft.consensus import LogState
from samsa.server.raft_driver import MetadataLog, VoterSets, endpoint, parse_batches, voters_record
from samsa.storage.kraft import read_metadata_log


def test_batches_in_kafkas_format_and_what_a_restart_reads(tmp_path):
    log = MetadataLog(tmp_path)
    assert log.state() == LogState(0, 0, ()) and not log.has_records
    assert (log.dir / "partition.metadata").read_text() == "version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ"
    log.append((m.Batch(0, 0, 1, data=("LeaderChange", 2), control=True),), [1, 2, 3])
    assert not log.has_records
    noop = mr.encode("NoOpRecord", 0, {})
    log.append((m.Batch(1, 2, 1, data=[noop, noop]),), [1, 2, 3])
    assert log.has_records
    # a follower's append: the leader's bytes as fetched
    fetched = log.read(0, 3, 1 << 20)
    other = MetadataLog(tmp_path / "other")
    other.append(parse_batches(fetched), [1, 2, 3])
    assert other.read(0, 3, 1 << 20) == fetched
    log.append((m.Batch(3, 3, 4, data=("LeaderChange", 1), control=True),), [1, 2, 3])
    records = list(read_metadata_log(log.read(0, 4, 1 << 20)))
    assert [(o, e, kind, name) for o, e, kind, name, _, _ in records] == [
        (0, 1, mr.LEADER_CHANGE, "LeaderChangeMessage"), (1, 1, None, "NoOpRecord"), (2, 1, None, "NoOpRecord"),
        (3, 4, mr.LEADER_CHANGE, "LeaderChangeMessage")]
    assert records[0][5]["leader_id"] == 2 and [v["voter_id"] for v in records[0][5]["voters"]] == [1, 2, 3]
    log.close()
    again = MetadataLog(tmp_path)     # restarted: offsets and the epochs' start offsets from disk
    assert again.state() == LogState(0, 4, ((1, 0), (4, 3))) and again.has_records
    again.truncate(1)
    assert again.state() == LogState(0, 1, ((1, 0),)) and not again.has_records
    again.close()
    other.close()


def test_voters_records_in_the_log_and_the_voter_sets_kept_beside_it(tmp_path):
    """KIP-853: a VotersRecord control batch found by a restart and by a follower's parse, and the
    driver's history of voter sets (endpoints, directory ids) truncated and folded with the log."""
    def voters(*ids):
        return [voters_record(i, bytes([i]) * 16, [("CONTROLLER", "127.0.0.1", 9000 + i)]) for i in ids]
    log = MetadataLog(tmp_path)
    log.append((m.Batch(0, 0, 1, data=("LeaderChange", 1), control=True),), [1])
    key, value = mr.encode_control(mr.KRAFT_VOTERS, {"version": 0, "voters": voters(1, 2)})
    raw = build_batch([(key, value, 0)], base_offset=1, is_control=True, partition_leader_epoch=1)
    batches = parse_batches(raw)
    assert [(b.base_offset, b.control, b.voters) for b in batches] == [(1, True, frozenset({1, 2}))]
    log.append(batches, [1])
    empty = MetadataLog(tmp_path / "other")
    assert empty.control_records() == []
    empty.close()
    assert [(o, k, [v["voter_id"] for v in d["voters"]]) for o, k, d in log.control_records()] == [
        (1, mr.KRAFT_VOTERS, [1, 2])]
    sets = VoterSets(VoterSets.of(voters(1)))
    sets.append(1, voters(1, 2))
    sets.append(5, voters(1, 2, 3))
    assert sorted(sets.current()) == [1, 2, 3] and sorted(sets.at(5)) == [1, 2] and sorted(sets.at(1)) == [1]
    assert endpoint(sets.find(3), "CONTROLLER") == ("127.0.0.1", 9003) and endpoint(sets.find(3), "OTHER") == (
        "127.0.0.1", 9003)
    assert sets.log_state() == (frozenset({1}), ((1, frozenset({1, 2})), (5, frozenset({1, 2, 3}))))
    sets.truncate(5)
    assert sorted(sets.current()) == [1, 2] and sets.find(3) is None
    sets.fold(3)
    assert sets.log_state() == (frozenset({1, 2}), ())
    log.close()
