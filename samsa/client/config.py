"""Client configuration: Kafka's producer, consumer and admin keys with Kafka's defaults.

``ClientConfig(PRODUCER_KEYS, {"bootstrap.servers": "h:9092", "acks": "all"})`` parses
every known key to its type (a value may be a Python value or the string a properties file
holds), raises :class:`ConfigError` for a bad value of a known key, and logs a warning
for an unknown key — which stays available to plugins through :attr:`ClientConfig.originals`,
as Kafka hands its configs to interceptors, serializers and partitioners.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any

from samsa.configdef import INT_MAX, ConfigError, Key, at_least, keys, one_of, parse_value
from samsa.security.ssl_keys import SSL_COMMON_KEYS
from samsa.serialization import SERDE_KEYS, with_headers

log = logging.getLogger(__name__)

__all__ = ["ClientConfig", "ConfigError", "PRODUCER_KEYS", "CONSUMER_KEYS", "SHARE_CONSUMER_KEYS", "ADMIN_KEYS",
           "load_plugins"]


def _acks(v: Any) -> str | None:
    return None if str(v) in ("all", "-1", "0", "1") else "String must be one of: all, -1, 0, 1"


COMMON = (
    Key("bootstrap.servers", "list", None, lambda v: None if v else "bootstrap.servers must name at least one broker"),
    Key("client.id", "string", ""),
    Key("client.dns.lookup", "string", "use_all_dns_ips"),
    Key("request.timeout.ms", "int", 30000, at_least(0)),
    Key("metadata.max.age.ms", "long", 300000, at_least(0)),
    Key("retry.backoff.ms", "long", 100, at_least(0)),
    Key("retry.backoff.max.ms", "long", 1000, at_least(0)),
    Key("reconnect.backoff.ms", "long", 50, at_least(0)),
    Key("reconnect.backoff.max.ms", "long", 1000, at_least(0)),
    Key("socket.connection.setup.timeout.ms", "long", 10000, at_least(0)),
    Key("socket.connection.setup.timeout.max.ms", "long", 30000, at_least(0)),
    Key("connections.max.idle.ms", "long", 540000),
    Key("send.buffer.bytes", "int", 131072, at_least(-1)),
    Key("receive.buffer.bytes", "int", 32768, at_least(-1)),
    Key("security.protocol", "string", "PLAINTEXT", one_of("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")),
    Key("sasl.mechanism", "string", "GSSAPI"),
    Key("sasl.jaas.config", "password", None),
    Key("sasl.username", "string", None),  # librdkafka's names, for the same properties files
    Key("sasl.password", "password", None),
    *SSL_COMMON_KEYS,
    Key("metric.reporters", "list", []),
)

PRODUCER_KEYS = keys(
    *COMMON,
    Key("acks", "string", "all", _acks),
    Key("key.serializer", "class", None),
    Key("value.serializer", "class", None),
    Key("partitioner.class", "class", None),
    Key("partitioner.ignore.keys", "bool", False),
    Key("partitioner.adaptive.partitioning.enable", "bool", True),
    Key("interceptor.classes", "list", []),
    Key("batch.size", "int", 16384, at_least(0)),
    Key("linger.ms", "long", 5, at_least(0)),
    Key("buffer.memory", "long", 33554432, at_least(0)),
    Key("max.block.ms", "long", 60000, at_least(0)),
    Key("max.request.size", "int", 1048576, at_least(0)),
    Key("compression.type", "string", "none", one_of("none", "gzip", "snappy", "lz4", "zstd")),
    Key("compression.gzip.level", "int", -1),
    Key("compression.lz4.level", "int", 9),
    Key("compression.zstd.level", "int", 3),
    Key("retries", "int", INT_MAX, at_least(0)),
    Key("delivery.timeout.ms", "int", 120000, at_least(0)),
    Key("max.in.flight.requests.per.connection", "int", 5, at_least(1)),
    Key("enable.idempotence", "bool", True),
    Key("transactional.id", "string", None),
    Key("transaction.timeout.ms", "int", 60000),
    Key("metadata.max.idle.ms", "long", 300000, at_least(5000)),
)

CONSUMER_KEYS = keys(
    *COMMON,
    Key("group.id", "string", None),
    Key("group.instance.id", "string", None),
    Key("group.protocol", "string", "classic", one_of("classic", "consumer")),
    Key("group.remote.assignor", "string", None),  # group.protocol=consumer: the broker's assignor to ask for
    Key("key.deserializer", "class", None),
    Key("value.deserializer", "class", None),
    Key("interceptor.classes", "list", []),
    Key("partition.assignment.strategy", "list", ["range", "cooperative-sticky"]),
    Key("session.timeout.ms", "int", 45000),
    Key("heartbeat.interval.ms", "int", 3000),
    Key("max.poll.interval.ms", "int", 300000, at_least(1)),
    Key("max.poll.records", "int", 500, at_least(1)),
    Key("enable.auto.commit", "bool", True),
    Key("auto.commit.interval.ms", "int", 5000, at_least(0)),
    Key("auto.offset.reset", "string", "latest", one_of("earliest", "latest", "none")),
    Key("fetch.min.bytes", "int", 1, at_least(0)),
    Key("fetch.max.bytes", "int", 52428800, at_least(0)),
    Key("fetch.max.wait.ms", "int", 500, at_least(0)),
    Key("max.partition.fetch.bytes", "int", 1048576, at_least(0)),
    Key("isolation.level", "string", "read_uncommitted", one_of("read_uncommitted", "read_committed")),
    Key("check.crcs", "bool", True),
    Key("exclude.internal.topics", "bool", True),
    Key("allow.auto.create.topics", "bool", True),
    Key("client.rack", "string", ""),
    Key("default.api.timeout.ms", "int", 60000, at_least(0)),
)

# The share consumer (KIP-932): what Java's ShareConsumerConfig takes. Offsets, isolation and
# session timing are the share group's configs (share.auto.offset.reset, share.isolation.level,
# share.record.lock.duration.ms, ...), set on the broker with IncrementalAlterConfigs.
SHARE_CONSUMER_KEYS = keys(
    *COMMON,
    Key("group.id", "string", None),
    Key("key.deserializer", "class", None),
    Key("value.deserializer", "class", None),
    Key("share.acknowledgement.mode", "string", "implicit", one_of("implicit", "explicit")),
    Key("share.acquire.mode", "string", "batch_optimized", one_of("batch_optimized", "record_limit")),
    Key("max.poll.interval.ms", "int", 300000, at_least(1)),
    Key("max.poll.records", "int", 500, at_least(1)),
    Key("fetch.min.bytes", "int", 1, at_least(0)),
    Key("fetch.max.bytes", "int", 52428800, at_least(0)),
    Key("fetch.max.wait.ms", "int", 500, at_least(0)),
    Key("max.partition.fetch.bytes", "int", 1048576, at_least(0)),
    Key("check.crcs", "bool", True),
    Key("client.rack", "string", ""),
    Key("default.api.timeout.ms", "int", 60000, at_least(0)),
)
# Consumer keys a share consumer refuses, as Java's ShareConsumerConfig does.
SHARE_CONSUMER_REFUSED = ("auto.offset.reset", "enable.auto.commit", "group.instance.id", "isolation.level",
                          "partition.assignment.strategy", "interceptor.classes", "session.timeout.ms",
                          "heartbeat.interval.ms", "group.protocol", "group.remote.assignor")

ADMIN_KEYS = keys(*COMMON, Key("default.api.timeout.ms", "int", 60000, at_least(0)))

# Assignor names as Java and librdkafka spell them, to the names used on the wire.
ASSIGNOR_ALIASES = {
    "org.apache.kafka.clients.consumer.RangeAssignor": "range",
    "org.apache.kafka.clients.consumer.RoundRobinAssignor": "roundrobin",
    "org.apache.kafka.clients.consumer.CooperativeStickyAssignor": "cooperative-sticky",
}



class ClientConfig:
    """Parsed client configs. ``config["linger.ms"]`` is the typed value."""

    def __init__(self, known: dict[str, Key], configs: dict[str, Any] | None = None, **kwargs: Any):
        self.originals: dict[str, Any] = dict(configs or {})
        # Python keyword style: linger_ms=5 means linger.ms=5
        self.originals.update({k.replace("_", "."): v for k, v in kwargs.items()})
        self.values: dict[str, Any] = {name: key.default for name, key in known.items()}
        self.unknown: dict[str, Any] = {}
        for name, raw in self.originals.items():
            key = known.get(name)
            if key is None:
                self.unknown[name] = raw
                if name not in SERDE_KEYS:
                    log.warning("The configuration '%s' was supplied but isn't a known config.", name)
            elif key.type == "class":
                self.values[name] = raw
            else:
                self.values[name] = parse_value(key, raw)
        if self.values.get("bootstrap.servers") is None:
            raise ConfigError("Missing required configuration \"bootstrap.servers\" which has no default value.")

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def get(self, name: str, default: Any = None) -> Any:
        return self.values.get(name, default)


def load_plugin(spec: Any, configs: dict[str, Any]) -> Any:
    """An instance from an instance, a class, or a dotted name; ``configure(configs)`` is called if present."""
    if isinstance(spec, str):
        module, _, name = spec.strip().rpartition(".")
        try:
            spec = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError, ValueError) as e:
            raise ConfigError(f"Class {spec} cannot be found: {e}") from None
    instance = spec() if isinstance(spec, type) else spec
    configure = getattr(instance, "configure", None)
    if callable(configure):
        configure(dict(configs))
    return instance


def load_serde(spec: Any, configs: dict[str, Any], *, is_key: bool, method: str) -> Any:
    """``key.serializer`` and the like: a plugin whose ``method`` is called as (topic, data, headers).

    A plugin written to the two-argument contract is adapted (:func:`samsa.serialization.with_headers`).
    """
    instance = load_plugin(spec, {})
    if hasattr(instance, "is_key"):
        instance.is_key = is_key
    configure = getattr(instance, "configure", None)
    if callable(configure):
        configure(dict(configs))
    if not callable(getattr(instance, method, None)):
        kind = "serializer" if method == "serialize" else "deserializer"
        raise ConfigError(f"{'key' if is_key else 'value'}.{kind} {spec!r} has no {method}() method")
    return with_headers(instance, method)


def load_plugins(specs: Any, configs: dict[str, Any]) -> list[Any]:
    """``interceptor.classes``: a comma-separated string or a list of instances/classes/names."""
    if not specs:
        return []
    if isinstance(specs, str):
        specs = [s for s in specs.split(",") if s.strip()]
    return [load_plugin(s, configs) for s in specs]
