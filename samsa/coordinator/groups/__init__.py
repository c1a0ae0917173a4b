"""The group coordinator, in the rooms Kafka splits it into:

- :mod:`.state` — a group and its members, and the enforced table of state transitions;
- :mod:`.rebalance` — the classic rebalance protocol (Join/Sync/Heartbeat/Leave) on typed
  requests and results, without I/O;
- :mod:`.offsets` — committed offsets in memory: commit, fetch, delete, retention;
- :mod:`.persistence` — both stored in ``__consumer_offsets``: which partition holds a
  group, writing records, replaying a partition on becoming its leader;
- :mod:`.modern`, :mod:`.assignors` — the core of the new protocols (KIP-848): group and
  member epochs, target assignment, reconciliation; the server-side assignors;
- :mod:`.consumer_groups` — consumer groups on that core: ConsumerGroupHeartbeat, timers,
  their records in ``__consumer_offsets``;
- :mod:`.share_groups` — share groups (KIP-932) on the same driver: ShareGroupHeartbeat,
  the simple assignor, their ``ShareGroup*`` records;
- :mod:`.streams_groups`, :mod:`.streams_topology` — streams groups (KIP-1071) on the same
  driver: StreamsGroupHeartbeat, the topology and its internal topics, the sticky task
  assignor, their ``StreamsGroup*`` records;
- :mod:`.coordinator` — :class:`GroupCoordinator`, the service the request handlers call, on
  the typed requests and results exported here.
"""

from samsa.coordinator.groups.coordinator import (GroupCoordinator, GroupDescription, GroupListing,
                                                  MemberDescription, OffsetCommitEntry, OffsetCommitRequest,
                                                  TxnOffsetCommitRequest)
from samsa.coordinator.groups.consumer_groups import (ConsumerGroupDescription, ConsumerHeartbeat,
                                                      ConsumerHeartbeatResult)
from samsa.coordinator.groups.share_groups import ShareHeartbeat
from samsa.coordinator.groups.streams_groups import StreamsHeartbeat, StreamsHeartbeatResult
from samsa.coordinator.groups.rebalance import (HeartbeatRequest, JoinedMember, JoinRequest, JoinResult,
                                                LeavingMember, SyncRequest, SyncResult)
from samsa.coordinator.groups.state import GroupState

__all__ = ["ConsumerGroupDescription", "ConsumerHeartbeat", "ConsumerHeartbeatResult", "GroupCoordinator", "GroupDescription", "GroupListing", "GroupState", "HeartbeatRequest", "JoinRequest",
           "JoinResult", "JoinedMember", "LeavingMember", "MemberDescription", "OffsetCommitEntry",
           "OffsetCommitRequest", "ShareHeartbeat", "StreamsHeartbeat", "StreamsHeartbeatResult", "SyncRequest", "SyncResult", "TxnOffsetCommitRequest"]
