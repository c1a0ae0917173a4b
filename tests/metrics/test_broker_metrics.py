"""The broker's /metrics after a known load: the counters are what was produced and fetched."""

from __future__ import annotations

from scrape import scrape, value

from samsa import Admin, Consumer, Producer, TopicPartition
from samsa.client.types import NewTopic
from waiting import wait_until

RECORDS = 600


def test_counters_equal_what_was_produced_and_fetched(metered_broker):
    b = metered_broker
    topic = "metered"
    with Admin({"bootstrap.servers": b.bootstrap}) as admin:
        admin.create_topics([NewTopic(topic, 2, 1)])
        with Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5}) as producer:
            for i in range(RECORDS):
                producer.send(topic, b"value-%d" % i, key=b"key-%d" % i)
            producer.flush()
        dirs = admin.describe_log_dirs([0])[0]
        sizes = {tp: r.size for d in dirs.values() for tp, r in d.replicas.items() if tp.topic == topic}
        assert len(sizes) == 2
        log_bytes = sum(sizes.values())

        consumer = Consumer({"bootstrap.servers": b.bootstrap, "auto.offset.reset": "earliest"})
        try:
            consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
            seen = 0
            while seen < RECORDS:
                seen += len(consumer.poll(2.0))
            assert seen == RECORDS
            m = scrape(b.metrics_url)
            assert value(m, "kafka_server_socket_server_metrics_connection_count", listener="PLAINTEXT") >= 2
        finally:
            consumer.close()

        # A group that committed offset 1 of partition 0: its lag is the log end less 1.
        admin.alter_consumer_group_offsets("lagging", {TopicPartition(topic, 0): 1})

    m = scrape(b.metrics_url)
    assert value(m, "kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == RECORDS
    assert value(m, "kafka_server_brokertopicmetrics_bytesin_total", topic=topic) == log_bytes
    assert value(m, "kafka_server_brokertopicmetrics_bytesout_total", topic=topic) == log_bytes
    assert value(m, "kafka_server_brokertopicmetrics_failedproducerequests_total", topic=topic) == 0
    # No other topic takes produce requests here, so the all-topics totals are the same figures.
    assert value(m, "kafka_server_brokertopicmetrics_messagesin_total") == RECORDS
    assert value(m, "kafka_server_brokertopicmetrics_bytesin_total") == log_bytes

    ends = {p: value(m, "kafka_log_log_logendoffset", topic=topic, partition=str(p)) for p in (0, 1)}
    assert sum(ends.values()) == RECORDS
    for p in (0, 1):
        assert value(m, "kafka_log_log_size", topic=topic, partition=str(p)) == sizes[TopicPartition(topic, p)]
        assert value(m, "kafka_log_log_logstartoffset", topic=topic, partition=str(p)) == 0
        assert value(m, "kafka_log_log_numlogsegments", topic=topic, partition=str(p)) == 1

    produces = sum(v for ls, v in m["kafka_network_requestmetrics_requests_total"] if ls["request"] == "Produce")
    assert produces >= 1
    for name in ("totaltimems", "localtimems", "remotetimems", "requestqueuetimems", "responsesendtimems"):
        assert value(m, f"kafka_network_requestmetrics_{name}_count", request="Produce") == produces
        assert value(m, f"kafka_network_requestmetrics_{name}_bucket", request="Produce", le="+Inf") == produces

    fetches = sum(v for ls, v in m["kafka_network_requestmetrics_requests_total"] if ls["request"] == "Fetch")
    assert fetches >= 1
    assert value(m, "kafka_network_requestmetrics_totaltimems_count", request="FetchConsumer") == fetches
    assert "FetchFollower" not in {ls["request"] for ls, _ in m["kafka_network_requestmetrics_totaltimems_count"]}

    assert value(m, "kafka_server_replicamanager_partitioncount") >= 2
    assert value(m, "kafka_server_replicamanager_leadercount") == value(m, "kafka_server_replicamanager_partitioncount")
    assert value(m, "kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert value(m, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert value(m, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0
    assert value(m, "kafka_coordinator_group_groupmetadatamanager_numgroupsempty") >= 1
    assert value(m, "kafka_consumergroup_current_offset", consumergroup="lagging", topic=topic, partition="0") == 1
    assert value(m, "kafka_consumergroup_lag", consumergroup="lagging", topic=topic, partition="0") == ends[0] - 1
    assert 0 <= value(m, "samsa_event_loop_busy_ratio") <= 1
    assert value(m, "samsa_event_loop_lag_max_ms") >= 0


def test_event_loop_lag_is_probed(metered_broker):
    """The probe runs every 100 ms from the start: its histogram counts on, each probe in one bucket."""
    b = metered_broker
    first = value(scrape(b.metrics_url), "samsa_event_loop_lag_ms_count")
    m = wait_until(lambda: (s := scrape(b.metrics_url)) and value(s, "samsa_event_loop_lag_ms_count") > first and s,
                   "more loop-lag probes")
    count = value(m, "samsa_event_loop_lag_ms_count")
    assert value(m, "samsa_event_loop_lag_ms_bucket", le="+Inf") == count
    assert value(m, "samsa_event_loop_lag_ms_sum") >= 0


def test_failed_produce_is_counted(metered_broker):
    """A batch the topic refuses (over its max.message.bytes) counts as a failed produce request."""
    b = metered_broker
    topic = "refusing"
    with Admin({"bootstrap.servers": b.bootstrap}) as admin:
        admin.create_topics([NewTopic(topic, 1, 1, config={"max.message.bytes": "200"})])
    with Producer({"bootstrap.servers": b.bootstrap, "retries": 0}) as producer:
        future = producer.send(topic, b"x" * 1000)
        try:
            future.result(30)
        except Exception:  # noqa: BLE001 - MessageSizeTooLarge, as the broker answered
            pass
        else:
            raise AssertionError("a record over max.message.bytes was accepted")
    m = wait_until(lambda: (s := scrape(b.metrics_url)) and value(
        s, "kafka_server_brokertopicmetrics_failedproducerequests_total", topic=topic) >= 1 and s,
        "the failed produce counted")
    assert value(m, "kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == 0
    assert value(m, "kafka_server_brokertopicmetrics_bytesrejected_total", topic=topic) > 1000


def test_endpoint_answers_http_as_prometheus_expects(metered_broker):
    import urllib.error
    import urllib.request
    b = metered_broker
    with urllib.request.urlopen(b.metrics_url) as r:
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    req = urllib.request.Request(b.metrics_url, headers={"Accept": "application/openmetrics-text; version=1.0.0"})
    with urllib.request.urlopen(req) as r:
        assert r.headers["Content-Type"].startswith("application/openmetrics-text")
        assert r.read().rstrip().endswith(b"# EOF")
    try:
        urllib.request.urlopen(b.metrics_url.replace("/metrics", "/nothing"))
    except urllib.error.HTTPError as e:
        assert e.code == 404
    else:
        raise AssertionError("an unknown path answered 200")


def test_listener_key_is_checked():
    import pytest

    from samsa.broker_config import BrokerConfig, ConfigError
    assert BrokerConfig({"log.dirs": "/tmp/x"})["prometheus.listener"] is None  # off unless set
    assert BrokerConfig({"log.dirs": "/tmp/x", "prometheus.listener": "http://:9404"})["prometheus.listener"]
    with pytest.raises(ConfigError, match="prometheus.listener"):
        BrokerConfig({"log.dirs": "/tmp/x", "prometheus.listener": "localhost:9404"})


def test_consumer_group_protocol_metrics(metered_broker):
    """Consumer groups of the KIP-848 protocol, counted per protocol and per state as Kafka 4's
    group-coordinator-metrics name them."""
    b = metered_broker
    topic, group = "kip848-metered", "kip848-metered-group"
    with Admin({"bootstrap.servers": b.bootstrap}) as admin:
        admin.create_topics([NewTopic(topic, 2, 1)])
    with Consumer({"bootstrap.servers": b.bootstrap, "group.id": group, "group.protocol": "consumer",
                   "auto.offset.reset": "earliest"}) as consumer:
        consumer.subscribe([topic])
        wait_until(lambda: consumer.poll(0.1) == [] and len(consumer.assignment()) == 2, "the assignment")
        m = wait_until(lambda: (s := scrape(b.metrics_url)) and value(
            s, "kafka_server_group_coordinator_metrics_consumer_group_count", state="stable") >= 1 and s,
            "a stable consumer group in the metrics")
    assert value(m, "kafka_server_group_coordinator_metrics_group_count", protocol="consumer") >= 1
    assert value(m, "kafka_server_group_coordinator_metrics_consumer_group_rebalance_total") >= 1
