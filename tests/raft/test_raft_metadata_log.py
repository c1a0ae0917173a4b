"""The metadata log under the Raft driver (``raft_driver.MetadataLog``): samsa's PartitionLog in
``__cluster_metadata-0``, what a restarted node tells the core, truncation."""

from __future__ import annotations

from samsa.protocol import metadata_records as mr
from samsa.raft import messages as m
from samsa.raft.consensus import LogState
from samsa.server.raft_driver import MetadataLog, parse_batches
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
