"""Share groups (KIP-932): the share coordinator's state and the interface the share partitions use.

:mod:`.state` is the one contract between the two rooms of share groups:

- the **share partitions** (on each partition's leader, in the server) keep the in-flight window
  of a share group on one topic partition and call a :class:`~.state.SharePersister` to read
  it when they load and to write it after every change of state;
- the **share coordinator** (here) owns ``__share_group_state`` and implements the persister,
  in-process when it is the coordinator of that key, over the share-state RPCs when another
  broker is.

:mod:`.coordinator` is the share coordinator: :class:`~.coordinator.ShareCoordinator` (its
``persister`` is the :class:`~.state.SharePersister` the share partitions call).
"""

from samsa.coordinator.share.coordinator import ShareCoordinator, SharePersisterImpl
from samsa.coordinator.share.state import (DeliveryState, PartitionState, PersisterError, ShareKey, SharePersister,
                                           StateBatch)

__all__ = ["DeliveryState", "PartitionState", "PersisterError", "ShareCoordinator", "ShareKey", "SharePersister",
           "SharePersisterImpl", "StateBatch"]
