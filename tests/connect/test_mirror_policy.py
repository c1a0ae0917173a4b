"""Replication policies, cycle detection, MM2's record encodings and offset translation (no processes)."""

from __future__ import annotations

from samsa.connect.mirror.checkpoint import OffsetSyncStore
from samsa.connect.mirror.common import TopicFilter
from samsa.connect.mirror.policy import DefaultReplicationPolicy, IdentityReplicationPolicy, is_cycle
from samsa.connect.mirror.records import Checkpoint, Heartbeat, OffsetSync


def test_default_and_identity_policies():
    d = DefaultReplicationPolicy()
    assert d.format_remote_topic("A", "orders") == "A.orders"
    assert (d.topic_source("B.A.orders"), d.upstream_topic("B.A.orders"), d.original_topic("B.A.orders")) == \
        ("B", "A.orders", "orders")
    assert d.checkpoints_topic("A") == "A.checkpoints.internal"
    assert d.offset_syncs_topic("B") == "mm2-offset-syncs.B.internal"
    i = IdentityReplicationPolicy()
    assert i.format_remote_topic("A", "orders") == "orders"
    assert i.format_remote_topic("A", "heartbeats") == "A.heartbeats"
    assert i.topic_source("orders") is None and i.topic_source("A.heartbeats") == "A"


def test_cycles_are_not_mirrored():
    d = DefaultReplicationPolicy()
    assert is_cycle(d, "B.orders", "B") and is_cycle(d, "C.B.orders", "B")
    assert not is_cycle(d, "A.orders", "B") and not is_cycle(d, "orders", "B")
    f = TopicFilter({"source.cluster.alias": "A", "target.cluster.alias": "B"})
    assert f.replicate("orders") and f.replicate("heartbeats") and f.replicate("C.heartbeats")
    assert not f.replicate("B.orders") and not f.replicate("B.heartbeats")
    assert not f.replicate("__consumer_offsets") and not f.replicate("mm2-offsets.A.internal")
    f = TopicFilter({"source.cluster.alias": "A", "target.cluster.alias": "B", "topics": "orders.*, pay"})
    assert f.replicate("orders-eu") and f.replicate("pay") and not f.replicate("payments")


def test_record_encodings_are_kafkas():
    s = OffsetSync("t", 3, 10, 7)
    assert s.key() == b"\x00\x01t\x00\x00\x00\x03" and OffsetSync.parse(s.key(), s.value()) == s
    c = Checkpoint("g", "A.t", 0, 5, 4, "meta")
    assert c.value()[:2] == b"\x00\x00" and Checkpoint.parse(c.key(), c.value()) == c
    h = Heartbeat("A", "B", 1234)
    assert Heartbeat.parse(h.key(), h.value()) == h


def test_translation_never_goes_past_the_target():
    store = OffsetSyncStore.__new__(OffsetSyncStore)
    store.syncs = {("t", 0): [(0, 0), (100, 40), (200, 90)]}
    assert store.translate("t", 0, 100) == 40       # exactly a sync
    assert store.translate("t", 0, 150) == 41       # past a sync: one after its downstream offset
    assert store.translate("t", 0, 250) == 91
    assert store.translate("t", 1, 5) is None
