"""Coordinators: the broker-side services that keep their state in an internal topic.

Each coordinator sits in a room of its own and reaches the broker only through
:class:`samsa.coordinator.host.CoordinatorHost`, never by importing ``samsa.server``:

- :mod:`samsa.coordinator.groups` — the group coordinator: consumer-group rebalances and
  committed offsets, kept in ``__consumer_offsets``;
- a transaction coordinator (``__transaction_state``, InitProducerId/AddPartitionsToTxn/
  EndTxn) will sit beside it as ``samsa.coordinator.transactions``, using the same host seam.
"""
