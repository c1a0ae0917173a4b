"""Where Samsa's answer differs from Apache Kafka 4.4.0's.

``ALLOW``: on purpose (a ZooKeeper cluster instead of KRaft, a GAPS.md line): the scenario runs
and its difference is printed, not failed. ``KNOWN``: Samsa bugs found by these scenarios and not
fixed yet (strict xfail: a fix shows as XPASS and the entry must go). Both fail when the answers
turn out equal, so the lists stay true."""

KRAFT_MIN_ISR = ("KRaft's `kafka-storage format` writes a cluster-wide min.insync.replicas default "
                 "(DYNAMIC_DEFAULT_BROKER_CONFIG); a ZooKeeper cluster has none (GAPS.md)")

ALLOW: dict[str, str] = {
    "test_share_version_feature": "Kafka 4.4 supports and finalizes share.version 2 (its 4.4 metadata version); "
                                  "Samsa advertises share.version 1, the level of KIP-932 as released in 4.2 "
                                  "(GAPS.md)",
    "test_topic_config_default[min.insync.replicas]": KRAFT_MIN_ISR,
    "test_broker_config_default[min.insync.replicas]": KRAFT_MIN_ISR,
    "test_kafka_tool[topics-describe]": KRAFT_MIN_ISR,
    "test_samsa_tool_against_kafka[topics-describe]": KRAFT_MIN_ISR,
    "test_kafka_tool[features]": "Samsa supports neither kraft.version (its quorum's feature) nor "
                                 "eligible.leader.replicas.version (no ELR), share.version up to 1, and its "
                                 "finalized epoch counts its own feature changes (GAPS.md)",
    # CreateTopics v5 lists a new topic's configs: min.insync.replicas from KRaft's cluster default
    "test_create_partition_count[-1]": KRAFT_MIN_ISR,
    "test_create_replication_factor[-1]": KRAFT_MIN_ISR,
    "test_create_validate_only_configs[valid]": KRAFT_MIN_ISR,
    "test_create_validate_only_defaults": KRAFT_MIN_ISR,
    "test_metadata_auto_create": "Samsa, as Kafka on ZooKeeper did, creates an auto-created topic before answering "
                                 "Metadata (NONE or LEADER_NOT_AVAILABLE); KRaft answers UNKNOWN_TOPIC_OR_PARTITION "
                                 "until the controller's record reaches the broker (seen three times in a row on "
                                 "4.4.0): both are retriable and the topic exists after",
    "test_produce_timestamp_too_old": "Kafka answers INVALID_TIMESTAMP with record_errors naming the record; Samsa "
                                      "refuses the batch whole with the same code (GAPS.md: per-record errors)",
}

KNOWN: dict[str, str] = {}
