"""The quorum-state file (``<metadata.log.dir>/__cluster_metadata-0/quorum-state``) as pure data.

Kafka writes QuorumStateData (kafka-raft's schema, in ``protocol/schema/messages.json``) as JSON
with the schema's camelCase names and the version beside them as ``data_version``; version 1
(KIP-853) is what Kafka 4 writes:

    {"leaderId":-1,"leaderEpoch":3,"votedId":2,"votedDirectoryId":"AAAAAAAAAAAAAAAAAAAAAA","data_version":1}

Version 0 files (Kafka 3.x before KIP-853, and Kafka 4 with static voters, kraft.version 0) also
carry clusterId, appliedOffset and currentVoters, which are read and dropped:

    {"clusterId":"","leaderId":1,"leaderEpoch":1,"votedId":-1,"appliedOffset":0,"currentVoters":[{"voterId":1},{"voterId":2},{"voterId":3}],"data_version":0}
 Reading and writing the file itself is the I/O layer's job.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass

from samsa.raft.messages import NO_ID, ZERO_UUID

DATA_VERSION = 1


def uuid_to_str(raw: bytes) -> str:
    """Kafka's Uuid.toString: URL-safe base64 of the 16 bytes, without padding."""
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def uuid_from_str(text: str) -> bytes:
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if len(raw) != 16:
        raise ValueError(f"not a Kafka Uuid: {text!r}")
    return raw


@dataclass(frozen=True)
class QuorumStateData:
    leader_id: int = NO_ID
    leader_epoch: int = -1
    voted_id: int = NO_ID
    voted_directory_id: bytes = ZERO_UUID

    def to_json(self, version: int = DATA_VERSION, voters=()) -> str:
        """Version 1 as Kafka 4 writes it with kraft.version 1 (KIP-853); version 0 as it writes it
        with a static voter set (kraft.version 0): ``clusterId`` empty, ``appliedOffset`` 0 and
        ``currentVoters`` the static voters."""
        if version == 0:
            return json.dumps({"clusterId": "", "leaderId": self.leader_id, "leaderEpoch": self.leader_epoch,
                               "votedId": self.voted_id, "appliedOffset": 0,
                               "currentVoters": [{"voterId": v} for v in sorted(voters)], "data_version": 0},
                              separators=(",", ":"))
        return json.dumps({"leaderId": self.leader_id, "leaderEpoch": self.leader_epoch,
                           "votedId": self.voted_id, "votedDirectoryId": uuid_to_str(self.voted_directory_id),
                           "data_version": DATA_VERSION}, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> "QuorumStateData":
        """Parse a quorum-state file of version 0 or 1; ValueError for anything else."""
        try:
            d = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"quorum-state is not JSON: {e}") from None
        if not isinstance(d, dict):
            raise ValueError("quorum-state is not a JSON object")
        version = d.get("data_version")
        if version not in (0, 1):
            raise ValueError(f"quorum-state data_version {version!r} is not 0 or 1")
        try:
            out = cls(leader_id=int(d.get("leaderId", NO_ID)), leader_epoch=int(d.get("leaderEpoch", -1)),
                      voted_id=int(d.get("votedId", NO_ID)),
                      voted_directory_id=(uuid_from_str(d["votedDirectoryId"])
                                          if version >= 1 and "votedDirectoryId" in d else ZERO_UUID))
        except (TypeError, ValueError) as e:
            raise ValueError(f"quorum-state has a bad field: {e}") from None
        return out
