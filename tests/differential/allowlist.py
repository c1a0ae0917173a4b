"""Where Samsa's answer differs from Apache Kafka 4.4.0's.

``ALLOW``: on purpose (a ZooKeeper cluster instead of KRaft, a GAPS.md line): the scenario runs
and its difference is printed, not failed. ``KNOWN``: Samsa bugs found by these scenarios and not
fixed yet (strict xfail: a fix shows as XPASS and the entry must go). Both fail when the answers
turn out equal, so the lists stay true."""

KRAFT_MIN_ISR = ("KRaft's `kafka-storage format` writes a cluster-wide min.insync.replicas default "
                 "(DYNAMIC_DEFAULT_BROKER_CONFIG); a ZooKeeper cluster has none (GAPS.md)")
NO_DTP = "DescribeTopicPartitions (API 75) is not served: kafka-topics falls back to Metadata, Elr N/A (GAPS.md)"

ALLOW: dict[str, str] = {
    "test_topic_config_default[min.insync.replicas]": KRAFT_MIN_ISR,
    "test_broker_config_default[min.insync.replicas]": KRAFT_MIN_ISR,
    "test_kafka_tool[topics-describe]": f"{KRAFT_MIN_ISR}; {NO_DTP}",
    "test_samsa_tool_against_kafka[topics-describe]": KRAFT_MIN_ISR,
    "test_kafka_tool[features]": "KRaft feature levels (metadata.version, kraft.version, ...) do not exist in a "
                                 "ZooKeeper cluster: Samsa finalizes none",
    "test_describe_topic_partitions": NO_DTP,
}

KNOWN: dict[str, str] = {
    # configs
    "test_topic_config_keys_all": "Kafka 4.4 lists topic keys Samsa lacks (errors.deadletterqueue.group.enable, ...)",
    "test_broker_config_default[fetch.max.bytes]": "Samsa does not describe the broker key fetch.max.bytes",
    # topics
    "test_kafka_tool[topics-create-bad]": "CreateTopics names: Kafka 4 says 'Topic name is invalid: ...'",
    "test_create_partition_count[-1]": "CreateTopics v5 configs of a new topic: Kafka lists min.insync.replicas "
                                       "from the KRaft cluster default, and keys Samsa lacks",
    "test_create_replication_factor[-1]": "as test_create_partition_count[-1]",
    "test_create_validate_only_configs[min-isr-2]": "as test_create_partition_count[-1]",
    "test_create_validate_only_configs[valid]": "as test_create_partition_count[-1]",
    "test_create_validate_only_defaults": "as test_create_partition_count[-1]",
    "test_metadata_auto_create": "auto-creation by Metadata: Kafka's first answer is an error other than "
                                 "LEADER_NOT_AVAILABLE, Samsa answers at once",
    # records
    "test_produce_too_large": "Produce error_message: Kafka null, Samsa explains",
    "test_produce_timestamp_too_old": "Kafka INVALID_TIMESTAMP with record_errors naming the record; Samsa "
                                      "refuses the batch whole (GAPS.md: per-record errors)",
    # groups and admin
    "test_alter_client_quotas_bad_entity": "message: Kafka 'Unhandled client quota entity type: planet'",
    "test_alter_partition_reassignment_unknown_broker": "an unknown partition: Kafka UNKNOWN_TOPIC_OR_PARTITION, "
                                                        "Samsa INVALID_REPLICA_ASSIGNMENT",
}
