"""Coordinators: the broker-side services that keep their state in an internal topic.

Each coordinator sits in a room of its own and reaches the broker only through
:class:`samsa.coordinator.host.CoordinatorHost`, never by importing ``samsa.server``:

- :mod:`samsa.coordinator.groups` — the group coordinator: consumer-group rebalances and
  committed offsets, kept in ``__consumer_offsets``;
- :mod:`samsa.coordinator.transactions` — the transaction coordinator: producer ids and
  epochs of transactional ids, the two-phase end of transactions (markers), kept in
  ``__transaction_state``; its host adds producer ids and marker writing to the same seam.
"""
