"""The broker's metric families, built from its state each time ``/metrics`` is scraped.

Names follow the Prometheus JMX exporter's common Kafka rules (lower-cased, ``kafka_<domain>_
<type>_<name>``; a ``…PerSec`` meter becomes a ``…_total`` counter without ``PerSec``), so
dashboards and alerts written for Kafka work unchanged. docs/metrics.md lists them all.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from samsa.protocol import api
from samsa.cluster.replica_manager import ReplicaMetrics
from samsa.server.metrics.counters import (BUCKETS_MS, EXTRA_REQUEST_NAMES, TIME_NAMES, BrokerTopicStats, LoopBusy,
                                           RequestTimes)
from samsa.server.metrics.loop_lag import LoopLag

# BrokerTopicMetrics: (MBean name without PerSec, TopicCounters attribute, help).
TOPIC_METERS = (
    ("MessagesIn", "messages_in", "Records appended by produce requests"),
    ("BytesIn", "bytes_in", "Bytes of record batches appended by produce requests"),
    ("BytesOut", "bytes_out", "Bytes of records sent to consumers by fetch requests"),
    ("BytesRejected", "bytes_rejected", "Bytes of record batches refused by produce requests"),
    ("FailedProduceRequests", "failed_produce", "Produce requests (per partition) that failed"),
    ("FailedFetchRequests", "failed_fetch", "Fetch requests (per partition) that failed"),
    ("TotalProduceRequests", "total_produce", "Produce requests (per partition)"),
    ("TotalFetchRequests", "total_fetch", "Fetch requests (per partition)"),
    ("ReplicationBytesOut", "replication_bytes_out", "Bytes of records sent to followers"),
)

GROUP_STATES = ("PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty")


class BrokerCollector(Collector):
    """Every family of one broker. ``broker`` is the running BrokerServer, read through the
    snapshots its rooms expose (``replicas.metrics()``, ``groups.metrics()``,
    ``dispatcher.connection_counts()``, ``fetch_sessions.metrics()``, the metadata cache);
    ``topics``, ``requests`` and ``loop_busy`` the counters its request paths add to."""

    def __init__(self, broker: Any, topics: BrokerTopicStats, requests: RequestTimes, loop_busy: LoopBusy,
                 loop_lag: LoopLag | None = None):
        self.broker = broker
        self.topics = topics
        self.requests = requests
        self.loop_busy = loop_busy
        self.loop_lag = loop_lag

    def collect(self) -> Iterator[Metric]:
        yield from self._topic_metrics()
        yield from self._request_metrics()
        if not self.broker.started.is_set():
            return
        replicas = self.broker.replicas.metrics()
        yield from self._replica_manager(replicas)
        yield from self._controller()
        yield from self._logs(replicas)
        yield from self._groups(replicas)
        yield from self._network()
        yield from self._fetch_sessions()
        yield from self._shares()

    # ---------------------------------------------------------------- BrokerTopicMetrics

    def _topic_metrics(self) -> Iterator[Metric]:
        if self.broker.started.is_set():
            for gone in [t for t in self.topics.topics if t not in self.broker.metadata.topics]:
                self.topics.forget(gone)  # deleted: its series go, as Kafka removes its MBeans
        topics = sorted(self.topics.topics.items())
        for mbean, attr, doc in TOPIC_METERS:
            name = f"kafka_server_brokertopicmetrics_{mbean.lower()}"
            family = CounterMetricFamily(name, f"{doc} (BrokerTopicMetrics {mbean}PerSec)", labels=["topic"])
            family.samples.append(Sample(name + "_total", {}, getattr(self.topics.all, attr)))
            for topic, counters in topics:
                family.add_metric([topic], getattr(counters, attr))
            yield family

    # ---------------------------------------------------------------- RequestMetrics

    def _request_metrics(self) -> Iterator[Metric]:
        self.requests.fold()
        requests = CounterMetricFamily("kafka_network_requestmetrics_requests",
                                       "Requests answered, per API and version (RequestMetrics RequestsPerSec)",
                                       labels=["request", "version"])
        for (key, version), count in sorted(self.requests.requests.items()):
            requests.add_metric([_api_name(key), str(version)], count)
        yield requests
        for time_name in TIME_NAMES:
            family = HistogramMetricFamily(f"kafka_network_requestmetrics_{time_name.lower()}",
                                           f"RequestMetrics {time_name}, per API, in milliseconds",
                                           labels=["request"])
            for (key, name), h in sorted(self.requests.histograms.items()):
                if name != time_name:
                    continue
                cumulative, buckets = 0, []
                for bound, count in zip((*map(_bound, BUCKETS_MS), "+Inf"), h.counts):
                    cumulative += count
                    buckets.append((bound, cumulative))
                family.add_metric([_api_name(key)], buckets, h.total)
            yield family

    # ---------------------------------------------------------------- ReplicaManager

    def _replica_manager(self, replicas: ReplicaMetrics) -> Iterator[Metric]:
        min_isr: dict[str, int] = {}
        led = under = under_min = at_min = 0
        for p in replicas.partitions:
            if not p.leader:
                continue
            led += 1
            if p.isr < p.replicas:
                under += 1
            m = min_isr.get(p.topic)
            if m is None:
                m = min_isr[p.topic] = self.broker.metadata.topic_config(p.topic)["min.insync.replicas"]
            if p.isr < m:
                under_min += 1
            elif p.isr == m:
                at_min += 1
        for name, value, doc in (
                ("underreplicatedpartitions", under, "Partitions led here whose ISR is smaller than their replicas"),
                ("underminisrpartitioncount", under_min, "Partitions led here whose ISR is below min.insync.replicas"),
                ("atminisrpartitioncount", at_min, "Partitions led here whose ISR is at min.insync.replicas"),
                ("partitioncount", len(replicas.partitions), "Partitions hosted here (leader or follower)"),
                ("leadercount", led, "Partitions led here")):
            yield GaugeMetricFamily(f"kafka_server_replicamanager_{name}", doc, value=value)
        yield CounterMetricFamily("kafka_server_replicamanager_isrshrinks", "ISR shrinks of partitions led here "
                                  "(ReplicaManager IsrShrinksPerSec)", value=replicas.isr_shrinks)
        yield CounterMetricFamily("kafka_server_replicamanager_isrexpands", "ISR expansions of partitions led here "
                                  "(ReplicaManager IsrExpandsPerSec)", value=replicas.isr_expands)

    # ---------------------------------------------------------------- KafkaController

    def _controller(self) -> Iterator[Metric]:
        active = self.broker.controller_id == self.broker.broker_id
        topics = list(self.broker.metadata.topics.values())
        offline = 0
        if active:
            alive = {b.id for b in self.broker.alive_brokers()}
            offline = sum(1 for t in topics for s in t.partitions.values() if s.leader not in alive)
        yield GaugeMetricFamily("kafka_controller_kafkacontroller_activecontrollercount",
                                "1 on the broker that is the active controller, else 0", value=int(active))
        yield GaugeMetricFamily("kafka_controller_kafkacontroller_offlinepartitionscount",
                                "Partitions without a live leader (reported by the active controller)", value=offline)
        yield GaugeMetricFamily("kafka_controller_kafkacontroller_globaltopiccount",
                                "Topics in the cluster (reported by the active controller)",
                                value=len(topics) if active else 0)
        yield GaugeMetricFamily("kafka_controller_kafkacontroller_globalpartitioncount",
                                "Partitions in the cluster (reported by the active controller)",
                                value=sum(len(t.partitions) for t in topics) if active else 0)

    # ---------------------------------------------------------------- Log

    def _logs(self, replicas: ReplicaMetrics) -> Iterator[Metric]:
        families = {name: GaugeMetricFamily(f"kafka_log_log_{name}", doc, labels=["topic", "partition"])
                    for name, doc in (("size", "Bytes of a partition's log segments"),
                                      ("numlogsegments", "Segments of a partition's log"),
                                      ("logendoffset", "A partition's log end offset"),
                                      ("logstartoffset", "A partition's log start offset"))}
        for p in replicas.partitions:
            labels = [p.topic, str(p.index)]
            families["size"].add_metric(labels, p.size_bytes)
            families["numlogsegments"].add_metric(labels, p.segments)
            families["logendoffset"].add_metric(labels, p.log_end_offset)
            families["logstartoffset"].add_metric(labels, p.log_start_offset)
        yield from families.values()

    # ---------------------------------------------------------------- group coordinator

    def _groups(self, replicas: ReplicaMetrics) -> Iterator[Metric]:
        groups = self.broker.groups.metrics()
        prefix = "kafka_coordinator_group_groupmetadatamanager_"
        yield GaugeMetricFamily(prefix + "numgroups", "Groups this broker coordinates", value=len(groups.states))
        for state in GROUP_STATES:
            yield GaugeMetricFamily(prefix + f"numgroups{state.lower()}", f"Groups in state {state}",
                                    value=groups.states.count(state))
        yield GaugeMetricFamily(prefix + "numoffsets", "Committed offsets this broker holds",
                                value=sum(len(c) for c in groups.committed.values()))
        yield CounterMetricFamily("kafka_server_group_coordinator_metrics_group_completed_rebalance",
                                  "Rebalances completed (a new generation) by this coordinator",
                                  value=groups.completed_rebalances)
        # The consumer group protocol (KIP-848), as Kafka 4's group-coordinator-metrics name them.
        by_protocol = GaugeMetricFamily("kafka_server_group_coordinator_metrics_group_count",
                                        "Groups this broker coordinates, per protocol", labels=["protocol"])
        by_protocol.add_metric(["classic"], len(groups.states))
        by_protocol.add_metric(["consumer"], len(groups.consumer_states))
        by_protocol.add_metric(["share"], len(groups.share_states))
        by_protocol.add_metric(["streams"], len(groups.streams_states))
        yield by_protocol
        by_state = GaugeMetricFamily("kafka_server_group_coordinator_metrics_consumer_group_count",
                                     "Consumer groups (KIP-848) this broker coordinates, per state", labels=["state"])
        for state in ("Empty", "Assigning", "Reconciling", "Stable", "Dead"):
            by_state.add_metric([state.lower()], groups.consumer_states.count(state))
        yield by_state
        yield CounterMetricFamily("kafka_server_group_coordinator_metrics_consumer_group_rebalance",
                                  "Target assignments computed for consumer groups (KIP-848)",
                                  value=groups.consumer_rebalances)
        share = GaugeMetricFamily("kafka_server_group_coordinator_metrics_share_group_count",
                                  "Share groups (KIP-932) this broker coordinates, per state", labels=["state"])
        for state in ("Empty", "Stable", "Dead"):
            share.add_metric([state.lower()], groups.share_states.count(state))
        yield share
        yield CounterMetricFamily("kafka_server_group_coordinator_metrics_share_group_rebalance",
                                  "Target assignments computed for share groups (KIP-932)",
                                  value=groups.share_rebalances)
        streams = GaugeMetricFamily("kafka_server_group_coordinator_metrics_streams_group_count",
                                    "Streams groups (KIP-1071) this broker coordinates, per state", labels=["state"])
        for state in ("Empty", "NotReady", "Assigning", "Reconciling", "Stable", "Dead"):
            streams.add_metric([state.lower()], groups.streams_states.count(state))
        yield streams
        yield CounterMetricFamily("kafka_server_group_coordinator_metrics_streams_group_rebalance",
                                  "Target assignments computed for streams groups (KIP-1071)",
                                  value=groups.streams_rebalances)
        yield from self._lag(groups.committed, replicas)

    @staticmethod
    def _lag(committed: dict[str, dict[tuple[str, int], int]], replicas: ReplicaMetrics) -> Iterator[Metric]:
        """kafka_exporter's consumer-group families, for the partitions this broker hosts."""
        high_watermarks = {(p.topic, p.index): p.high_watermark for p in replicas.partitions}
        lag = GaugeMetricFamily("kafka_consumergroup_lag", "Log end offset (high watermark) less the group's "
                                "committed offset", labels=["consumergroup", "topic", "partition"])
        current = GaugeMetricFamily("kafka_consumergroup_current_offset", "The group's committed offset",
                                    labels=["consumergroup", "topic", "partition"])
        for group_id, offsets in sorted(committed.items()):
            for (topic, index), offset in sorted(offsets.items()):
                hw = high_watermarks.get((topic, index))
                if hw is None:
                    continue
                labels = [group_id, topic, str(index)]
                current.add_metric(labels, offset)
                lag.add_metric(labels, max(hw - offset, 0))
        yield lag
        yield current

    # ---------------------------------------------------------------- network

    def _fetch_sessions(self) -> Iterator[Metric]:
        cache = self.broker.fetch_sessions.metrics()
        prefix = "kafka_server_fetchsessioncache_"
        yield GaugeMetricFamily(prefix + "numincrementalfetchsessions", "Incremental fetch sessions cached "
                                "(FetchSessionCache NumIncrementalFetchSessions)", value=cache.sessions)
        yield GaugeMetricFamily(prefix + "numincrementalfetchpartitionscached", "Partitions in the cached fetch "
                                "sessions (NumIncrementalFetchPartitionsCached)", value=cache.partitions)
        evictions = CounterMetricFamily(prefix + "incrementalfetchsessionevictions", "Fetch sessions evicted "
                                        "for new ones (IncrementalFetchSessionEvictionsPerSec)")
        evictions.add_metric([], cache.evictions)
        yield evictions

    def _shares(self) -> Iterator[Metric]:
        """Share partitions led here and share sessions (KIP-932): Kafka's SharePartitionMetrics
        and ShareSessionCache gauges, and Samsa's counts of acquired and redelivered records."""
        shares = self.broker.shares
        labels = ["group", "topic", "partition"]
        in_flight = GaugeMetricFamily("kafka_server_sharepartitionmetrics_inflightmessagecount",
                                      "Records in the share partition's in-flight window (InFlightMessageCount)",
                                      labels=labels)
        acquired = GaugeMetricFamily("samsa_share_partition_acquired_records",
                                     "Records acquired by share group members and not acknowledged yet", labels=labels)
        for m in shares.metrics():
            key = [m.group_id, m.topic, str(m.partition)]
            in_flight.add_metric(key, m.in_flight)
            acquired.add_metric(key, m.acquired)
        yield in_flight
        yield acquired
        redelivered = CounterMetricFamily("samsa_share_redelivered_records",
                                          "Records delivered again to a share group (delivery count above 1)")
        redelivered.add_metric([], shares.redelivered)
        yield redelivered
        sessions = shares.sessions
        yield GaugeMetricFamily("kafka_server_sharesessioncache_sharesessionscount",
                                "Share sessions cached (ShareSessionCache ShareSessionsCount)", value=len(sessions))
        yield GaugeMetricFamily("kafka_server_sharesessioncache_sharepartitionscount",
                                "Partitions in the cached share sessions (SharePartitionsCount)",
                                value=sessions.partition_count())

    def _network(self) -> Iterator[Metric]:
        per_listener = {name: 0 for name, _, _ in self.broker.bound}
        per_listener.update(self.broker.dispatcher.connection_counts())
        connections = GaugeMetricFamily("kafka_server_socket_server_metrics_connection_count",
                                        "Open client connections, per listener", labels=["listener"])
        for listener, count in sorted(per_listener.items()):
            connections.add_metric([listener], count)
        yield connections
        busy = self.loop_busy.ratio
        yield GaugeMetricFamily("samsa_event_loop_busy_ratio", "Share of the last window the broker's event loop "
                                "spent running (not waiting for I/O)", value=busy)
        yield GaugeMetricFamily("kafka_network_socketserver_networkprocessoravgidlepercent",
                                "1 - samsa_event_loop_busy_ratio (the broker has one event loop, no network "
                                "processor threads)", value=1.0 - busy)
        lag = self.loop_lag
        if lag is not None:
            yield GaugeMetricFamily("samsa_event_loop_lag_max_ms", "The longest a callback due on the broker's event "
                                    "loop waited past its time, over the last 5 s, in milliseconds", value=lag.max_ms)
            h = lag.histogram
            family = HistogramMetricFamily("samsa_event_loop_lag_ms", "How long a callback due on the broker's event "
                                           "loop waited past its time (a probe every 100 ms), in milliseconds")
            cumulative, buckets = 0, []
            for bound, count in zip((*map(_bound, BUCKETS_MS), "+Inf"), h.counts):
                cumulative += count
                buckets.append((bound, cumulative))
            family.add_metric([], buckets, h.total)
            yield family


def _bound(ms: float) -> str:
    return repr(float(ms))


_NAMES: dict[int, str] = dict(EXTRA_REQUEST_NAMES)


def _api_name(key: int) -> str:
    name = _NAMES.get(key)
    if name is None:
        try:
            name = api.api(key).name
        except Exception:  # noqa: BLE001 - a key without a schema
            name = str(key)
        _NAMES[key] = name
    return name
