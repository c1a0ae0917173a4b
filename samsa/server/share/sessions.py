"""Share sessions (KIP-932): which partitions a share group member fetches from this broker.

A session is keyed by (group, member) and numbered by its epoch: ShareSessionEpoch 0 opens
one (replacing the member's old one), each later ShareFetch or ShareAcknowledge must carry
the next epoch (INVALID_SHARE_SESSION_EPOCH otherwise, SHARE_SESSION_NOT_FOUND without a
session), and -1 closes it. A ShareFetch adds its partitions to the session and removes its
forgotten ones. A session belongs to the connection that opened it: when that connection
closes, the session ends as if closed (the manager releases what the member held).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from samsa.protocol import errors

INITIAL_EPOCH = 0
FINAL_EPOCH = -1

TopicIdPartition = tuple[bytes, int]  # (topic id, partition)


@dataclass
class ShareSession:
    group_id: str
    member_id: str
    epoch: int  # the epoch the next request must carry
    partitions: dict[TopicIdPartition, None] = field(default_factory=dict)  # ordered set
    connection: object | None = None


class ShareSessionError(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


class ShareSessionCache:
    def __init__(self, max_sessions: int):
        self.max_sessions = max_sessions
        self.sessions: dict[tuple[str, str], ShareSession] = {}

    def __len__(self) -> int:
        return len(self.sessions)

    def open(self, group_id: str, member_id: str, partitions: list[TopicIdPartition],
             connection: object | None = None) -> ShareSession:
        key = (group_id, member_id)
        if key not in self.sessions and len(self.sessions) >= self.max_sessions:
            raise ShareSessionError(errors.E_SHARE_SESSION_LIMIT_REACHED,
                                    f"the broker holds group.share.max.share.sessions={self.max_sessions} share sessions")
        session = ShareSession(group_id, member_id, 1, dict.fromkeys(partitions), connection)
        self.sessions[key] = session
        return session

    def get(self, group_id: str, member_id: str, epoch: int) -> ShareSession:
        """The session a request of ``epoch`` (> 0) continues; its epoch moves on."""
        session = self.sessions.get((group_id, member_id))
        if session is None:
            raise ShareSessionError(errors.E_SHARE_SESSION_NOT_FOUND,
                                    f"no share session for member {member_id} of group {group_id}")
        if epoch != session.epoch:
            raise ShareSessionError(errors.E_INVALID_SHARE_SESSION_EPOCH,
                                    f"share session epoch {epoch}, expected {session.epoch}")
        session.epoch += 1
        return session

    def close(self, group_id: str, member_id: str) -> ShareSession | None:
        return self.sessions.pop((group_id, member_id), None)

    def partition_count(self) -> int:
        return sum(len(s.partitions) for s in self.sessions.values())

    def of_connection(self, connection: object) -> list[ShareSession]:
        return [s for s in self.sessions.values() if s.connection is connection]

    def of_member(self, group_id: str, member_id: str) -> ShareSession | None:
        return self.sessions.get((group_id, member_id))
