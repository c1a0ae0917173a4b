"""The registry's metrics at ``/metrics`` (Prometheus text), named as the JMX exporter names
the registry's own (``kafka_schema_registry_*``)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily


class RegistryMetrics:
    def __init__(self, registry_state: object = None):
        self.registry = CollectorRegistry()
        self.leader = Gauge("kafka_schema_registry_master_slave_role",
                            "1 if this process is the one elected to write, else 0", registry=self.registry)
        self.created = Counter("kafka_schema_registry_schemas_created", "Schemas given a new id by this process",
                               ["schema_type"], registry=self.registry)
        self.deleted = Counter("kafka_schema_registry_schemas_deleted", "Versions deleted through this process",
                               registry=self.registry)
        self.incompatible = Counter("kafka_schema_registry_incompatible_schemas",
                                    "Registrations refused as incompatible (409)", registry=self.registry)
        self.register_latency = Histogram("kafka_schema_registry_register_seconds",
                                          "Time to register a schema (the writer)", registry=self.registry)
        self._state = registry_state
        if registry_state is not None:
            self.registry.register(_StateCollector(registry_state))

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class _StateCollector:
    def __init__(self, registry: object):
        self.reg = registry

    def collect(self):
        state = self.reg.state  # type: ignore[attr-defined]
        with self.reg.store.lock:  # type: ignore[attr-defined]
            live = [v for vs in state.subjects.values() for v in vs.values() if not v.deleted]
            subjects = sum(1 for vs in state.subjects.values() if any(not v.deleted for v in vs.values()))
            ids = {}
            for v in live:
                ids[v.id] = v.schema_type
        g = GaugeMetricFamily("kafka_schema_registry_registered_count", "Schemas (ids) in use by live versions")
        g.add_metric([], len(ids))
        yield g
        t = GaugeMetricFamily("kafka_schema_registry_schemas", "Schemas (ids) in use by type", labels=["schema_type"])
        for st in ("AVRO", "JSON", "PROTOBUF"):
            t.add_metric([st.lower()], sum(1 for x in ids.values() if x == st))
        yield t
        s = GaugeMetricFamily("kafka_schema_registry_subjects", "Subjects with a live version")
        s.add_metric([], subjects)
        yield s
        m = GaugeMetricFamily("kafka_schema_registry_max_id", "The largest schema id")
        m.add_metric([], state.max_id)
        yield m
