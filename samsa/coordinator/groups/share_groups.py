"""Share groups (KIP-932): ShareGroupHeartbeat and ShareGroupDescribe.

A share group is a group of the new protocol on the same core as consumer groups
(:mod:`.modern`, driven by :class:`.consumer_groups.ConsumerGroups`); what differs is
declared here:

- its keys: ``group.share.*`` on the broker, ``share.session.timeout.ms`` and
  ``share.heartbeat.interval.ms`` per group, ``group.share.max.size``;
- its assignor: ``group.share.assignors`` (Kafka's SimpleAssignor, :func:`.assignors.simple`),
  where several members may be given one partition, so members reconcile without revocation;
- its heartbeat: a member id chosen by the consumer, a rack and a list of topic names; no
  instance id, regex, assignor choice or owned partitions;
- its records in ``__consumer_offsets``: ``ShareGroup*`` (key versions 10 to 15). Kafka keeps
  no partition-metadata record for a share group (the subscribed topics' hash is in
  ``ShareGroupMetadata``): on loading, the subscribed topics are taken from the metadata as it is;
- the topics whose share partitions may have state in the share coordinator
  (``ShareGroupStatePartitionMetadata``'s initialized topics): every topic ever assigned to
  the group or given a start offset by AlterShareGroupOffsets, until DeleteShareGroupOffsets or
  DeleteGroups removes their state. DescribeShareGroupOffsets lists them.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass

from samsa.coordinator.groups.consumer_groups import (ConsumerGroups, ConsumerHeartbeat, ConsumerHeartbeatResult,
                                                      Entry, _refuse, _wire_partitions)
from samsa.coordinator.groups.assignors import ASSIGNORS, TopicId
from samsa.coordinator.groups.modern import JOIN_EPOCH, LEAVE_EPOCH, ModernGroup, ModernMember
from samsa.protocol import errors

#: The broker configs share groups read.
CONFIG_KEYS = ("group.share.session.timeout.ms", "group.share.heartbeat.interval.ms",
               "group.share.min.session.timeout.ms", "group.share.max.session.timeout.ms",
               "group.share.min.heartbeat.interval.ms", "group.share.max.heartbeat.interval.ms",
               "group.share.max.size", "group.share.assignors")


@dataclass(frozen=True)
class ShareHeartbeat:
    group_id: str
    member_id: str
    member_epoch: int
    rack_id: str | None = None
    subscribed_topic_names: list[str] | None = None
    client_id: str = ""
    client_host: str = ""


class ShareGroups(ConsumerGroups):
    KIND = "share"
    RECORD = "ShareGroup"
    CONFIG = "share"
    REVOKE_FIRST = False
    GROUP_RECORDS = ("TargetAssignmentMetadata", "StatePartitionMetadata", "Metadata")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # group id -> the topics with share state: topic id -> (name, partitions)
        self.state_topics: dict[str, dict[TopicId, tuple[str, frozenset[int]]]] = {}

    def forget(self, group_id: str) -> ModernGroup | None:
        self.state_topics.pop(group_id, None)
        return super().forget(group_id)

    def create_empty(self, group_id: str) -> list[Entry]:
        """An empty share group (AlterShareGroupOffsets of a group not known yet, as Kafka does)."""
        g = self.groups[group_id] = ModernGroup(group_id, "share")
        return [self._epoch_entry(g)]

    def add_state_topics(self, group_id: str, topics: dict[TopicId, tuple[str, frozenset[int]]]) -> list[Entry]:
        """Topics (or partitions) that now may have share state: the record if that changed."""
        known = self.state_topics.setdefault(group_id, {})
        changed = False
        for t, (name, parts) in topics.items():
            old = known.get(t, (name, frozenset()))[1]
            if not parts <= old:
                known[t], changed = (name, old | parts), True
        return [self._state_entry(group_id)] if changed else []

    def remove_state_topics(self, group_id: str, topic_ids: set[TopicId]) -> list[Entry]:
        known = self.state_topics.get(group_id, {})
        if not topic_ids & set(known):
            return []
        for t in topic_ids:
            known.pop(t, None)
        return [self._state_entry(group_id)]

    def _state_entry(self, group_id: str) -> Entry:
        return self._record(group_id, None, "StatePartitionMetadata", {
            "initializing_topics": [], "deleting_topics": [],
            "initialized_topics": [{"topic_id": t, "topic_name": name, "partitions": sorted(parts)}
                                   for t, (name, parts) in sorted(self.state_topics.get(group_id, {}).items())]})

    def _assign(self, g: ModernGroup) -> list[Entry]:
        entries = super()._assign(g)
        assigned = {t for target in g.target.values() for t in target}
        return entries + self.add_state_topics(g.group_id, {
            t: (name, frozenset(range(n))) for t, (name, n) in g.topics.items() if t in assigned})

    def preferred_assignor(self, g: ModernGroup) -> str:
        """The first of ``group.share.assignors`` Samsa has (Kafka's SimpleAssignor: ``simple``)."""
        return next((a for a in self.assignors() if a in ASSIGNORS), "simple")

    def share_heartbeat(self, req: ShareHeartbeat) -> tuple[ConsumerHeartbeatResult, list[Entry]]:
        if not req.member_id:  # Kafka 4.4 refuses it before its coordinator sees it, without a message
            return ConsumerHeartbeatResult(errors.E_INVALID_REQUEST), []
        if req.member_epoch == LEAVE_EPOCH and req.group_id not in self.groups and req.rack_id != "":
            return ConsumerHeartbeatResult(errors.E_GROUP_ID_NOT_FOUND, f"Group {req.group_id} not found."), []
        return self.heartbeat(ConsumerHeartbeat(
            group_id=req.group_id, member_id=req.member_id, member_epoch=req.member_epoch, rack_id=req.rack_id,
            subscribed_topic_names=req.subscribed_topic_names, owned={} if req.member_epoch == JOIN_EPOCH else None,
            client_id=req.client_id, client_host=req.client_host))

    def _validate(self, req: ConsumerHeartbeat) -> None:
        if not req.group_id:
            raise _refuse(errors.InvalidRequestError, "GroupId can't be empty.")
        if req.rack_id == "":
            raise _refuse(errors.InvalidRequestError, "RackId can't be empty.")
        if req.member_epoch == JOIN_EPOCH:
            if not req.subscribed_topic_names:
                raise _refuse(errors.InvalidRequestError, "SubscribedTopicNames must be set in first request.")
        elif not (req.member_epoch > 0 or req.member_epoch == LEAVE_EPOCH):
            raise _refuse(errors.InvalidRequestError, "MemberEpoch is invalid.")

    # ---------------------------------------------------------------- records

    def _epoch_entry(self, g: ModernGroup) -> Entry:
        return self._record(g.group_id, None, "Metadata", {"epoch": g.group_epoch, "metadata_hash": _hash(g)})

    def _partition_metadata_entries(self, g: ModernGroup) -> list[Entry]:
        return []  # in the group epoch record's hash

    def _member_entry(self, g: ModernGroup, m: ModernMember) -> Entry:
        return self._record(g.group_id, m.member_id, "MemberMetadata", {
            "rack_id": m.rack_id, "client_id": m.client_id, "client_host": m.client_host,
            "subscribed_topic_names": m.subscribed_topic_names})

    def _current_entry(self, g: ModernGroup, m: ModernMember) -> Entry:
        return self._record(g.group_id, m.member_id, "CurrentMemberAssignment", {
            "member_epoch": m.member_epoch, "previous_member_epoch": m.previous_member_epoch,
            "state": int(m.state), "assigned_partitions": _wire_partitions(m.assigned)})

    def load(self, records) -> None:
        super().load(records)
        for (kind, group_id, _), v in records.items():
            if kind == "ShareGroupStatePartitionMetadata" and group_id in self.groups:
                self.state_topics[group_id] = {t["topic_id"]: (t["topic_name"], frozenset(t["partitions"]))
                                               for t in v["initialized_topics"]}
        for g in self.groups.values():
            g.group_type = "share"
            if not g.topics:
                g.topics = self._subscribed_topics(g)


def _hash(g: ModernGroup) -> int:
    """A 64-bit digest of the subscribed topics (ids, names, partition counts): it changes when
    they do. Kafka's value is computed otherwise; only the coordinator that wrote it reads it."""
    h = hashlib.sha256()
    for t, (name, n) in sorted(g.topics.items()):
        h.update(bytes(t) + name.encode() + struct.pack(">i", n))
    return struct.unpack(">q", h.digest()[:8])[0]
