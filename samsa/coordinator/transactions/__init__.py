"""The transaction coordinator (KIP-98), in rooms as the group coordinator's:

- :mod:`.state` — a transactional id's metadata and the enforced table of state transitions;
- :mod:`.persistence` — states in ``__transaction_state``: which partition holds an id,
  writing a state, replaying a partition on becoming its leader;
- :mod:`.coordinator` — :class:`TransactionCoordinator`, the service the request handlers
  call (InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, DescribeTransactions,
  ListTransactions), and the marker writing, timeouts and expiry behind them;
- :mod:`.verifier` — :class:`TransactionVerifier`, KIP-890's check (and, with transactions
  version 2, implicit add) that the Produce and TxnOffsetCommit handlers make, local or at
  the coordinator's broker, with one mapping of its answers.
"""

from samsa.coordinator.transactions.coordinator import (TransactionCoordinator, TransactionDescription,
                                                        TransactionHost, TransactionListing)
from samsa.coordinator.transactions.state import TransactionMetadata, TxnState
from samsa.coordinator.transactions.verifier import TransactionVerifier

__all__ = ["TransactionCoordinator", "TransactionDescription", "TransactionHost", "TransactionListing",
           "TransactionMetadata", "TransactionVerifier", "TxnState"]
