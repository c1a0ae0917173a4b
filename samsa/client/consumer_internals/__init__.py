"""The parts of Samsa's consumer, one concern per module.

* :mod:`.records` — ConsumerRecord and the decoding of fetched record batches
* :mod:`.subscription` — what the consumer reads: subscription, assignment, positions
* :mod:`.fetcher` — Fetch requests (one in flight per broker, prefetching), ListOffsets
* :mod:`.assignors` — range, roundrobin and cooperative-sticky partition assignment
* :mod:`.group` — group membership through the coordinator, heartbeats, offset commits
* :mod:`.async_consumer` — :class:`AsyncConsumer`, the asyncio consumer both faces run

:class:`samsa.client.consumer.Consumer` (blocking) and :class:`samsa.aio.AIOConsumer`
(asyncio) are thin faces over :class:`.async_consumer.AsyncConsumer`.
"""
