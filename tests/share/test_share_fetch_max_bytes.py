"""ShareFetch with MaxBytes 0 acquires nothing (librdkafka's 0180 with ``fetch.max.bytes=0``
expects no records from Kafka 4.4.0, and gets none), and the records stay available to the
next ShareFetch that allows bytes."""

from __future__ import annotations

import os

from share_wire import ShareWire, acquired, member, partition_of


def test_max_bytes_zero_acquires_nothing(share_broker):
    name = f"share-max-bytes-{os.getpid()}"
    wire = ShareWire(share_broker.bootstrap_servers, name, "g-" + name)
    try:
        m = member()
        wire.open(m)  # at the log end (share.auto.offset.reset=latest)
        wire.produce([b"a", b"b", b"c"])
        empty = wire.fetch(m, max_bytes=0)
        assert empty["error_code"] == 0
        assert all(p["error_code"] == 0 and not p["acquired_records"]
                   for t in empty["responses"] for p in t["partitions"])
        got = wire.fetch(m)
        assert acquired(got) == [(0, 2, 1)] and partition_of(got)["error_code"] == 0
    finally:
        wire.close()
