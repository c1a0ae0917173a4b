"""A batch waiting out its retry backoff is still pending: flush (and so a transaction's commit)
waits for it. Before, it was in neither the queues nor the in-flight set while it waited, a
commit went ahead without it, and the batch was written later at the next epoch, in a
transaction of its own that was then aborted (seen in tests/spark/test_spark_cluster.py)."""

from __future__ import annotations

from samsa.client.producer_internals.accumulator import RecordAccumulator


def test_a_batch_backing_off_is_still_pending():
    acc = RecordAccumulator(batch_size=16384, linger_s=0, buffer_memory=1 << 20, max_block_s=1, codec=0,
                            compression_level=None, delivery_timeout_s=30, max_in_flight=5, idempotent=True,
                            blocking=True)
    fut, _, _ = acc.append("t", 0, b"k", b"v", 0, [], 10, None)
    acc.flushing = True
    (batch,), _ = acc.drain()
    assert acc.pending_futures() == [fut]  # in flight
    acc.backing_off(batch)  # its send failed: it waits retry.backoff.ms before going back in the queue
    assert acc.pending_futures() == [fut]
    assert acc.has_queued()
    acc.requeue(batch)
    assert acc.pending_futures() == [fut]
    acc.done(batch, acknowledged=True)
