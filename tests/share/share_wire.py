"""Raw ShareFetch/ShareAcknowledge requests over TCP (the differential harness's Side)."""

from __future__ import annotations

import uuid

import harness

from samsa.embedded import Broker

SHARE_FETCH, SHARE_ACKNOWLEDGE = 78, 79


class ShareWire:
    """One connection to a broker, speaking as share-group members of ``group`` on ``topic``."""

    def __init__(self, bootstrap: str, topic: str, group: str, partitions: int = 1, create: bool = True):
        self.side = harness.Side("samsa", bootstrap)
        self.topic = topic
        self.group = group
        if create:
            harness.create_topic(self.side, topic, partitions)
        md = self.side.call(3, {"topics": [{"name": topic}], "allow_auto_topic_creation": False}, 12)
        self.topic_id = md["topics"][0]["topic_id"]
        self.epochs: dict[str, int] = {}

    def close(self) -> None:
        self.side.close()

    def produce(self, values: list[bytes], **kw) -> int:
        r = self.side.produce(self.topic, [(None, v) for v in values], **kw)
        p = r["responses"][0]["partition_responses"][0]
        assert p["error_code"] == 0, r
        return p["base_offset"]

    def topics(self, partitions=(0,), acks: list | None = None, topic_id: bytes | None = None) -> list:
        return [{"topic_id": topic_id or self.topic_id,
                 "partitions": [{"partition_index": p, "acknowledgement_batches": acks or []} for p in partitions]}]

    def _epoch(self, member: str, epoch: int | None) -> int:
        if epoch is None:
            epoch = self.epochs.get(member, 0)
        self.epochs[member] = 0 if epoch == -1 else epoch + 1
        return epoch

    def fetch(self, member: str, topics: list | None = None, epoch: int | None = None, max_wait_ms: int = 0,
              forgotten: list | None = None, max_records: int = 500, batch_size: int = 500, group: str | None = None,
              **kw) -> dict:
        body = {"group_id": self.group if group is None else group, "member_id": member,
                "share_session_epoch": self._epoch(member, epoch), "max_wait_ms": max_wait_ms, "min_bytes": 1,
                "max_bytes": 1 << 20, "max_records": max_records, "batch_size": batch_size,
                "topics": topics if topics is not None else [], "forgotten_topics_data": forgotten or []}
        body.update(kw)
        return self.side.call(SHARE_FETCH, body, 1)

    def open(self, member: str, partitions=(0,), **kw) -> dict:
        """Open the member's share session on ``partitions``, again until each share partition has
        loaded (the share coordinator's state topic may still be coming up): a share partition
        starts at the log end (share.auto.offset.reset=latest) when it loads."""
        from waiting import wait_until

        def loaded():
            r = self.fetch(member, self.topics(partitions), epoch=0, **kw)
            codes = [p["error_code"] for t in r["responses"] for p in t["partitions"]]
            return r if r["error_code"] == 0 and not any(codes) else None
        return wait_until(loaded, f"the share session of {member} open", 60)

    def acknowledge(self, member: str, acks: list, epoch: int | None = None, partition: int = 0) -> dict:
        return self.side.call(SHARE_ACKNOWLEDGE, {
            "group_id": self.group, "member_id": member, "share_session_epoch": self._epoch(member, epoch),
            "topics": self.topics((partition,), acks)}, 1)


    def start_offset(self, partition: int = 0, side=None) -> int:
        """The share partition's start offset as its share coordinator stores it
        (ReadShareGroupStateSummary, to ``side``: by default this connection's broker)."""
        r = (side or self.side).call(87, {"group_id": self.group, "topics": [
            {"topic_id": self.topic_id, "partitions": [{"partition": partition, "leader_epoch": 0}]}]}, 0)
        p = r["results"][0]["partitions"][0]
        assert p["error_code"] == 0, r
        return p["start_offset"]


def ack(first: int, last: int, *types: int) -> dict:
    return {"first_offset": first, "last_offset": last, "acknowledge_types": list(types)}


def acquired(response: dict, partition: int = 0) -> list[tuple[int, int, int]]:
    """The AcquiredRecords of one partition as (first, last, delivery count)."""
    assert response["error_code"] == 0, response
    return [(a["first_offset"], a["last_offset"], a["delivery_count"])
            for t in response["responses"] for p in t["partitions"] if p["partition_index"] == partition
            for a in p["acquired_records"]]


def partition_of(response: dict, partition: int = 0) -> dict:
    return next(p for t in response["responses"] for p in t["partitions"] if p["partition_index"] == partition)


def member() -> str:
    return str(uuid.uuid4())


def start_share_broker(**overrides) -> Broker:
    """An embedded broker (real TCP, in this process) with the broker keys given."""
    return Broker(overrides).start()


def set_group_configs(broker: Broker, group: str, configs: dict[str, str]) -> None:
    """A group's share.* configs, set over the wire (IncrementalAlterConfigs on a GROUP resource)."""
    import harness
    side = harness.Side("samsa", broker.bootstrap_servers)
    try:
        r = side.call(44, {"resources": [{"resource_type": 32, "resource_name": group, "configs": [
            {"name": k, "config_operation": 0, "value": v} for k, v in configs.items()]}], "validate_only": False}, 1)
    finally:
        side.close()
    assert r["responses"][0]["error_code"] == 0, r
