"""The Raft I/O layer's translation between the core's messages and Kafka's wire bodies
(``samsa.server.raft_driver``), through the real codec in the versions voters speak."""

from __future__ import annotations

import pytest

from samsa.protocol import api
from samsa.protocol.api_keys import ApiKey
from samsa.protocol.records import build_batch
from samsa.raft import messages as m
from samsa.server.raft_driver import (METADATA_TOPIC_ID, from_wire_request, from_wire_response, parse_batches,
                                      to_wire, to_wire_response)

CID = "MkU3OEVBNTcwNTJENDM2Qg"


def _frame(chunks) -> bytes:
    return b"".join(bytes(c) for c in chunks)[4:]


def through_wire_request(msg, version: int):
    key, body = to_wire(msg, CID, 1 << 20)
    _, decoded = api.decode_request(_frame(api.encode_request(key, version, 7, "t", body)))
    return key, decoded


@pytest.mark.parametrize("msg,versions", [
    (m.VoteRequest(CID, 2, 5, 1, 4, 37, pre_vote=True), (2,)),
    (m.VoteRequest(CID, 2, 5, 1, 4, 37), (0, 1, 2)),
    (m.BeginQuorumEpochRequest(CID, 3, 1, 5), (1,)),
    (m.EndQuorumEpochRequest(CID, 1, 5, (3, 2)), (0, 1)),
    (m.FetchRequest(CID, 2, 5, 37, 4, 0, max_wait_ms=500), (13, 15, 17, 18)),
    (m.FetchRequest(CID, 2, 5, 37, 4, 0, max_wait_ms=500, high_watermark=30), (18,)),  # KIP-1166
])
def test_requests_cross_the_wire_unchanged(msg, versions):
    for version in versions:
        key, body = through_wire_request(msg, version)
        got = from_wire_request(key, version, body)
        if isinstance(msg, m.VoteRequest) and version < 2:
            msg = m.VoteRequest(CID, msg.voter_id if version else -1, *(
                msg.replica_epoch, msg.replica_id, msg.last_offset_epoch, msg.last_offset))
        if isinstance(msg, m.FetchRequest) and version < 15:
            msg = m.FetchRequest(CID, 2, 5, 37, 4, 0, max_wait_ms=500, replica_epoch=-1)
        assert got == msg, version


def test_requests_of_another_partition_are_not_the_cores():
    key, body = through_wire_request(m.VoteRequest(CID, 2, 5, 1, 4, 37), 2)
    body["topics"][0]["topic_name"] = "other"
    assert from_wire_request(key, 2, body) is None
    key, body = through_wire_request(m.FetchRequest(CID, 2, 5, 37, 4, 0), 17)
    body["topics"][0]["topic_id"] = bytes(16)
    assert from_wire_request(key, 17, body) is None
    assert body["topics"][0]["topic_id"] == bytes(16) and METADATA_TOPIC_ID.hex() == "00" * 15 + "01"


def through_wire_response(key: int, version: int, msg, records: bytes | None = None):
    frame = _frame(api.encode_response(key, version, 7, to_wire_response(key, msg, records)))
    return from_wire_response(key, api.decode_response(key, version, frame)[1])


def test_responses_cross_the_wire_unchanged():
    for v in (0, 1, 2):
        assert through_wire_response(ApiKey.VOTE, v, m.VoteResponse(0, 1, 5, True)) == m.VoteResponse(0, 1, 5, True)
    assert (through_wire_response(ApiKey.BEGIN_QUORUM_EPOCH, 1, m.BeginQuorumEpochResponse(6, 2, 9))
            == m.BeginQuorumEpochResponse(6, 2, 9))
    assert (through_wire_response(ApiKey.END_QUORUM_EPOCH, 1, m.EndQuorumEpochResponse(0, -1, 9))
            == m.EndQuorumEpochResponse(0, -1, 9))
    leader = m.LeaderIdAndEpoch(1, 5)
    div = m.FetchResponse(0, 30, 0, leader, diverging_epoch=m.EpochEndOffset(4, 20))
    assert through_wire_response(ApiKey.FETCH, 17, div) == div
    snap = m.FetchResponse(0, 30, 10, leader, snapshot_id=m.SnapshotId(10, 3))
    assert through_wire_response(ApiKey.FETCH, 17, snap) == snap
    # records: the leader's bytes, read by the follower as batches of offsets and epochs
    data = build_batch([(None, b"a", 1), (None, b"b", 1)], base_offset=7, partition_leader_epoch=5)
    data += build_batch([(b"\x00\x00\x00\x02", b"x", 1)], base_offset=9, is_control=True, partition_leader_epoch=5)
    got = through_wire_response(ApiKey.FETCH, 17, m.FetchResponse(0, 10, 0, leader,
                                                                   records=m.RecordsRange(7, 10)), data)
    assert [(b.base_offset, b.last_offset, b.epoch, b.control) for b in got.records] == [(7, 8, 5, False),
                                                                                      (9, 9, 5, True)]
    assert got.records[0].data + got.records[1].data == data
    assert parse_batches(data[:-3]) == got.records[:1]   # a partial tail is not a batch


def test_quorum_state_of_static_voters_is_kafkas_version_0():
    from samsa.raft.quorum_state import QuorumStateData
    qs = QuorumStateData(leader_id=1, leader_epoch=1, voted_id=-1)
    # as Apache Kafka 4.4.0's controller writes it with controller.quorum.voters (kraft.version 0)
    kafkas = ('{"clusterId":"","leaderId":1,"leaderEpoch":1,"votedId":-1,"appliedOffset":0,'
              '"currentVoters":[{"voterId":1},{"voterId":2},{"voterId":3}],"data_version":0}')
    assert qs.to_json(0, {3, 1, 2}) == kafkas
    assert QuorumStateData.from_json(kafkas) == qs
