"""Small value types shared by the admin client, the producer and the consumer.

They mirror the classes of Kafka's Java clients (``TopicPartition``, ``NewTopic``,
``ConfigEntry`` ...) with snake_case fields. Topic ids are shown as Kafka shows a
``Uuid``: 22 characters of URL-safe base64 without padding.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import NamedTuple

ZERO_UUID = bytes(16)

# Kafka's ConfigResource.Type ids, and ConfigEntry.ConfigSource ids -> names.
RESOURCE_TYPES = {"topic": 2, "broker": 4, "broker_logger": 8, "group": 32}
CONFIG_SOURCES = {
    0: "UNKNOWN",
    1: "DYNAMIC_TOPIC_CONFIG",
    2: "DYNAMIC_BROKER_CONFIG",
    3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG",
    5: "DEFAULT_CONFIG",
    6: "DYNAMIC_BROKER_LOGGER_CONFIG",
    7: "CLIENT_METRICS_CONFIG",
    8: "DYNAMIC_GROUP_CONFIG",
}
ALTER_OPS = {"set": 0, "delete": 1, "append": 2, "subtract": 3}
# ListOffsets special timestamps.
OFFSET_SPECS = {"latest": -1, "earliest": -2, "max_timestamp": -3}


def uuid_to_str(raw: bytes) -> str:
    """Kafka's textual form of a Uuid (``Uuid.toString``)."""
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def uuid_from_str(text: str) -> bytes:
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if len(raw) != 16:
        raise ValueError(f"not a Kafka Uuid: {text!r}")
    return raw


class RecordMetadata(NamedTuple):
    """Where the broker put a record (offset -1 with acks=0); Java's RecordMetadata."""

    topic: str
    partition: int
    offset: int
    timestamp: int


@dataclass(frozen=True, order=True)
class TopicPartition:
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True)
class Node:
    id: int
    host: str
    port: int
    rack: str | None = None


@dataclass
class NewTopic:
    """A topic to create. -1 partitions / replication factor = the broker's default."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    replica_assignment: dict[int, list[int]] | None = None
    config: dict[str, str] = field(default_factory=dict)


@dataclass
class NewPartitions:
    """Grow a topic to ``total_count`` partitions; ``new_assignments`` lists the replicas
    of each added partition (None: the broker places them)."""

    total_count: int
    new_assignments: list[list[int]] | None = None


@dataclass
class PartitionInfo:
    partition: int
    leader: int | None  # None: no leader available
    replicas: list[int]
    isr: list[int]
    offline: list[int] = field(default_factory=list)


@dataclass
class TopicDescription:
    name: str
    topic_id: str  # Kafka's textual Uuid
    is_internal: bool
    partitions: list[PartitionInfo]


@dataclass
class TopicListing:
    name: str
    topic_id: str
    is_internal: bool


@dataclass(frozen=True)
class ConfigResource:
    type: str  # "topic" | "broker" | "broker_logger" | "group"
    name: str  # topic name, broker id ("" for the cluster-wide broker default), or group id

    def __post_init__(self) -> None:
        if self.type not in RESOURCE_TYPES:
            raise ValueError(f"unknown config resource type {self.type!r}; expected one of {', '.join(RESOURCE_TYPES)}")


@dataclass(frozen=True)
class ConfigSynonym:
    name: str
    value: str | None
    source: str  # a CONFIG_SOURCES name


@dataclass
class ConfigEntry:
    name: str
    value: str | None
    source: str = "UNKNOWN"
    is_default: bool = False
    read_only: bool = False
    is_sensitive: bool = False
    synonyms: list[ConfigSynonym] = field(default_factory=list)


@dataclass(frozen=True)
class AlterConfigOp:
    name: str
    value: str | None = None
    op: str = "set"  # "set" | "delete" | "append" | "subtract"

    def __post_init__(self) -> None:
        if self.op not in ALTER_OPS:
            raise ValueError(f"unknown config operation {self.op!r}; expected one of {', '.join(ALTER_OPS)}")


@dataclass
class ClusterDescription:
    cluster_id: str | None
    controller: Node | None
    brokers: list[Node]


@dataclass
class ListOffsetsResultInfo:
    offset: int
    timestamp: int
    leader_epoch: int | None


@dataclass
class ReplicaInfo:
    size: int
    offset_lag: int
    is_future: bool


@dataclass
class LogDirDescription:
    error: Exception | None
    replicas: dict[TopicPartition, ReplicaInfo]
    total_bytes: int | None = None
    usable_bytes: int | None = None


@dataclass(frozen=True)
class OffsetAndMetadata:
    """A committed offset: the next offset the group will read, with its metadata string
    and the leader epoch of the record before it (None: not known)."""

    offset: int
    metadata: str = ""
    leader_epoch: int | None = None


@dataclass(frozen=True)
class ConsumerGroupMetadata:
    """A consumer's group membership, for ``Producer.send_offsets_to_transaction`` (``Consumer.group_metadata()``)."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


@dataclass
class ConsumerGroupListing:
    group_id: str
    is_simple: bool  # protocol type "": offsets committed without group membership
    state: str | None  # None: the broker is too old to say (ListGroups < v4)
    type: str | None = None  # "classic" | "consumer"; None: not reported (ListGroups < v5)


@dataclass
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    assignment: list[TopicPartition] = field(default_factory=list)
    # members of a consumer group (KIP-848): their epoch and target assignment; None for classic groups
    member_epoch: int | None = None
    target_assignment: list[TopicPartition] | None = None


@dataclass
class ConsumerGroupDescription:
    group_id: str
    is_simple: bool
    state: str  # Empty, PreparingRebalance, CompletingRebalance, Assigning, Reconciling, Stable, Dead (= no such group)
    protocol_type: str
    partition_assignor: str  # the selected protocol ("range", ...) or server assignor ("uniform"); "" unless Stable
    coordinator: Node | None
    members: list[MemberDescription] = field(default_factory=list)
    type: str = "classic"  # "classic" or "consumer" (KIP-848)
    group_epoch: int | None = None  # consumer groups: the group epoch and the target assignment's epoch
    target_assignment_epoch: int | None = None


@dataclass(frozen=True)
class TransactionListing:
    """One transactional id a coordinator holds (Admin.list_transactions)."""

    transactional_id: str
    producer_id: int
    state: str


@dataclass
class TransactionDescription:
    """A transactional id at its coordinator (Admin.describe_transactions)."""

    coordinator_id: int
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_ms: int  # -1 when no transaction is open
    partitions: list[TopicPartition]


@dataclass(frozen=True)
class FencedProducer:
    """A transactional id's producer id and its new epoch once fenced (Admin.fence_producers):
    a producer still using an older epoch is fenced."""

    producer_id: int
    producer_epoch: int


@dataclass(frozen=True)
class ProducerState:
    """A producer a partition's leader knows (Admin.describe_producers); ``current_transaction_start_offset``
    is the first offset of its open transaction there, -1 if none."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_transaction_start_offset: int


# ---------------------------------------------------------------- share groups (KIP-932)

@dataclass(frozen=True)
class ShareGroupListing:
    group_id: str
    state: str | None  # Empty, Stable, Dead; None: the broker did not say


@dataclass
class ShareMemberDescription:
    member_id: str
    rack_id: str | None
    member_epoch: int
    client_id: str
    host: str
    subscribed_topics: list[str]
    assignment: list[TopicPartition] = field(default_factory=list)


@dataclass
class ShareGroupDescription:
    group_id: str
    state: str  # Empty, Stable, Dead
    coordinator: Node | None
    group_epoch: int
    assignment_epoch: int
    assignor: str
    members: list[ShareMemberDescription] = field(default_factory=list)


@dataclass(frozen=True)
class StreamsGroupListing:
    group_id: str
    state: str | None  # Empty, NotReady, Assigning, Reconciling, Stable, Dead; None: the broker did not say


#: A streams group member's tasks of one kind: subtopology id -> partitions.
StreamsTasks = dict[str, list[int]]


@dataclass
class StreamsMemberDescription:
    member_id: str
    member_epoch: int
    instance_id: str | None
    rack_id: str | None
    client_id: str
    host: str
    topology_epoch: int
    process_id: str
    user_endpoint: tuple[str, int] | None
    is_classic: bool
    assignment: dict[str, StreamsTasks] = field(default_factory=dict)         # "active"/"standby"/"warmup"
    target_assignment: dict[str, StreamsTasks] = field(default_factory=dict)


@dataclass
class StreamsGroupDescription:
    group_id: str
    state: str
    coordinator: Node | None
    group_epoch: int
    assignment_epoch: int
    assignor: str
    topology: dict | None                          # StreamsGroupDescribe's Topology, as decoded
    members: list[StreamsMemberDescription] = field(default_factory=list)

    def input_topics(self) -> list[str]:
        """The topics the group's tasks read: source and repartition source topics."""
        out: list[str] = []
        for sub in (self.topology or {}).get("subtopologies", []):
            out += sub["source_topics"] + [t["name"] for t in sub["repartition_source_topics"]]
        return list(dict.fromkeys(out))


@dataclass(frozen=True)
class SharePartitionOffset:
    """A share group's place in a partition: the first offset not yet delivered to completion
    (``start_offset``, -1 if the group has none there), its leader epoch, and the lag (the
    records not yet delivered to completion; -1 if the broker does not know)."""

    start_offset: int
    leader_epoch: int | None
    lag: int
