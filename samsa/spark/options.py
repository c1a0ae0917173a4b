"""The options of Spark's built-in Kafka source and sink, parsed and checked as Spark checks them.

Spark hands a data source its options with lower-cased keys; the error messages are the
ones Spark's Kafka source gives, so a job ported from ``format("kafka")`` fails the same way.
Nothing here imports pyspark: the option rules are plain Python.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from samsa.client.config import ADMIN_KEYS, CONSUMER_KEYS, PRODUCER_KEYS
from samsa.security.client import client_security, properties_getter

EARLIEST, LATEST = -2, -1
STRATEGIES = ("subscribe", "subscribepattern", "assign")
DEFAULT_POLL_TIMEOUT_MS = 120_000  # Spark's default for kafkaConsumer.pollTimeoutMs (spark.network.timeout)


class OptionError(ValueError):
    """An option Spark's Kafka source or sink would reject (Spark raises IllegalArgumentException)."""


# ---------------------------------------------------------------------------- offset limits

@dataclass(frozen=True)
class Earliest:
    pass


@dataclass(frozen=True)
class Latest:
    pass


@dataclass(frozen=True)
class SpecificOffsets:
    """``{"topic": {"0": 23, "1": -2}}``: -2 earliest, -1 latest."""

    offsets: dict[tuple[str, int], int]


@dataclass(frozen=True)
class GlobalTimestamp:
    timestamp: int
    on_no_match: str  # "error" | "latest"


@dataclass(frozen=True)
class SpecificTimestamps:
    timestamps: dict[tuple[str, int], int]
    on_no_match: str


OffsetLimit = Earliest | Latest | SpecificOffsets | GlobalTimestamp | SpecificTimestamps


def parse_partition_json(text: str, what: str) -> dict[tuple[str, int], int]:
    """``{"t": {"0": 5}}`` -> ``{("t", 0): 5}``."""
    try:
        raw = json.loads(text)
        out = {}
        for topic, parts in raw.items():
            for p, value in parts.items():
                out[(str(topic), int(p))] = int(value)
        return out
    except (ValueError, AttributeError, TypeError):
        raise OptionError(f"Expected e.g. {{\"topicA\":{{\"0\":23,\"1\":-1}},\"topicB\":{{\"0\":-2}}}}, got {text}"
                          f" (option {what})") from None


def parse_assign(text: str) -> list[tuple[str, int]]:
    """``{"topicA": [0, 1], "topicB": [2]}`` -> ``[("topicA", 0), ...]``."""
    if not text.strip().startswith("{"):
        raise OptionError(f"No topicpartitions to assign as specified value for option 'assign' is '{text}'")
    try:
        raw = json.loads(text)
        return [(str(t), int(p)) for t, ps in raw.items() for p in ps]
    except (ValueError, AttributeError, TypeError):
        raise OptionError(f"Expected e.g. {{\"topicA\":[0,1],\"topicB\":[0,1]}}, got {text}") from None


def _limit(o: Mapping[str, str], ts_key: str, by_ts_key: str, offsets_key: str, default: OffsetLimit) -> OffsetLimit:
    """Spark's order of preference: a global timestamp, per-partition timestamps, then offsets."""
    strategy = o.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise OptionError(f"startingOffsetsByTimestampStrategy must be 'error' or 'latest', got '{strategy}'")
    if ts_key in o:
        text = o[ts_key].strip()
        try:
            return GlobalTimestamp(int(text), strategy)
        except ValueError:
            raise OptionError(f"Expected a single long value, got {text}") from None
    if by_ts_key in o:
        return SpecificTimestamps(parse_partition_json(o[by_ts_key], by_ts_key), strategy)
    text = o.get(offsets_key)
    if text is None:
        return default
    if text.strip().lower() == "latest":
        return Latest()
    if text.strip().lower() == "earliest":
        return Earliest()
    return SpecificOffsets(parse_partition_json(text, offsets_key))


def _bool(o: Mapping[str, str], key: str, default: bool) -> bool:
    text = o.get(key)
    if text is None:
        return default
    if text.strip().lower() in ("true", "false"):
        return text.strip().lower() == "true"
    raise OptionError(f"Option '{key}' must be true or false, got '{text}'")


def _positive(o: Mapping[str, str], key: str, message: str) -> int | None:
    text = o.get(key)
    if text is None:
        return None
    try:
        value = int(text.strip())
    except ValueError:
        raise OptionError(f"Option '{key}' must be an integer, got '{text}'") from None
    if value <= 0:
        raise OptionError(message)
    return value


def client_params(o: Mapping[str, str]) -> dict[str, str]:
    """The ``kafka.``-prefixed options, prefix dropped. Security settings (``security.protocol``,
    ``sasl.*``, ``ssl.*``) are checked here, on the driver, so a bad one fails the query at once
    with a message naming it rather than in every executor task."""
    params = {k[6:]: v for k, v in o.items() if k.lower().startswith("kafka.")}
    try:
        client_security(properties_getter(params))
    except ValueError as e:  # SslConfigError is one
        raise OptionError(f"Invalid Kafka security option: {e}") from None
    return params


# ---------------------------------------------------------------------------- source

@dataclass(frozen=True)
class SourceOptions:
    bootstrap_servers: str
    strategy: str  # one of STRATEGIES
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assigned: tuple[tuple[str, int], ...] = ()
    starting: OffsetLimit = field(default_factory=Latest)
    ending: OffsetLimit = field(default_factory=Latest)
    fail_on_data_loss: bool = True
    include_headers: bool = False
    min_partitions: int | None = None
    max_offsets_per_trigger: int | None = None
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS
    client: tuple[tuple[str, str], ...] = ()  # kafka.* options for Samsa's clients
    value_format: str = "binary"           # valueFormat=avro: values decoded with a Schema Registry
    registry_url: str | None = None        # schema.registry.url
    value_subject: str | None = None       # valueSubject (default: the one subscribed topic's <topic>-value)
    value_version: str = "latest"          # valueSchemaVersion
    value_schema: str | None = None        # the Avro schema read when the query started (set by the source)

    def consumer_config(self) -> dict[str, Any]:
        """What executors read with: only the driver decides offsets (Spark's executor settings)."""
        config: dict[str, Any] = {k: v for k, v in self.client if k in CONSUMER_KEYS and k != "group.id"}
        config.update({"bootstrap.servers": self.bootstrap_servers, "auto.offset.reset": "none",
                       "enable.auto.commit": False})
        config.setdefault("client.id", "samsa-spark-executor")
        config.setdefault("max.poll.records", 10_000)
        # A planned range is already in the log, so waiting at its end is never useful; and the
        # fetch sent after a range's last records would otherwise stay parked at the broker for
        # fetch.max.wait.ms, holding up the next task that reuses this consumer.
        config.setdefault("fetch.max.wait.ms", 10)
        return config

    def admin_config(self) -> dict[str, Any]:
        config: dict[str, Any] = dict(self.client)
        config["bootstrap.servers"] = self.bootstrap_servers
        config.setdefault("client.id", "samsa-spark-driver")
        return config

    def matches(self, topic: str) -> bool:
        if self.strategy == "subscribe":
            return topic in self.topics
        if self.strategy == "subscribepattern":
            return re.fullmatch(self.pattern or "", topic) is not None
        return any(t == topic for t, _ in self.assigned)


def parse_source(o: Mapping[str, str], *, streaming: bool | None) -> SourceOptions:
    """Check the options as Spark's Kafka source does; raise OptionError with its message.
    ``streaming=None``: only the checks common to batch and streaming queries."""
    o = {k.lower(): v for k, v in o.items()}
    if streaming:
        if "endingoffsets" in o:
            raise OptionError("ending offset not valid in streaming queries")
        if "endingoffsetsbytimestamp" in o or "endingtimestamp" in o:
            raise OptionError("ending timestamp not valid in streaming queries")
    given = [k for k in STRATEGIES if k in o]
    names = "subscribe, subscribepattern, assign"
    if not given:
        raise OptionError(f"One of the following options must be specified for Kafka source: {names}. "
                          "See the docs for more details.")
    if len(given) > 1:
        raise OptionError(f"Only one of the following options can be specified for Kafka source: {names}. "
                          "See the docs for more details.")
    strategy = given[0]
    topics: tuple[str, ...] = ()
    pattern = None
    assigned: tuple[tuple[str, int], ...] = ()
    if strategy == "subscribe":
        topics = tuple(t.strip() for t in o["subscribe"].split(",") if t.strip())
        if not topics:
            raise OptionError(f"No topics to subscribe to as specified value for option 'subscribe' is "
                              f"'{o['subscribe']}'")
    elif strategy == "subscribepattern":
        pattern = o["subscribepattern"].strip()
        if not pattern:
            raise OptionError(f"Pattern to subscribe is empty as specified value for option 'subscribePattern' is "
                              f"'{o['subscribepattern']}'")
        try:
            re.compile(pattern)
        except re.error as e:
            raise OptionError(f"Invalid subscribePattern '{pattern}': {e}") from None
    else:
        assigned = tuple(parse_assign(o["assign"]))
    min_partitions = _positive(o, "minpartitions", "minPartitions must be positive")
    max_per_trigger = _positive(o, "maxoffsetspertrigger", "maxOffsetsPerTrigger must be positive")
    poll_timeout = _positive(o, "kafkaconsumer.polltimeoutms", "kafkaConsumer.pollTimeoutMs must be positive")
    client = client_params(o)
    if "auto.offset.reset" in client:
        raise OptionError("Kafka option 'auto.offset.reset' is not supported. Instead set the source option "
                          "'startingoffsets' to 'earliest' or 'latest' to specify where to start. Structured "
                          "Streaming manages which offsets are consumed internally, rather than relying on the "
                          "kafkaConsumer to do it.")
    for name, what in (("key.deserializer", "keys"), ("value.deserializer", "values")):
        if name in client:
            raise OptionError(f"Kafka option '{name}' is not supported as {what} are deserialized as byte arrays "
                              f"with ByteArrayDeserializer. Use DataFrame operations to explicitly deserialize "
                              f"the {what}.")
    for name in ("enable.auto.commit", "interceptor.classes"):
        if name in client:
            raise OptionError(f"Kafka option '{name}' is not supported")
    servers = client.get("bootstrap.servers", "").strip()
    if not servers:
        raise OptionError("Option 'kafka.bootstrap.servers' must be specified for configuring Kafka consumer")
    default_start: OffsetLimit = Latest() if streaming else Earliest()
    starting = _limit(o, "startingtimestamp", "startingoffsetsbytimestamp", "startingoffsets", default_start)
    ending = _limit(o, "endingtimestamp", "endingoffsetsbytimestamp", "endingoffsets", Latest())
    if streaming is False:
        if isinstance(starting, Latest):
            raise OptionError("starting offset can't be latest for batch queries on Kafka")
        if isinstance(starting, SpecificOffsets):
            for (t, p), off in starting.offsets.items():
                if off == LATEST:
                    raise OptionError(f"startingOffsets for {t}-{p} can't be latest for batch queries on Kafka")
        if isinstance(ending, Earliest):
            raise OptionError("ending offset can't be earliest for batch queries on Kafka")
        if isinstance(ending, SpecificOffsets):
            for (t, p), off in ending.offsets.items():
                if off == EARLIEST:
                    raise OptionError(f"ending offset for {t}-{p} can't be earliest for batch queries on Kafka")
    value_format = o.get("valueformat", "binary").strip().lower()
    if value_format not in ("binary", "avro"):
        raise OptionError(f"valueFormat must be 'binary' or 'avro', got '{o['valueformat']}'")
    registry_url, subject = o.get("schema.registry.url"), o.get("valuesubject")
    if value_format == "avro":
        if not registry_url:
            raise OptionError("valueFormat=avro needs the option 'schema.registry.url'")
        if not subject:
            if len(topics) != 1:
                raise OptionError("valueFormat=avro needs the option 'valueSubject' unless one topic is subscribed")
            subject = f"{topics[0]}-value"
    return SourceOptions(
        value_format=value_format, registry_url=registry_url, value_subject=subject,
        value_version=o.get("valueschemaversion", "latest"),
        bootstrap_servers=servers, strategy=strategy, topics=topics, pattern=pattern, assigned=assigned,
        starting=starting, ending=ending, fail_on_data_loss=_bool(o, "failondataloss", True),
        include_headers=_bool(o, "includeheaders", False), min_partitions=min_partitions,
        max_offsets_per_trigger=max_per_trigger, poll_timeout_ms=poll_timeout or DEFAULT_POLL_TIMEOUT_MS,
        client=tuple(sorted((k, v) for k, v in client.items() if k != "bootstrap.servers")))


# ---------------------------------------------------------------------------- sink

@dataclass(frozen=True)
class SinkOptions:
    bootstrap_servers: str
    topic: str | None
    client: tuple[tuple[str, str], ...] = ()
    exactly_once: bool = False            # each task's rows in a transaction; a replayed task is skipped
    transactional_id_prefix: str | None = None  # default: samsa-spark-<query id>

    def producer_config(self) -> dict[str, Any]:
        """Idempotent, acks=all: a record is either written once or its micro-batch fails."""
        config: dict[str, Any] = {k: v for k, v in self.client if k in PRODUCER_KEYS}
        config.update({"bootstrap.servers": self.bootstrap_servers, "acks": "all", "enable.idempotence": True})
        config.setdefault("client.id", "samsa-spark-sink")
        config.setdefault("linger.ms", 5)
        return config

    def admin_config(self) -> dict[str, Any]:
        """For the progress notes of exactly-once writes: the connection and security keys."""
        config: dict[str, Any] = {k: v for k, v in self.client if k in ADMIN_KEYS}
        config["bootstrap.servers"] = self.bootstrap_servers
        return config


def parse_sink(o: Mapping[str, str]) -> SinkOptions:
    o = {k.lower(): v for k, v in o.items()}
    client = client_params(o)
    if "key.serializer" in client:
        raise OptionError("Kafka option 'key.serializer' is not supported as keys are serialized with "
                          "ByteArraySerializer.")
    if "value.serializer" in client:
        raise OptionError("Kafka option 'value.serializer' is not supported as value are serialized with "
                          "ByteArraySerializer.")
    servers = client.get("bootstrap.servers", "").strip()
    if not servers:
        raise OptionError("Option 'kafka.bootstrap.servers' must be specified for configuring Kafka producer")
    topic = o.get("topic")
    if "transactional.id" in client:
        raise OptionError("Kafka option 'transactional.id' is not supported: set exactlyOnce=true (and "
                          "transactionalIdPrefix) for transactional writes.")
    prefix = o.get("transactionalidprefix")
    return SinkOptions(servers, topic.strip() if topic is not None else None,
                       tuple(sorted((k, v) for k, v in client.items() if k != "bootstrap.servers")),
                       exactly_once=_bool(o, "exactlyonce", False),
                       transactional_id_prefix=prefix.strip() if prefix else None)
