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
    "test_topic_config_default[message.timestamp.after.max.ms]": "Kafka 4 defaults it to 3600000 (1 h), Samsa to Long.MAX",
    "test_topic_config_keys_all": "Kafka 4.4 lists topic keys Samsa lacks (errors.deadletterqueue.group.enable, ...)",
    "test_broker_config_default[fetch.max.bytes]": "Samsa does not describe the broker key fetch.max.bytes",
    "test_describe_configs_unknown_broker": "message: Kafka 'expected 1 or empty string, but received 77'",
    "test_describe_configs_bad_broker_name": "message: Kafka 'Broker id must be an integer, but it is: not-a-number'",
    "test_incremental_alter_invalid_value[segment.bytes=10]": "segment.bytes minimum: Kafka 1048576, Samsa 14",
    "test_alter_configs_invalid_value[segment.bytes=10]": "segment.bytes minimum: Kafka 1048576, Samsa 14",
    "test_incremental_alter_invalid_value[min.cleanable.dirty.ratio=1.5]": "no upper bound (1) checked",
    "test_incremental_alter_invalid_value[compression.gzip.level=42]": "compression levels not range-checked",
    "test_create_validate_only_configs[zstd-level]": "compression levels not range-checked",
    "test_incremental_alter_unknown_topic": "message: Kafka \"The topic 'x' does not exist.\"",
    "test_incremental_alter_duplicate_key": "a key twice in one resource: Kafka INVALID_REQUEST 'Error due to duplicate "
                                            "config keys', Samsa applies both",
    "test_incremental_alter_bad_operation": "an unknown operation: Kafka UNKNOWN_SERVER_ERROR, Samsa INVALID_REQUEST",
    "test_incremental_alter_broker_dynamic": "broker key errors: Kafka INVALID_REQUEST, Samsa INVALID_CONFIG",
    "test_incremental_alter_broker_read_only": "Kafka INVALID_REQUEST '[broker.id]', Samsa INVALID_CONFIG '{broker.id}'",
    # topics
    "test_create_invalid_name[dot]": "CreateTopics names: Kafka 4 says 'Topic name is invalid: ...'",
    "test_create_invalid_name[dotdot]": "CreateTopics names: Kafka 4 says 'Topic name is invalid: ...'",
    "test_create_invalid_name[toolong]": "CreateTopics names: Kafka 4 says 'Topic name is invalid: ...'",
    "test_create_invalid_name[slash]": "CreateTopics names: Kafka 4 says 'Topic name is invalid: ...'",
    "test_create_invalid_name[space]": "CreateTopics names: Kafka 4 says 'Topic name is invalid: ...'",
    "test_create_invalid_name[empty]": "CreateTopics names: Kafka 4 says 'Topic name is invalid: ...'",
    "test_create_invalid_name[unicode]": "CreateTopics names: Kafka 4 says 'Topic name is invalid: ...'",
    "test_create_invalid_name[tab]": "CreateTopics names: Kafka 4 says 'Topic name is invalid: ...'",
    "test_create_invalid_name[bang]": "CreateTopics names: Kafka 4 says 'Topic name is invalid: ...'",
    "test_kafka_tool[topics-create-bad]": "CreateTopics names: Kafka 4 says 'Topic name is invalid: ...'",
    "test_create_partition_count[-1]": "CreateTopics v5 configs of a new topic: Kafka lists min.insync.replicas "
                                       "from the KRaft cluster default, and keys Samsa lacks",
    "test_create_replication_factor[-1]": "as test_create_partition_count[-1]",
    "test_create_validate_only_configs[min-isr-2]": "as test_create_partition_count[-1]",
    "test_create_validate_only_configs[valid]": "as test_create_partition_count[-1]",
    "test_create_validate_only_defaults": "as test_create_partition_count[-1]",
    "test_create_replication_factor[2]": "message: Kafka mentions cordoned log directories",
    "test_create_assignments_and_count": "message: Kafka 'A manual partition assignment was specified, but "
                                         "numPartitions was not set to -1.'",
    "test_create_assignment_unknown_broker": "message: Kafka 'The manual partition assignment includes broker 9, "
                                             "but no such broker is registered.'",
    "test_create_assignment_gap": "message: Kafka's starts in lower case",
    "test_create_duplicate_in_request": "a topic twice in one CreateTopics: Kafka INVALID_REQUEST 'Duplicate topic "
                                        "name.', Samsa creates it",
    "test_metadata_auto_create": "auto-creation by Metadata: Kafka's first answer is an error other than "
                                 "LEADER_NOT_AVAILABLE, Samsa answers at once",
    "test_delete_unknown_topic": "message: Kafka 'This server does not host this topic-partition.'",
    "test_create_partitions_unknown_topic": "message: Kafka null",
    # records
    "test_produce_unknown_partition": "Produce error_message: Kafka null, Samsa explains",
    "test_produce_too_large": "Produce error_message: Kafka null, Samsa explains",
    "test_produce_bad_crc": "Produce error_message: Kafka null, Samsa explains",
    "test_produce_timestamp_too_old": "Kafka INVALID_TIMESTAMP with record_errors naming the record; Samsa "
                                      "refuses the batch whole (GAPS.md: per-record errors)",
    "test_produce_idempotent_out_of_order": "OUT_OF_ORDER_SEQUENCE_NUMBER: Kafka gives the partition's "
                                            "log_start_offset (0), Samsa -1",
    "test_fetch_offset[10]": "OFFSET_OUT_OF_RANGE: Kafka answers high watermark, LSO and log start -1",
    "test_fetch_offset[-1]": "OFFSET_OUT_OF_RANGE: Kafka answers high watermark, LSO and log start -1",
    "test_fetch_offset[100]": "OFFSET_OUT_OF_RANGE: Kafka answers high watermark, LSO and log start -1",
    # groups and admin
    "test_describe_log_dirs": "a partition asked for but absent (5): Samsa lists every partition of the topic",
    "test_alter_client_quotas_bad_entity": "message: Kafka 'Unhandled client quota entity type: planet'",
    "test_alter_partition_reassignment_unknown_broker": "an unknown partition: Kafka UNKNOWN_TOPIC_OR_PARTITION, "
                                                        "Samsa INVALID_REPLICA_ASSIGNMENT",
}
