"""``samsa console-consumer``: kafka-console-consumer.sh with Kafka's flags and output.

    samsa console-consumer --bootstrap-server localhost:9092 --topic test --from-beginning
    samsa console-consumer --bootstrap-server localhost:9092 --include 'test|test-2' --group g

Reads from the end of the topic unless told otherwise (``--from-beginning``, ``--offset``,
or a group's committed offsets), prints one record per line (the value; more with
``--property print.key=true`` ...), and on exit prints "Processed a total of N messages"
to stderr. Without ``--group``, it joins a fresh group ``console-consumer-NNNNN`` without
committing offsets, as Kafka's does.
"""

from __future__ import annotations

import argparse
import logging
import random
import re
import signal
import sys
import time
from pathlib import Path
from typing import Any, BinaryIO

from samsa.cli.common import Parser, UsageError, error_message, run_tool
from samsa.client.config import ConfigError, load_serde
from samsa.client.consumer import Consumer, ConsumerRecord, TopicPartition, WakeupError
from samsa.client.consumer_internals.async_consumer import JAVA_DESERIALIZERS
from samsa.client.consumer_internals.records import TIMESTAMP_TYPE_NAMES
from samsa.configdef import parse_properties
from samsa.protocol import errors

DESCRIPTION = "This tool helps to read data from Kafka topics and outputs it to standard output."
DEFAULT_FORMATTER = "kafka.tools.DefaultMessageFormatter"
FORMATTERS = {DEFAULT_FORMATTER, "org.apache.kafka.tools.consumer.DefaultMessageFormatter", "DefaultMessageFormatter"}
# kafka-avro-console-consumer's formatter: values (and keys) in Avro's JSON encoding, schemas from the registry
AVRO_FORMATTER = "io.confluent.kafka.formatter.AvroMessageFormatter"
AVRO_DESERIALIZER = "samsa.serialization.avro.AvroJsonDeserializer"


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="samsa console-consumer", description=DESCRIPTION)
    a = p.add_argument
    a("--bootstrap-server", metavar="<String: server to connect to>", help="REQUIRED: The server(s) to connect to.")
    a("--topic", metavar="<String: topic>", help="The topic to consume on.")
    a("--include", metavar="<String: Java regex (String)>",
      help="Regular expression specifying list of topics to include for consumption.")
    a("--whitelist", metavar="<String: Java regex (String)>",
      help="DEPRECATED, use --include instead; ignored if --include specified.")
    a("--partition", metavar="<Integer: partition>", type=int,
      help="The partition to consume from. Consumption starts from the end of the partition unless '--offset' is "
      "specified.")
    a("--offset", metavar="<String: consume offset>",
      help="The offset to consume from (a non-negative number), or 'earliest' which means from beginning, or "
      "'latest' which means from end (default: latest)")
    a("--from-beginning", action="store_true",
      help="If the consumer does not already have an established offset to consume from, start with the earliest "
      "message present in the log rather than the latest message.")
    a("--group", metavar="<String: consumer group id>", help="The consumer group id of the consumer.")
    a("--consumer-property", metavar="<String: consumer_prop>", action="append", default=[],
      help="A mechanism to pass user-defined properties in the form key=value to the consumer.")
    a("--consumer.config", dest="consumer_config", metavar="<String: config file>",
      help="Consumer config properties file. Note that [consumer-property] takes precedence over this config.")
    a("--property", metavar="<String: prop>", action="append", default=[],
      help="The properties to initialize the message formatter. Default properties include: print.timestamp=true|false "
      "print.key=true|false print.offset=true|false print.partition=true|false print.headers=true|false "
      "print.value=true|false key.separator=<key.separator> line.separator=<line.separator> "
      "headers.separator=<line.separator> null.literal=<null.literal> key.deserializer=<key.deserializer> "
      "value.deserializer=<value.deserializer> header.deserializer=<header.deserializer>")
    a("--formatter", metavar="<String: class>", default=DEFAULT_FORMATTER,
      help=f"The name of a class to use for formatting kafka messages for display. (default: {DEFAULT_FORMATTER})")
    a("--max-messages", metavar="<Integer: num_messages>", type=int,
      help="The maximum number of messages to consume before exiting. If not set, consumption is continual.")
    a("--timeout-ms", metavar="<Integer: timeout_ms>", type=int,
      help="If specified, exit if no message is available for consumption for the specified interval.")
    a("--skip-message-on-error", action="store_true",
      help="If there is an error when processing a message, skip it instead of halt.")
    a("--isolation-level", metavar="<String>", default=None,
      help="Set to read_committed in order to filter out transactional messages which are not committed. Set to "
      "read_uncommitted to read all messages. (default: read_uncommitted)")
    a("--key-deserializer", metavar="<String: deserializer for key>")
    a("--value-deserializer", metavar="<String: deserializer for values>")
    a("--enable-systest-events", action="store_true", help=argparse.SUPPRESS)
    return p


def _pairs(items: list[str], what: str) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"Invalid {what} '{item}': expected key=value")
        out[key.strip()] = value
    return out


def _include_regex(raw: str) -> re.Pattern:
    """Kafka's include list: commas are alternatives, blanks and surrounding quotes dropped."""
    text = raw.strip().replace(",", "|").replace(" ", "")
    text = re.sub(r"^[\"']+", "", text)
    text = re.sub(r"[\"']+$", "", text)
    try:
        return re.compile(text)
    except re.error as e:
        raise UsageError(f"{raw} is an invalid regex: {e}") from None


def consumer_config(opts: argparse.Namespace) -> tuple[dict[str, str], bool]:
    """The consumer's properties, and whether a group id was given."""
    props: dict[str, str] = {}
    if opts.consumer_config:
        try:
            props.update(parse_properties(Path(opts.consumer_config).read_text()))
        except OSError as e:
            raise UsageError(f"Cannot read consumer config file {opts.consumer_config}: {e.strerror}") from None
    extra = _pairs(opts.consumer_property, "consumer property")
    groups = {g for g in (opts.group, extra.get("group.id"), props.get("group.id")) if g}
    if len(groups) > 1:
        raise UsageError("The group ids provided in different places (directly using '--group', via "
                         "'--consumer-property', or via '--consumer.config') do not match. Detected group ids: "
                         + ", ".join(f"'{g}'" for g in sorted(groups)))
    props.update(extra)
    props["bootstrap.servers"] = opts.bootstrap_server
    reset = "earliest" if opts.from_beginning else "latest"
    if opts.from_beginning and props.get("auto.offset.reset", "earliest") != "earliest":
        raise UsageError(f"Can't simultaneously specify --from-beginning and 'auto.offset.reset="
                         f"{props['auto.offset.reset']}', please remove one option")
    props.setdefault("auto.offset.reset", reset)
    if opts.isolation_level:
        props["isolation.level"] = opts.isolation_level
    group_given = bool(groups)
    if groups:
        props["group.id"] = groups.pop()
    else:
        props["group.id"] = f"console-consumer-{random.randrange(100000)}"
        # The made-up group is not meant to be used again: store no offsets for it.
        props.setdefault("enable.auto.commit", "false")
    props.setdefault("client.id", "console-consumer")
    return props, group_given


def check_args(opts: argparse.Namespace) -> None:
    if not opts.bootstrap_server:
        raise UsageError("Missing required argument \"[bootstrap-server]\"")
    include = opts.include or opts.whitelist
    if bool(opts.topic) == bool(include):
        raise UsageError("Exactly one of include/topic is required.")
    if opts.partition is not None and not opts.topic:
        raise UsageError("The topic is required when partition is specified.")
    if opts.offset is not None and opts.partition is None:
        raise UsageError("The partition is required when offset is specified.")
    if opts.from_beginning and opts.offset is not None:
        raise UsageError("Options from-beginning and offset cannot be specified together.")
    if opts.group and opts.partition is not None:
        raise UsageError("Options group and partition cannot be specified together.")
    if opts.offset is not None and opts.offset not in ("earliest", "latest"):
        if not re.fullmatch(r"\d+", opts.offset):
            raise UsageError("The provided offset value is incorrect. Valid values are 'earliest', 'latest', or a "
                             "non-negative long.")
    if opts.formatter not in FORMATTERS | {AVRO_FORMATTER}:
        raise UsageError(f"Unknown formatter {opts.formatter}: {DEFAULT_FORMATTER} or {AVRO_FORMATTER}")
    if opts.max_messages is not None and opts.max_messages < 0:
        raise UsageError("--max-messages must not be negative")


# ---------------------------------------------------------------------------- the formatter

def _bool(props: dict[str, str], key: str, default: bool) -> bool:
    value = props.get(key)
    return default if value is None else value.strip().lower() == "true"


def _unescape(text: str) -> str:
    """Separators as given on a command line: ``\\t`` and ``\\n`` mean tab and newline."""
    return text.encode().decode("unicode_escape")


def _load_deserializer(spec: str | None, is_key: bool, props: dict[str, str]) -> Any:
    spec = (spec or "").strip()
    spec = JAVA_DESERIALIZERS.get(spec, spec)
    if not spec:
        return None
    try:
        return load_serde(spec, props, is_key=is_key, method="deserialize")
    except ConfigError as e:
        raise UsageError(str(e)) from None


class DefaultMessageFormatter:
    """Kafka's DefaultMessageFormatter: [CreateTime:ts] [Partition:p] [Offset:o] [headers] [key] value."""

    def __init__(self, props: dict[str, str]):
        self.print_timestamp = _bool(props, "print.timestamp", False)
        self.print_key = _bool(props, "print.key", False)
        self.print_offset = _bool(props, "print.offset", False)
        self.print_partition = _bool(props, "print.partition", False)
        self.print_headers = _bool(props, "print.headers", False)
        self.print_value = _bool(props, "print.value", True)
        self.key_separator = _unescape(props.get("key.separator", "\t")).encode()
        self.line_separator = _unescape(props.get("line.separator", "\n")).encode()
        self.headers_separator = _unescape(props.get("headers.separator", ",")).encode()
        self.null_literal = props.get("null.literal", "null").encode()
        self.key_deserializer = _load_deserializer(props.get("key.deserializer"), True, props)
        self.value_deserializer = _load_deserializer(props.get("value.deserializer"), False, props)
        self.header_deserializer = _load_deserializer(props.get("headers.deserializer")
                                                      or props.get("header.deserializer"), False, props)

    def _text(self, deserializer: Any, topic: str, data: bytes | None, headers: Any) -> bytes:
        if deserializer is not None:
            data = deserializer.deserialize(topic, data, headers)
        if data is None:
            return self.null_literal
        if isinstance(data, (bytes, bytearray, memoryview)):
            return bytes(data)
        return str(data).encode()

    def write_to(self, r: ConsumerRecord, out: BinaryIO) -> None:
        columns = []
        if self.print_timestamp:
            name = TIMESTAMP_TYPE_NAMES.get(r.timestamp_type)
            columns.append(f"{name}:{r.timestamp}".encode() if r.timestamp_type >= 0 else b"NO_TIMESTAMP")
        if self.print_partition:
            columns.append(b"Partition:%d" % r.partition)
        if self.print_offset:
            columns.append(b"Offset:%d" % r.offset)
        if self.print_headers:
            if r.headers:
                columns.append(self.headers_separator.join(
                    k.encode() + b":" + self._text(self.header_deserializer, r.topic, v, r.headers)
                    for k, v in r.headers))
            else:
                columns.append(b"NO_HEADERS")
        if self.print_key:
            columns.append(self._text(self.key_deserializer, r.topic, r.key, r.headers))
        if self.print_value:
            columns.append(self._text(self.value_deserializer, r.topic, r.value, r.headers))
        out.write(self.key_separator.join(columns) + self.line_separator)


# ---------------------------------------------------------------------------- the loop

class _Stop:
    def __init__(self) -> None:
        self.requested = False
        self.consumer: Consumer | None = None

    def __call__(self, signum: int, frame: Any) -> None:
        self.requested = True
        if self.consumer is not None:
            self.consumer.wakeup()


def _start(consumer: Consumer, opts: argparse.Namespace) -> None:
    if opts.partition is not None:
        tp = TopicPartition(opts.topic, opts.partition)
        consumer.assign([tp])
        offset = opts.offset or ("earliest" if opts.from_beginning else "latest")
        if offset == "earliest":
            consumer.seek_to_beginning([tp])
        elif offset == "latest":
            consumer.seek_to_end([tp])
        else:
            consumer.seek(tp, int(offset))
    elif opts.topic:
        consumer.subscribe([opts.topic])
    else:
        consumer.subscribe(pattern=_include_regex(opts.include or opts.whitelist))


def consume(consumer: Consumer, opts: argparse.Namespace, formatter: DefaultMessageFormatter,
            out: BinaryIO, stop: _Stop) -> int:
    """Print records until --max-messages, --timeout-ms or a signal; the count printed."""
    count = 0
    timeout = opts.timeout_ms / 1000 if opts.timeout_ms is not None else None
    last = time.monotonic()
    while not stop.requested and (opts.max_messages is None or count < opts.max_messages):
        wait = 1.0 if timeout is None else max(last + timeout - time.monotonic(), 0.0)
        try:
            left = None if opts.max_messages is None else opts.max_messages - count
            records = consumer.poll(min(wait, 1.0), max_records=left)
        except WakeupError:
            break
        if not records:
            if timeout is not None and time.monotonic() - last >= timeout:
                print("ERROR Error processing message, terminating consumer process: TimeoutException: no message "
                      f"received within {opts.timeout_ms} ms", file=sys.stderr)
                break
            continue
        last = time.monotonic()
        for r in records:
            try:
                formatter.write_to(r, out)
            except Exception as e:  # noqa: BLE001 - a record the formatter cannot print
                if not opts.skip_message_on_error:
                    out.flush()
                    print(f"ERROR Error processing message, terminating consumer process: {e}", file=sys.stderr)
                    return count
                print(f"ERROR Error processing message, skipping this message: {e}", file=sys.stderr)
            count += 1
        out.flush()
    return count


def main(argv: list[str] | None = None) -> int:
    return run_tool(argv, build_parser(), _tool, description=DESCRIPTION)


def _tool(opts: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.WARNING, format="[%(asctime)s] %(levelname)s %(message)s (%(name)s)")
    check_args(opts)
    props, _ = consumer_config(opts)
    fmt_props = _pairs(opts.property, "property")
    if opts.key_deserializer:
        fmt_props["key.deserializer"] = opts.key_deserializer
    if opts.value_deserializer:
        fmt_props["value.deserializer"] = opts.value_deserializer
    if opts.formatter == AVRO_FORMATTER or fmt_props.get("schema.registry.url"):
        if not fmt_props.get("schema.registry.url"):
            raise UsageError(f"Missing required property schema.registry.url for {AVRO_FORMATTER}")
        fmt_props.setdefault("value.deserializer", AVRO_DESERIALIZER)
        if _bool(fmt_props, "print.key", False):
            fmt_props.setdefault("key.deserializer", AVRO_DESERIALIZER)
    formatter = DefaultMessageFormatter(fmt_props)
    stop = _Stop()
    previous = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    count = 0
    code = 0
    consumer = None
    try:
        consumer = Consumer(props)
        stop.consumer = consumer
        _start(consumer, opts)
        count = consume(consumer, opts, formatter, sys.stdout.buffer, stop)
    except (errors.KafkaError, ConfigError, ValueError, RuntimeError, OSError) as e:
        print(f"ERROR Error processing message, terminating consumer process: {error_message(e)}", file=sys.stderr)
        code = 1
    finally:
        if consumer is not None:
            try:
                consumer.close()
            except Exception as e:  # noqa: BLE001
                print(f"ERROR Error closing the consumer: {error_message(e)}", file=sys.stderr)
        for s, handler in previous.items():
            signal.signal(s, handler)
        print(f"Processed a total of {count} messages", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
