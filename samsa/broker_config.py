"""Broker and topic configuration: Kafka's keys, types, defaults and validation.

``server.properties`` is read as Kafka reads it (``key=value`` or ``key: value`` lines,
``#``/``!`` comments, backslash line continuations). Every known key is parsed to its
type and checked; a bad value raises :class:`ConfigError` naming the key, the value and
what was expected. Unknown keys are kept and warned about, as Kafka does.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

from samsa.configdef import (INT_MAX, LONG_MAX, ConfigError, Key, at_least, between, format_value, keys, one_of,  # noqa: F401
                             parse_properties, parse_value)
from samsa.security.ssl_keys import SSL_COMMON_KEYS

log = logging.getLogger(__name__)


def _listeners(v: Any) -> str | None:
    for item in v or []:
        if not re.fullmatch(r"[A-Za-z0-9_]+://(\[[0-9a-fA-F:]+\]|[^:/\s]*):\d+", item):
            return "Listeners must look like PLAINTEXT://host:port"
    return None


def _http_listener(v: Any) -> str | None:
    if v is not None and not re.fullmatch(r"http://(\[[0-9a-fA-F:]+\]|[^:/\s\[\]]*):\d+/?", v):
        return "The Prometheus listener must look like http://host:port (an empty host: every interface)"
    return None


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "GSSAPI")

# Kafka's authorizer classes, accepted by name (all mean Samsa's ACL authorizer).
AUTHORIZER_CLASSES = ("kafka.security.authorizer.AclAuthorizer", "kafka.security.auth.SimpleAclAuthorizer",
                      "org.apache.kafka.metadata.authorizer.StandardAuthorizer", "samsa.security.authorizer.AclAuthorizer")


def _authorizer(v: Any) -> str | None:
    if v and v not in AUTHORIZER_CLASSES:
        return f"Samsa's authorizer answers to {', '.join(AUTHORIZER_CLASSES)}"
    return None


# The keys a listener may override as listener.name.<listener>.<key> (Kafka's per-listener configs).
SSL_KEYS = (
    *SSL_COMMON_KEYS,
    Key("ssl.client.auth", "string", "none", one_of("none", "requested", "required")),
    Key("ssl.principal.mapping.rules", "string", "DEFAULT"),
)


# KIP-392's replica selectors, by Kafka's class names: the leader always, or the client's rack.
LEADER_SELECTOR = "org.apache.kafka.common.replica.LeaderSelector"
RACK_AWARE_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"


def _replica_selector(v: Any) -> str | None:
    if v and v not in (LEADER_SELECTOR, RACK_AWARE_SELECTOR):
        return f"Samsa's replica selectors are {LEADER_SELECTOR} and {RACK_AWARE_SELECTOR}"
    return None


def _process_roles(v: Any) -> str | None:
    for role in v or []:
        if role not in ("broker", "controller"):
            return f"Unknown process role '{role}' (only 'broker' and 'controller' are allowed roles)"
    if len(set(v or [])) != len(v or []):
        return f"Duplicate role names found in `process.roles`: {v}"
    return None


def _host_port(item: str) -> bool:
    return re.fullmatch(r"(\[[0-9a-fA-F:]+\]|[^:@\s\[\]]+):\d+", item) is not None


def _quorum_voters(v: Any) -> str | None:
    for item in v or []:
        node, sep, address = item.partition("@")
        if not sep or not node.isdigit() or not _host_port(address):
            return f"Unable to parse voter {item}: a voter is node-id@host:port"
    return None


def _bootstrap_servers(v: Any) -> str | None:
    for item in v or []:
        if not _host_port(item):
            return f"Invalid url in controller.quorum.bootstrap.servers: {item}"
    return None


# Kafka's ranges of compression levels (gzip's -1: the library's default).
GZIP_LEVEL, LZ4_LEVEL, ZSTD_LEVEL = between(1, 9, also=-1), between(1, 17), between(-131072, 22)

BROKER_KEYS = keys(
    *SSL_KEYS,
    Key("sasl.jaas.config", "password", None),
    Key("sasl.server.max.receive.size", "int", 524288, at_least(1)),
    Key("connections.max.reauth.ms", "long", 0, at_least(0)),
    Key("connection.failed.authentication.delay.ms", "int", 100, at_least(0)),
    Key("authorizer.class.name", "string", "", _authorizer),
    Key("super.users", "string", ""),
    Key("allow.everyone.if.no.acl.found", "bool", False),
    Key("quota.window.num", "int", 11, at_least(1)),
    Key("quota.window.size.seconds", "int", 1, at_least(1)),
    Key("controller.quota.window.num", "int", 11, at_least(1)),
    Key("controller.quota.window.size.seconds", "int", 1, at_least(1)),
    Key("broker.id", "int", -1, at_least(-1)),
    Key("node.id", "int", -1),
    Key("broker.rack", "string", None),
    Key("listeners", "list", ["PLAINTEXT://:9092"], _listeners),
    Key("advertised.listeners", "list", None, _listeners),
    Key("listener.security.protocol.map", "list",
        ["PLAINTEXT:PLAINTEXT", "SSL:SSL", "SASL_PLAINTEXT:SASL_PLAINTEXT", "SASL_SSL:SASL_SSL"]),
    Key("inter.broker.listener.name", "string", None),
    Key("security.inter.broker.protocol", "string", "PLAINTEXT", one_of(*SECURITY_PROTOCOLS)),
    Key("port", "int", None),
    Key("host.name", "string", None),
    Key("log.dirs", "list", None),
    Key("log.dir", "list", ["/tmp/kafka-logs"]),
    # Where a broker without ZooKeeper keeps its metadata file (Kafka's KRaft metadata log dir);
    # unset, the first of log.dirs, as in Kafka.
    Key("metadata.log.dir", "string", None),
    # KRaft (Kafka 4): empty process.roles is Samsa's ZooKeeper or single-broker mode; see samsa/kraft_config.py.
    Key("process.roles", "list", [], _process_roles),
    Key("controller.quorum.voters", "list", [], _quorum_voters),
    Key("controller.quorum.bootstrap.servers", "list", [], _bootstrap_servers),
    Key("controller.listener.names", "list", []),
    Key("controller.quorum.election.timeout.ms", "int", 1000, at_least(0)),
    Key("controller.quorum.fetch.timeout.ms", "int", 2000, at_least(0)),
    Key("controller.quorum.election.backoff.max.ms", "int", 1000, at_least(0)),
    Key("controller.quorum.request.timeout.ms", "int", 2000, at_least(0)),
    Key("controller.quorum.retry.backoff.ms", "int", 20, at_least(0)),
    Key("controller.quorum.append.linger.ms", "int", 25, at_least(0)),
    Key("controller.quorum.fetch.snapshot.max.bytes", "int", 1048576, at_least(1)),
    Key("controller.quorum.fetch.max.bytes", "int", 1048576, at_least(1)),
    Key("controller.quorum.auto.join.enable", "bool", False),
    Key("metadata.log.segment.bytes", "int", 1073741824, at_least(8388608)),
    Key("metadata.log.segment.ms", "long", 604800000),
    Key("metadata.max.retention.bytes", "long", 104857600),
    Key("metadata.max.retention.ms", "long", 604800000),
    Key("metadata.log.max.record.bytes.between.snapshots", "long", 20971520, at_least(1)),
    Key("metadata.log.max.snapshot.interval.ms", "long", 3600000, at_least(0)),
    Key("metadata.max.idle.interval.ms", "int", 500, at_least(0)),
    Key("broker.heartbeat.interval.ms", "int", 2000),
    Key("broker.session.timeout.ms", "int", 9000),
    Key("initial.broker.registration.timeout.ms", "int", 60000),
    Key("num.partitions", "int", 1, at_least(1)),
    Key("default.replication.factor", "int", 1, at_least(1)),
    Key("auto.create.topics.enable", "bool", True),
    Key("delete.topic.enable", "bool", True),
    Key("num.network.threads", "int", 3, at_least(1), dynamic=True),
    Key("num.io.threads", "int", 8, at_least(1), dynamic=True),
    Key("background.threads", "int", 10, at_least(1), dynamic=True),
    Key("queued.max.requests", "int", 500, at_least(1)),
    Key("queued.max.request.bytes", "long", -1),
    Key("socket.send.buffer.bytes", "int", 262144),  # Kafka: 102400 (GAPS.md, BENCHMARKS.md issue 33)
    Key("socket.receive.buffer.bytes", "int", 102400),
    Key("socket.request.max.bytes", "int", 104857600, at_least(1)),
    Key("max.request.partition.size.limit", "int", 2000, at_least(1)),  # DescribeTopicPartitions (KIP-966)
    Key("connections.max.idle.ms", "long", 600000),
    Key("num.recovery.threads.per.data.dir", "int", 2, at_least(1), dynamic=True),
    Key("log.segment.bytes", "int", 1073741824, at_least(1048576), dynamic=True),
    Key("log.roll.ms", "long", None, at_least(1), dynamic=True),
    Key("log.roll.hours", "int", 168, at_least(1)),
    Key("log.retention.ms", "long", None, dynamic=True),
    Key("log.retention.minutes", "int", None),
    Key("log.retention.hours", "int", 168),
    Key("log.retention.bytes", "long", -1, dynamic=True),
    Key("log.retention.check.interval.ms", "long", 300000, at_least(1)),
    Key("log.segment.delete.delay.ms", "long", 60000, at_least(0), dynamic=True),
    Key("log.flush.interval.messages", "long", LONG_MAX, at_least(1), dynamic=True),
    Key("log.flush.interval.ms", "long", None, dynamic=True),
    Key("log.flush.scheduler.interval.ms", "long", LONG_MAX),
    Key("log.flush.offset.checkpoint.interval.ms", "int", 60000, at_least(0)),
    Key("log.flush.start.offset.checkpoint.interval.ms", "int", 60000, at_least(0)),
    Key("log.index.interval.bytes", "int", 4096, at_least(0), dynamic=True),
    Key("log.index.size.max.bytes", "int", 10485760, at_least(4), dynamic=True),
    Key("log.preallocate", "bool", False, dynamic=True),
    Key("log.cleanup.policy", "list", ["delete"], one_of("compact", "delete"), dynamic=True),
    Key("log.cleaner.enable", "bool", True),
    Key("log.cleaner.threads", "int", 1, at_least(0), dynamic=True),
    Key("log.cleaner.backoff.ms", "long", 15000, at_least(0), dynamic=True),
    Key("log.cleaner.delete.retention.ms", "long", 86400000, at_least(0), dynamic=True),
    Key("log.cleaner.min.cleanable.ratio", "double", 0.5, between(0, 1), dynamic=True),
    Key("log.cleaner.min.compaction.lag.ms", "long", 0, at_least(0), dynamic=True),
    Key("log.cleaner.max.compaction.lag.ms", "long", LONG_MAX, at_least(1), dynamic=True),
    Key("log.message.timestamp.type", "string", "CreateTime", one_of("CreateTime", "LogAppendTime"), dynamic=True),
    Key("log.message.timestamp.difference.max.ms", "long", LONG_MAX, at_least(0), dynamic=True),
    Key("log.message.timestamp.before.max.ms", "long", LONG_MAX, at_least(0), dynamic=True),
    Key("log.message.timestamp.after.max.ms", "long", 3600000, at_least(0), dynamic=True),
    Key("log.message.format.version", "string", "3.0-IV1"),
    Key("message.max.bytes", "int", 1048588, at_least(0), dynamic=True),
    Key("compression.type", "string", "producer",
        one_of("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"), dynamic=True),
    Key("min.insync.replicas", "int", 1, at_least(1), dynamic=True),
    Key("unclean.leader.election.enable", "bool", False, dynamic=True),
    Key("auto.leader.rebalance.enable", "bool", True),
    Key("leader.imbalance.check.interval.seconds", "long", 300, at_least(1)),
    Key("leader.imbalance.per.broker.percentage", "int", 10),
    Key("controlled.shutdown.enable", "bool", True),
    Key("controlled.shutdown.max.retries", "int", 3),
    Key("controlled.shutdown.retry.backoff.ms", "long", 5000),
    Key("replica.lag.time.max.ms", "long", 30000, at_least(1)),
    Key("replica.fetch.max.bytes", "int", 1048576, at_least(0)),
    Key("replica.fetch.response.max.bytes", "int", 10485760, at_least(0)),
    Key("replica.fetch.wait.max.ms", "int", 500),
    Key("replica.selector.class", "string", None, _replica_selector),
    Key("max.incremental.fetch.session.cache.slots", "int", 1000, at_least(0)),
    Key("min.incremental.fetch.session.eviction.ms", "int", 120000, at_least(0)),
    Key("replica.fetch.min.bytes", "int", 1),
    Key("replica.fetch.backoff.ms", "int", 1000, at_least(0)),
    Key("replica.socket.timeout.ms", "int", 30000),
    Key("replica.high.watermark.checkpoint.interval.ms", "long", 5000),
    Key("num.replica.fetchers", "int", 1, at_least(1), dynamic=True),
    Key("offsets.topic.replication.factor", "int", 3, at_least(1)),
    Key("offsets.topic.num.partitions", "int", 50, at_least(1)),
    Key("offsets.topic.segment.bytes", "int", 104857600, at_least(1)),
    Key("offsets.retention.minutes", "int", 10080, at_least(1)),
    Key("offsets.retention.check.interval.ms", "long", 600000, at_least(1)),
    Key("offsets.commit.timeout.ms", "int", 5000, at_least(1)),
    Key("offset.metadata.max.bytes", "int", 4096),
    Key("offsets.load.buffer.size", "int", 5242880, at_least(1)),
    Key("transaction.state.log.replication.factor", "int", 3, at_least(1)),
    Key("transaction.state.log.min.isr", "int", 2, at_least(1)),
    Key("transaction.state.log.num.partitions", "int", 50, at_least(1)),
    Key("transactional.id.expiration.ms", "int", 604800000, at_least(1)),
    Key("transaction.max.timeout.ms", "int", 900000, at_least(1)),
    Key("transaction.state.log.segment.bytes", "int", 104857600, at_least(1)),
    Key("transaction.abort.timed.out.transaction.cleanup.interval.ms", "int", 10000, at_least(1)),
    Key("transaction.remove.expired.transaction.cleanup.interval.ms", "int", 3600000, at_least(1)),
    # KIP-890 part 1: a leader asks the coordinator whether a transactional batch's partition is in
    # the transaction before it appends the first batch of one (Produce below v12).
    Key("transaction.partition.verification.enable", "bool", True, dynamic=True),
    Key("producer.id.expiration.ms", "int", 86400000, at_least(1), dynamic=True),
    Key("group.initial.rebalance.delay.ms", "int", 3000, at_least(0)),
    Key("group.min.session.timeout.ms", "int", 6000),
    Key("group.max.session.timeout.ms", "int", 1800000),
    Key("group.max.size", "int", INT_MAX, at_least(1)),
    # The consumer group protocol (KIP-848): the coordinator's keys, Kafka's names and defaults.
    Key("group.coordinator.rebalance.protocols", "list", ["classic", "consumer"]),
    Key("group.consumer.session.timeout.ms", "int", 45000, at_least(1)),
    Key("group.consumer.min.session.timeout.ms", "int", 45000, at_least(1)),
    Key("group.consumer.max.session.timeout.ms", "int", 60000, at_least(1)),
    Key("group.consumer.heartbeat.interval.ms", "int", 5000, at_least(1)),
    Key("group.consumer.min.heartbeat.interval.ms", "int", 5000, at_least(1)),
    Key("group.consumer.max.heartbeat.interval.ms", "int", 15000, at_least(1)),
    Key("group.consumer.max.size", "int", INT_MAX, at_least(1)),
    Key("group.consumer.assignors", "list", ["uniform", "range"]),
    Key("group.consumer.migration.policy", "string", "bidirectional",
        one_of("disabled", "upgrade", "downgrade", "bidirectional")),
    # Share groups (KIP-932): the group coordinator's keys for their membership, the share
    # partitions' keys, and the share coordinator's (``__share_group_state``); Kafka 4.4's defaults.
    Key("group.share.session.timeout.ms", "int", 45000, at_least(1)),
    Key("group.share.min.session.timeout.ms", "int", 45000, at_least(1)),
    Key("group.share.max.session.timeout.ms", "int", 60000, at_least(1)),
    Key("group.share.heartbeat.interval.ms", "int", 5000, at_least(1)),
    Key("group.share.min.heartbeat.interval.ms", "int", 5000, at_least(1)),
    Key("group.share.max.heartbeat.interval.ms", "int", 15000, at_least(1)),
    Key("group.share.max.size", "int", 200, at_least(1)),
    Key("group.share.assignors", "list", ["org.apache.kafka.coordinator.group.assignor.SimpleAssignor"]),
    Key("group.share.record.lock.duration.ms", "int", 30000, at_least(1)),
    Key("group.share.min.record.lock.duration.ms", "int", 15000, at_least(1)),
    Key("group.share.max.record.lock.duration.ms", "int", 60000, at_least(1)),
    Key("group.share.delivery.count.limit", "int", 5, at_least(1)),
    Key("group.share.min.delivery.count.limit", "int", 2, at_least(1)),
    Key("group.share.max.delivery.count.limit", "int", 10, at_least(1)),
    Key("group.share.partition.max.record.locks", "int", 2000, at_least(1)),
    Key("group.share.min.partition.max.record.locks", "int", 100, at_least(1)),
    Key("group.share.max.partition.max.record.locks", "int", 4000, at_least(1)),
    # Streams groups (KIP-1071): the group coordinator's keys, Kafka 4.4's names and defaults.
    Key("group.streams.session.timeout.ms", "int", 45000, at_least(1)),
    Key("group.streams.min.session.timeout.ms", "int", 45000, at_least(1)),
    Key("group.streams.max.session.timeout.ms", "int", 60000, at_least(1)),
    Key("group.streams.heartbeat.interval.ms", "int", 5000, at_least(1)),
    Key("group.streams.min.heartbeat.interval.ms", "int", 5000, at_least(1)),
    Key("group.streams.max.heartbeat.interval.ms", "int", 15000, at_least(1)),
    Key("group.streams.max.size", "int", INT_MAX, at_least(1)),
    Key("group.streams.num.standby.replicas", "int", 0, at_least(0)),
    Key("group.streams.max.standby.replicas", "int", 2, at_least(0)),
    Key("group.streams.initial.rebalance.delay.ms", "int", 3000, at_least(0)),
    Key("group.streams.assignment.interval.ms", "int", 1000, at_least(0)),
    Key("group.streams.min.assignment.interval.ms", "int", 0, at_least(0)),
    Key("group.streams.max.assignment.interval.ms", "int", 15000, at_least(0)),
    Key("group.streams.assignors", "list", ["sticky"]),
    Key("share.coordinator.state.topic.num.partitions", "int", 50, at_least(1)),
    Key("share.coordinator.state.topic.replication.factor", "int", 3, at_least(1)),
    Key("share.coordinator.state.topic.min.isr", "int", 2, at_least(1)),
    Key("share.coordinator.state.topic.segment.bytes", "int", 104857600, at_least(1)),
    Key("share.coordinator.snapshot.update.records.per.snapshot", "int", 500, at_least(0)),
    Key("share.coordinator.write.timeout.ms", "int", 5000, at_least(1)),
    # Share partitions on their leaders (samsa/server/share): the share sessions a broker keeps.
    Key("group.share.max.share.sessions", "int", 2000, at_least(1)),
    Key("zookeeper.connect", "string", None),
    Key("zookeeper.connection.timeout.ms", "int", None),
    Key("zookeeper.session.timeout.ms", "int", 18000),
    Key("zookeeper.set.acl", "bool", False),
    Key("zookeeper.max.in.flight.requests", "int", 10, at_least(1)),
    Key("cluster.id", "string", None),
    Key("metric.reporters", "list", [], dynamic=True),
    # Samsa's own: where /metrics is served for Prometheus (off unless set), e.g. http://:9404.
    Key("prometheus.listener", "string", None, _http_listener),
    # Accepted (and dynamic where Kafka 3.9 has them dynamic) with no effect yet: GAPS.md says which.
    Key("compression.gzip.level", "int", -1, GZIP_LEVEL, dynamic=True),
    Key("compression.lz4.level", "int", 9, LZ4_LEVEL, dynamic=True),
    Key("compression.zstd.level", "int", 3, ZSTD_LEVEL, dynamic=True),
    Key("log.local.retention.ms", "long", -2, dynamic=True),
    Key("log.local.retention.bytes", "long", -2, dynamic=True),
    Key("log.remote.copy.lag.bytes", "long", -1, dynamic=True),
    Key("log.remote.copy.lag.ms", "long", 0, dynamic=True),
    Key("max.decompressed.message.bytes", "int", 2147483639, at_least(0), dynamic=True),
    Key("fetch.max.bytes", "int", 57671680, at_least(1024)),
    Key("log.message.downconversion.enable", "bool", True, dynamic=True),
    Key("log.cleaner.dedupe.buffer.size", "long", 134217728, dynamic=True),
    Key("log.cleaner.io.buffer.size", "int", 524288, at_least(0), dynamic=True),
    Key("log.cleaner.io.buffer.load.factor", "double", 0.9, dynamic=True),
    Key("log.cleaner.io.max.bytes.per.second", "double", 1.7976931348623157e308, dynamic=True),
    Key("max.connections", "int", INT_MAX, at_least(0), dynamic=True),
    Key("max.connections.per.ip", "int", INT_MAX, at_least(0), dynamic=True),
    Key("max.connections.per.ip.overrides", "string", "", dynamic=True),
    Key("max.connection.creation.rate", "int", INT_MAX, at_least(0), dynamic=True),
    Key("sasl.mechanism.inter.broker.protocol", "string", "GSSAPI", dynamic=True),
    Key("sasl.enabled.mechanisms", "list", ["GSSAPI"], dynamic=True),
    Key("sasl.kerberos.service.name", "string", None, dynamic=True),
    Key("sasl.kerberos.kinit.cmd", "string", "/usr/bin/kinit", dynamic=True),
    Key("sasl.kerberos.ticket.renew.window.factor", "double", 0.8, dynamic=True),
    Key("sasl.kerberos.ticket.renew.jitter", "double", 0.05, dynamic=True),
    Key("sasl.kerberos.min.time.before.relogin", "long", 60000, dynamic=True),
    Key("sasl.kerberos.principal.to.local.rules", "list", ["DEFAULT"], dynamic=True),
    Key("sasl.login.refresh.window.factor", "double", 0.8, dynamic=True),
    Key("sasl.login.refresh.window.jitter", "double", 0.05, dynamic=True),
    Key("sasl.login.refresh.min.period.seconds", "int", 60, dynamic=True),
    Key("sasl.login.refresh.buffer.seconds", "int", 300, dynamic=True),
)


# Broker keys whose value may come from another, coarser key, most specific first.
BROKER_SYNONYMS: dict[str, tuple[str, ...]] = {
    "log.retention.ms": ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    "log.roll.ms": ("log.roll.ms", "log.roll.hours"),
    "log.flush.interval.ms": ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
    "log.dirs": ("log.dirs", "log.dir"),
}


def _no_tiered_storage(v: Any) -> str | None:
    return ("Tiered Storage functionality is disabled in the broker. Topic cannot be configured with "
            "remote log storage.") if v else None


# Topic-level configs: name -> (broker key that supplies the default, type).
# Topic keys accepted but never described: Kafka 4's internal.segment.bytes, and three keys
# Kafka 4 removed (and refuses) that Samsa still accepts for older clients and their tests
# (librdkafka's 0092 sets message.format.version); GAPS.md says so.
HIDDEN_TOPIC_KEYS = frozenset({"internal.segment.bytes", "message.format.version", "message.downconversion.enable",
                               "message.timestamp.difference.max.ms"})

TOPIC_KEYS: dict[str, tuple[str | None, Key]] = {
    "cleanup.policy": ("log.cleanup.policy", Key("cleanup.policy", "list", ["delete"], one_of("compact", "delete"))),
    "compression.type": ("compression.type", Key("compression.type", "string", "producer",
                         one_of("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"))),
    "delete.retention.ms": ("log.cleaner.delete.retention.ms", Key("delete.retention.ms", "long", 86400000, at_least(0))),
    "file.delete.delay.ms": ("log.segment.delete.delay.ms", Key("file.delete.delay.ms", "long", 60000, at_least(0))),
    "flush.messages": ("log.flush.interval.messages", Key("flush.messages", "long", LONG_MAX, at_least(1))),
    "flush.ms": ("log.flush.interval.ms", Key("flush.ms", "long", LONG_MAX, at_least(0))),
    "index.interval.bytes": ("log.index.interval.bytes", Key("index.interval.bytes", "int", 4096, at_least(0))),
    "max.compaction.lag.ms": ("log.cleaner.max.compaction.lag.ms", Key("max.compaction.lag.ms", "long", LONG_MAX, at_least(1))),
    "max.message.bytes": ("message.max.bytes", Key("max.message.bytes", "int", 1048588, at_least(0))),
    "message.timestamp.type": ("log.message.timestamp.type", Key("message.timestamp.type", "string", "CreateTime",
                               one_of("CreateTime", "LogAppendTime"))),
    "message.timestamp.difference.max.ms": ("log.message.timestamp.difference.max.ms",
                                            Key("message.timestamp.difference.max.ms", "long", LONG_MAX, at_least(0))),
    "message.timestamp.before.max.ms": ("log.message.timestamp.before.max.ms",
                                        Key("message.timestamp.before.max.ms", "long", LONG_MAX, at_least(0))),
    "message.timestamp.after.max.ms": ("log.message.timestamp.after.max.ms",
                                       Key("message.timestamp.after.max.ms", "long", 3600000, at_least(0))),
    "min.cleanable.dirty.ratio": ("log.cleaner.min.cleanable.ratio", Key("min.cleanable.dirty.ratio", "double", 0.5, between(0, 1))),
    "min.compaction.lag.ms": ("log.cleaner.min.compaction.lag.ms", Key("min.compaction.lag.ms", "long", 0, at_least(0))),
    "min.insync.replicas": ("min.insync.replicas", Key("min.insync.replicas", "int", 1, at_least(1))),
    "preallocate": ("log.preallocate", Key("preallocate", "bool", False)),
    "retention.bytes": ("log.retention.bytes", Key("retention.bytes", "long", -1)),
    "retention.ms": ("log.retention.ms", Key("retention.ms", "long", 604800000, at_least(-1))),
    "segment.bytes": ("log.segment.bytes", Key("segment.bytes", "int", 1073741824, at_least(1048576))),
    # Kafka 4's internal key (not described, no minimum): segment.bytes below 1 MiB, for tests.
    "internal.segment.bytes": (None, Key("internal.segment.bytes", "int", None, at_least(0))),
    "segment.index.bytes": ("log.index.size.max.bytes", Key("segment.index.bytes", "int", 10485760, at_least(4))),
    "segment.jitter.ms": (None, Key("segment.jitter.ms", "long", 0, at_least(0))),
    "segment.ms": ("log.roll.ms", Key("segment.ms", "long", 604800000, at_least(1))),
    "unclean.leader.election.enable": ("unclean.leader.election.enable",
                                       Key("unclean.leader.election.enable", "bool", False)),
    "message.downconversion.enable": ("log.message.downconversion.enable",
                                      Key("message.downconversion.enable", "bool", True)),
    # Accepted with no effect yet (GAPS.md): compression levels, throttled replicas, tiered storage.
    "message.format.version": ("log.message.format.version",  # deprecated in Kafka 3.x, ignored there too
                               Key("message.format.version", "string", "3.0-IV1")),
    "compression.gzip.level": ("compression.gzip.level", Key("compression.gzip.level", "int", -1, GZIP_LEVEL)),
    "compression.lz4.level": ("compression.lz4.level", Key("compression.lz4.level", "int", 9, LZ4_LEVEL)),
    "compression.zstd.level": ("compression.zstd.level", Key("compression.zstd.level", "int", 3, ZSTD_LEVEL)),
    "leader.replication.throttled.replicas": (None, Key("leader.replication.throttled.replicas", "list", [])),
    "follower.replication.throttled.replicas": (None, Key("follower.replication.throttled.replicas", "list", [])),
    "local.retention.ms": ("log.local.retention.ms", Key("local.retention.ms", "long", -2)),
    "local.retention.bytes": ("log.local.retention.bytes", Key("local.retention.bytes", "long", -2)),
    "remote.storage.enable": (None, Key("remote.storage.enable", "bool", False, _no_tiered_storage)),
    "remote.log.copy.disable": (None, Key("remote.log.copy.disable", "bool", False)),
    "remote.log.delete.on.disable": (None, Key("remote.log.delete.on.disable", "bool", False)),
    "remote.copy.lag.bytes": ("log.remote.copy.lag.bytes", Key("remote.copy.lag.bytes", "long", -1)),
    "remote.copy.lag.ms": ("log.remote.copy.lag.ms", Key("remote.copy.lag.ms", "long", 0)),
    "max.decompressed.message.bytes": ("max.decompressed.message.bytes",
                                       Key("max.decompressed.message.bytes", "int", 2147483639, at_least(0))),
    "errors.deadletterqueue.group.enable": (None, Key("errors.deadletterqueue.group.enable", "bool", False)),
}


class BrokerConfig:
    """A broker's configuration: typed values by Kafka key, with derived settings."""

    def __init__(self, props: dict[str, Any] | None = None, *, warn_unknown: bool = True):
        self.originals: dict[str, Any] = dict(props or {})
        self.static: dict[str, Any] = dict(self.originals)  # as given at start, before dynamic changes
        self.values: dict[str, Any] = {}
        # listener.name.<listener>.<key>: a listener's own values (read by listener_value and jaas_config).
        self.listener_overrides: dict[str, Any] = {}
        self.unknown: dict[str, Any] = {}  # keys Samsa does not know (warned about at start)
        for name, key in BROKER_KEYS.items():
            self.values[name] = key.default
        for name, raw in self.originals.items():
            key = BROKER_KEYS.get(name)
            if key is None and name.startswith("listener.name."):
                self.listener_overrides[name] = raw
                continue
            if key is None:
                self.unknown[name] = raw
                if warn_unknown:
                    log.warning("The configuration '%s' was supplied but isn't a known config.", name)
                continue
            self.values[name] = parse_value(key, raw)
        self._check()

    @classmethod
    def from_file(cls, path: str | Path, overrides: dict[str, str] | None = None) -> "BrokerConfig":
        try:
            text = Path(path).read_text()
        except OSError as e:
            raise ConfigError(f"cannot read {path}: {e.strerror}") from None
        props = parse_properties(text)
        props.update(overrides or {})
        return cls(props)

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def get(self, name: str, default: Any = None) -> Any:
        return self.values.get(name, default)

    def apply_dynamic(self, cluster_default: dict[str, str], per_broker: dict[str, str]) -> None:
        """Recompute values from their layers: default < server.properties < cluster-wide
        dynamic default < this broker's dynamic config (as AlterConfigs stores them)."""
        layers = {**self.static, **cluster_default, **per_broker}
        for name, key in BROKER_KEYS.items():
            self.values[name] = parse_value(key, layers[name]) if name in layers else key.default
        self.originals = {k: v for k, v in layers.items() if k in BROKER_KEYS or k in self.unknown
                          or k in self.listener_overrides}

    def _check(self) -> None:
        if not self.log_dirs:
            raise ConfigError("log.dirs must name at least one directory")
        self._check_kraft()
        names = [parse_listener(x)[0] for x in self.listeners]
        if len(set(names)) != len(names):
            raise ConfigError("Invalid value for configuration listeners: each listener must have a different name")
        delay, idle = self.values["connection.failed.authentication.delay.ms"], self.values["connections.max.idle.ms"]
        if delay >= idle:  # as Kafka checks it
            raise ConfigError(f"connection.failed.authentication.delay.ms={delay} should always be less than "
                              f"connections.max.idle.ms={idle} to prevent failed authentication responses from "
                              "timing out")
        protocols = dict(item.split(":", 1) for item in self.values["listener.security.protocol.map"] if ":" in item)
        for name in names:
            protocol = protocols.get(name)
            if protocol is None and name in self.values["controller.listener.names"]:
                continue  # a KRaft controller listener not in the map is PLAINTEXT, as Kafka maps it
            if protocol is None:
                raise ConfigError(f"No security protocol defined for listener {name} "
                                  "(listener.security.protocol.map)")
            if protocol.upper() not in SECURITY_PROTOCOLS:
                raise ConfigError(f"Listener {name} maps to unknown security protocol {protocol} "
                                  f"(one of {', '.join(SECURITY_PROTOCOLS)})")
        inter = self.inter_broker_listener
        if inter not in names and "broker" in self.roles:
            raise ConfigError(f"inter.broker.listener.name must be a listener name defined in listeners; "
                              f"{inter} is not one of {', '.join(names)}")
        advertised = [parse_listener(x)[0] for x in self.advertised_listeners]
        if "advertised.listeners" in self.originals:
            for name in advertised:
                if name not in names:
                    raise ConfigError(f"advertised.listeners listener {name} is not in listeners")

    @property
    def roles(self) -> list[str]:
        """process.roles; without it Samsa's ZooKeeper or single-broker mode acts as a broker."""
        return self.values["process.roles"] or ["broker"]

    def _check_kraft(self) -> None:
        """Kafka 4's checks of a KRaft configuration (KafkaConfig's validateValues), in its words."""
        roles = self.values["process.roles"]
        if not roles:
            return
        if self.values["zookeeper.connect"]:
            raise ConfigError("zookeeper.connect and process.roles cannot both be set: a node runs in ZooKeeper "
                              "mode or in KRaft mode, not both")
        if "node.id" not in self.originals:
            raise ConfigError('Missing required configuration "node.id" which has no default value.')
        if not self.values["controller.listener.names"]:
            raise ConfigError('Missing required configuration "controller.listener.names" which has no default value.')
        voters = self.values["controller.quorum.voters"]
        if not voters and not self.values["controller.quorum.bootstrap.servers"]:
            raise ConfigError("If using process.roles, either controller.quorum.bootstrap.servers must contain the "
                              "set of bootstrap controllers or controller.quorum.voters must contain a parseable "
                              "set of controllers.")
        node = self.values["node.id"]
        if node < 0:
            raise ConfigError(f"Invalid value {node} for configuration node.id: Value must be at least 0")
        ids = [int(v.split("@", 1)[0]) for v in voters]
        if "controller" in roles and voters and node not in ids:
            raise ConfigError(f"requirement failed: If process.roles contains the 'controller' role, the node id "
                              f"{node} must be included in the set of voters controller.quorum.voters="
                              f"Set({', '.join(map(str, dict.fromkeys(ids)))})")
        listener_names = [parse_listener(x)[0] for x in self.listeners]
        controllers = self.values["controller.listener.names"]
        if "controller" in roles and not any(n in listener_names for n in controllers):
            raise ConfigError(f"requirement failed: The listeners config must contain a listener with the name "
                              f"from controller.listener.names ({','.join(controllers)}) when process.roles contains "
                              "the controller role")
        if roles == ["broker"] and any(n in listener_names for n in controllers):
            raise ConfigError(f"requirement failed: The listeners config must not contain KRaft controller listeners "
                              f"from controller.listener.names when process.roles contains just the 'broker' role "
                              "(Kafka: the controller listener belongs to the controllers)")

    # ---- listeners and their security

    def security_protocol(self, listener: str) -> str:
        """The security protocol of a listener name (listener.security.protocol.map)."""
        protocols = dict(item.split(":", 1) for item in self.values["listener.security.protocol.map"] if ":" in item)
        if listener.upper() not in protocols and listener in self.values["controller.listener.names"]:
            return "PLAINTEXT"
        return protocols.get(listener.upper(), listener.upper()).upper()

    @property
    def inter_broker_listener(self) -> str:
        """inter.broker.listener.name, else the first listener of security.inter.broker.protocol."""
        name = self.values["inter.broker.listener.name"]
        if name:
            return name.upper()
        names = [parse_listener(x)[0] for x in self.listeners]
        wanted = self.values["security.inter.broker.protocol"]
        for n in names:
            if n in self.values["controller.listener.names"]:
                continue  # a KRaft controller listener never carries the brokers' traffic
            if self.security_protocol(n) == wanted:
                return n
        return wanted if "security.inter.broker.protocol" in self.originals else (names[0] if names else wanted)

    def jaas_config(self, listener: str, mechanism: str) -> str | None:
        """The JAAS line of ``mechanism`` on ``listener``: ``listener.name.<l>.<mechanism>.sasl.jaas.config``,
        then ``<mechanism>.sasl.jaas.config``, then the listener's ``sasl.jaas.config``."""
        mech = mechanism.lower()
        return (self.listener_overrides.get(f"listener.name.{listener.lower()}.{mech}.sasl.jaas.config")
                or self.unknown.get(f"{mech}.sasl.jaas.config") or self.listener_value(listener, "sasl.jaas.config"))

    def listener_value(self, listener: str, name: str) -> Any:
        """A key as one listener sees it: ``listener.name.<listener>.<key>`` before ``<key>``."""
        raw = self.listener_overrides.get(f"listener.name.{listener.lower()}.{name}")
        if raw is None:
            return self.values.get(name, self.unknown.get(name))
        key = BROKER_KEYS.get(name)
        return parse_value(key, raw) if key is not None else raw

    # ---- derived settings, as Kafka computes them

    @property
    def broker_id(self) -> int:
        bid = self.values["broker.id"]
        return bid if bid >= 0 else max(self.values["node.id"], 0)

    @property
    def log_dirs(self) -> list[str]:
        return self.values["log.dirs"] or self.values["log.dir"]

    @property
    def listeners(self) -> list[str]:
        if "listeners" not in self.originals and self.values["port"] is not None:
            return [f"PLAINTEXT://{self.values['host.name'] or ''}:{self.values['port']}"]
        return self.values["listeners"]

    @property
    def advertised_listeners(self) -> list[str]:
        return self.values["advertised.listeners"] or self.listeners

    @property
    def retention_ms(self) -> int:
        v = self.values
        if v["log.retention.ms"] is not None:
            return v["log.retention.ms"]
        if v["log.retention.minutes"] is not None:
            return v["log.retention.minutes"] * 60_000
        return v["log.retention.hours"] * 3_600_000

    @property
    def roll_ms(self) -> int:
        v = self.values
        return v["log.roll.ms"] if v["log.roll.ms"] is not None else v["log.roll.hours"] * 3_600_000

    @property
    def flush_ms(self) -> int:
        v = self.values
        ms = v["log.flush.interval.ms"]
        return ms if ms is not None else v["log.flush.scheduler.interval.ms"]

    def topic_default(self, topic_key: str) -> Any:
        """The broker-wide default of a topic config (its synonym's value)."""
        synonym, key = TOPIC_KEYS[topic_key]
        if topic_key == "retention.ms":
            return self.retention_ms
        if topic_key == "segment.ms":
            return self.roll_ms
        if topic_key == "flush.ms":
            return self.flush_ms
        if synonym is None:
            return key.default
        value = self.values[synonym]
        return key.default if value is None else value


def parse_listener(listener: str) -> tuple[str, str, int]:
    """'PLAINTEXT://host:9092' -> ('PLAINTEXT', 'host', 9092); empty host = all interfaces."""
    m = re.fullmatch(r"([A-Za-z0-9_]+)://(\[[0-9a-fA-F:]+\]|[^:/\s]*):(\d+)", listener.strip())
    if not m:
        raise ConfigError(f"Invalid listener {listener!r}: expected NAME://host:port")
    return m.group(1).upper(), m.group(2).strip("[]"), int(m.group(3))


def segment_bytes_config(size: int) -> dict[str, str]:
    """The topic config giving segments of ``size`` bytes: segment.bytes, or below its 1 MiB
    minimum Kafka 4's internal.segment.bytes (an internal topic sized by a broker key)."""
    return {"segment.bytes" if size >= 1048576 else "internal.segment.bytes": str(size)}


def stored_topic_config(name: str, raw: Any) -> Any:
    """A topic override as stored: parsed to its type, but a value a newer rule refuses (segment.bytes
    below Kafka 4's 1 MiB, written by an older Samsa) is kept, not an error at start-up."""
    try:
        return parse_topic_config(name, raw)
    except ConfigError:
        key = TOPIC_KEYS[name][1]
        return parse_value(Key(key.name, key.type, key.default), raw)


def parse_topic_config(name: str, raw: Any) -> Any:
    """Validate one topic config value; ConfigError for an unknown key or a bad value."""
    entry = TOPIC_KEYS.get(name)
    if entry is None:
        raise ConfigError(f"Unknown topic config name: {name}")
    return parse_value(entry[1], raw)
