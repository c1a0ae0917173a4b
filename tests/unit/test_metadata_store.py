"""The file metadata store's changes are all or nothing: a write that fails (a full disk) leaves
both the file and the store's memory as they were, and raises KAFKA_STORAGE_ERROR."""

from __future__ import annotations

import errno
import json

import pytest

from samsa.cluster.metadata import LocalMetadataStore, PartitionState, TopicInfo, new_topic_id
from samsa.protocol.errors import KafkaStorageError


def _topic(name: str, partitions: int = 1) -> TopicInfo:
    return TopicInfo(name, new_topic_id(), {p: PartitionState([0], 0, isr=[0]) for p in range(partitions)})


def test_a_failed_write_changes_nothing(tmp_path, monkeypatch):
    store = LocalMetadataStore(tmp_path)
    kept = _topic("kept")
    store.create_topic(kept)
    store.put_entity_configs("clients/c", {"producer_byte_rate": "1000"})
    before_file = store.path.read_text()
    pid = store.next_producer_id_block(1000)

    def full(data):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(store, "_write", full)
    after_pid_file = json.loads(store.path.read_text())
    changes = [
        lambda: store.create_topic(_topic("refused")),
        lambda: store.put_assignment(TopicInfo("kept", kept.topic_id, {0: kept.partitions[0],
                                                                       1: PartitionState([0], 0)}, {})),
        lambda: store.put_topic_configs("kept", {"retention.ms": "1"}),
        lambda: store.delete_topic("kept"),
        lambda: store.put_broker_configs(None, {"log.retention.ms": "1"}),
        lambda: store.next_producer_id_block(1000),
        lambda: store.put_entity_configs("clients/c", {}),
        lambda: store.put_acls(("Topic", "LITERAL", "t"), [{"principal": "User:a"}]),
        lambda: store.update_partition_state("kept", 0, PartitionState([0], 0, leader_epoch=5, isr=[0])),
    ]
    for change in changes:
        with pytest.raises(KafkaStorageError, match="No space left on device"):
            change()
    assert set(store.topics()) == {"kept"}
    assert store.topics()["kept"] is kept and len(kept.partitions) == 1 and kept.configs == {}
    assert kept.partitions[0].partition_epoch == 0
    assert store.broker_configs(None) == {}
    assert store.entity_configs("clients/c") == {"producer_byte_rate": "1000"}
    assert store.acls() == []
    assert json.loads(store.path.read_text()) == after_pid_file and before_file != after_pid_file
    monkeypatch.undo()
    assert store.next_producer_id_block(1000) == pid + 1000  # the refused block was not handed out


def test_topic_json_holds_every_partition_field():
    """TopicInfo.to_json writes PartitionState by hand (fast for thousands of partitions): every
    field, and read back the same."""
    from dataclasses import asdict

    from samsa.cluster.metadata import PartitionState, TopicInfo
    state = PartitionState([1, 2], 1, 3, [1], 4, [5], [6])
    topic = TopicInfo("t", bytes(range(16)), {0: state}, {"retention.ms": "1"})
    assert topic.to_json()["partitions"]["0"] == asdict(state)
    assert TopicInfo.from_json("t", topic.to_json()) == topic
