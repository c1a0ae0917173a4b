"""``samsa console-producer``: kafka-console-producer.sh with Kafka's flags.

    samsa console-producer --bootstrap-server localhost:9092 --topic test
    samsa console-producer --bootstrap-server localhost:9092 --topic test --property parse.key=true --property key.separator=:

Each line of stdin (or ``--file``) is one record. Reader properties as Kafka's
LineMessageReader: ``parse.key``, ``key.separator`` (tab), ``parse.headers``,
``headers.delimiter`` (tab), ``headers.separator`` (,), ``headers.key.separator`` (:),
``null.marker``, ``ignore.error``. A record that fails is reported on stderr, one line,
and the tool exits non-zero.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import IO, Any

from samsa.cli.common import Parser, UsageError, error_message, read_properties, run_tool
from samsa.configdef import ConfigError
from samsa.protocol import errors
from samsa.serialization import SerializationError

DESCRIPTION = "This tool helps to read data from standard input and publish it to Kafka."
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="samsa console-producer", description=DESCRIPTION)
    a = p.add_argument
    a("--bootstrap-server", metavar="<String: server to connect to>",
      help="REQUIRED unless --broker-list(deprecated) is specified. The server(s) to connect to.")
    a("--broker-list", metavar="<String: broker-list>", help="DEPRECATED, use --bootstrap-server instead.")
    a("--topic", metavar="<String: topic>", help="REQUIRED: The topic id to produce messages to.")
    a("--file", metavar="<String: file>", help="Read records from this file instead of standard input.")
    a("--property", metavar="<String: prop>", action="append", default=[],
      help="A mechanism to pass user-defined properties in the form key=value to the message reader.")
    a("--reader-property", metavar="<String: prop>", action="append", default=[], help=argparse.SUPPRESS)
    a("--producer-property", metavar="<String: producer_prop>", action="append", default=[],
      help="A mechanism to pass user-defined properties in the form key=value to the producer.")
    a("--command-property", metavar="<String: producer_prop>", action="append", default=[], help=argparse.SUPPRESS)
    a("--producer.config", dest="producer_config", metavar="<String: config file>",
      help="Producer config properties file. Note that [producer-property] takes precedence over this config.")
    a("--compression-codec", metavar="[String: compression-codec]", nargs="?", const="gzip",
      help="The compression codec: either 'none', 'gzip', 'snappy', 'lz4', or 'zstd'. "
      "If specified without value, then it defaults to 'gzip'")
    a("--request-required-acks", metavar="<String: request required acks>", default="-1",
      help="The required `acks` of the producer requests (default: -1)")
    a("--sync", action="store_true", help="If set message send requests to the brokers are synchronously, one at a time "
      "as they arrive.")
    a("--batch-size", metavar="<Integer: size>", type=int, default=16384,
      help="Number of messages to send in a single batch if they are not being sent synchronously. (default: 16384)")
    a("--timeout", metavar="<Integer: timeout_ms>", type=int, default=1000,
      help="If set and the producer is running in asynchronous mode, this gives the maximum amount of time a "
      "message will queue awaiting sufficient batch size. (default: 1000)")
    a("--request-timeout-ms", metavar="<Integer: request timeout ms>", type=int, default=1500,
      help="The ack timeout of the producer requests. (default: 1500)")
    a("--message-send-max-retries", metavar="<Integer>", type=int, default=3,
      help="Number of retries before giving up on a message. (default: 3)")
    a("--retry-backoff-ms", metavar="<Long>", type=int, default=100,
      help="Before each retry, the producer refreshes the metadata of relevant topics. (default: 100)")
    a("--max-block-ms", metavar="<Long: max block on send>", type=int, default=60000,
      help="The max time that the producer will block for during a send request. (default: 60000)")
    a("--max-memory-bytes", metavar="<Long: total memory in bytes>", type=int, default=33554432,
      help="The total memory used by the producer to buffer records waiting to be sent to the server. "
      "(default: 33554432)")
    a("--metadata-expiry-ms", metavar="<Long: metadata expiration interval>", type=int, default=300000,
      help="The period of time in milliseconds after which we force a refresh of metadata. (default: 300000)")
    a("--line-reader", metavar="<String: reader_class>",
      help=f"The class name of the class to use for reading lines: {AVRO_READER} reads values (and keys with "
      "key.schema) in Avro's JSON encoding and writes them in Avro through the schema registry "
      "(schema.registry.url, value.schema). Default: each line is one record as is.")
    return p


def _pairs(items: list[str], what: str) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise UsageError(f"Invalid {what} '{item}': expected key=value")
        out[key.strip()] = value
    return out


def producer_config(opts: argparse.Namespace) -> dict[str, Any]:
    config: dict[str, Any] = {}
    if opts.producer_config:
        config.update(read_properties(opts.producer_config, "producer config file "))
    config.update({
        "bootstrap.servers": opts.bootstrap_server or opts.broker_list,
        "acks": opts.request_required_acks, "linger.ms": opts.timeout, "batch.size": opts.batch_size,
        "request.timeout.ms": opts.request_timeout_ms, "retries": opts.message_send_max_retries,
        "retry.backoff.ms": opts.retry_backoff_ms, "max.block.ms": opts.max_block_ms,
        "buffer.memory": opts.max_memory_bytes, "metadata.max.age.ms": opts.metadata_expiry_ms,
        "client.id": "console-producer",
    })
    if opts.request_required_acks not in ("all", "-1"):
        config["enable.idempotence"] = False
    if opts.compression_codec:
        if opts.compression_codec not in CODECS:
            raise UsageError(f"Unknown compression codec '{opts.compression_codec}': expected one of {', '.join(CODECS)}")
        config["compression.type"] = opts.compression_codec
    config.update(_pairs(opts.producer_property + opts.command_property, "producer property"))
    return config


AVRO_READER = "io.confluent.kafka.formatter.AvroMessageReader"
# --property keys that configure the Avro serializers (kafka-avro-console-producer's)
AVRO_KEYS = ("schema.registry.url", "value.schema", "key.schema", "auto.register.schemas", "use.latest.version",
             "normalize.schemas", "key.subject.name.strategy", "value.subject.name.strategy",
             "basic.auth.credentials.source", "basic.auth.user.info")


def avro_config(props: dict[str, str], line_reader: str | None) -> dict[str, str]:
    """The producer keys of Avro mode (``--line-reader`` AvroMessageReader, or a value.schema given)."""
    for side in ("key", "value"):
        path = props.pop(f"{side}.schema.file", None)
        if path:
            try:
                props[f"{side}.schema"] = Path(path).read_text()
            except OSError as e:
                raise UsageError(f"Cannot read {side}.schema.file {path}: {e.strerror}") from None
    if line_reader not in (None, AVRO_READER):
        raise UsageError(f"Unknown --line-reader {line_reader}: the default reader or {AVRO_READER}")
    if line_reader is None and "value.schema" not in props:
        return {}
    if not props.get("schema.registry.url"):
        raise UsageError("Missing required property schema.registry.url (the Avro message reader needs a registry)")
    if not props.get("value.schema") and props.get("use.latest.version", "false").lower() != "true":
        raise UsageError("Missing required property value.schema (or value.schema.file)")
    config = {k: props[k] for k in AVRO_KEYS if k in props}
    config["value.serializer"] = "samsa.serialization.avro.AvroLineSerializer"
    if props.get("key.schema"):
        config["key.serializer"] = "samsa.serialization.avro.AvroLineSerializer"
    return config


class LineReader:
    """Kafka's LineMessageReader: key, headers and value out of one line."""

    def __init__(self, props: dict[str, str]):
        flag = lambda name: props.get(name, "false").strip().lower() == "true"  # noqa: E731
        self.parse_key, self.parse_headers, self.ignore_error = flag("parse.key"), flag("parse.headers"), flag(
            "ignore.error")
        self.key_separator = props.get("key.separator", "\t")
        self.headers_delimiter = props.get("headers.delimiter", "\t")
        self.headers_separator = props.get("headers.separator", ",")
        self.headers_key_separator = props.get("headers.key.separator", ":")
        self.null_marker = props.get("null.marker")
        if self.null_marker is not None and self.null_marker in (self.key_separator, self.headers_delimiter):
            raise UsageError("null.marker must not be the same as key.separator or headers.delimiter")

    def _null(self, text: str | None) -> bytes | None:
        if text is None or (self.null_marker is not None and text == self.null_marker):
            return None
        return text.encode()

    def parse(self, line: str, number: int) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]:
        headers: list[tuple[str, bytes | None]] = []
        rest = line
        if self.parse_headers:
            head, sep, rest = line.partition(self.headers_delimiter)
            if not sep:
                if not self.ignore_error:
                    raise ValueError(f"No headers delimiter found on line number {number}: '{line}'")
                head, rest = "", line
            if head and head != self.null_marker:
                for pair in head.split(self.headers_separator):
                    k, s, v = pair.partition(self.headers_key_separator)
                    if not s and not self.ignore_error:
                        raise ValueError(f"No header key separator found in pair '{pair}' on line number {number}")
                    headers.append((k, self._null(v if s else None)))
        key = None
        if self.parse_key:
            k, sep, value = rest.partition(self.key_separator)
            if not sep:
                if not self.ignore_error:
                    raise ValueError(f"No key separator found on line number {number}: '{line}'")
                return None, self._null(rest), headers
            key, rest = self._null(k), value
        return key, self._null(rest), headers


def produce(source: IO[str], producer: Any, topic: str, reader: LineReader, sync: bool) -> int:
    """Send each line; the number of records that failed."""
    failed = [0]

    def report(meta: Any, error: Exception | None) -> None:
        if error is not None:
            failed[0] += 1
            print(f"Error when sending message to topic {topic}: {error_message(error)}", file=sys.stderr, flush=True)
    for number, line in enumerate(source, 1):
        line = line.rstrip("\n").rstrip("\r")
        key, value, headers = reader.parse(line, number)
        future = producer.send(topic, value, key=key, headers=headers or None, on_delivery=report)
        if sync:  # one at a time: send now rather than after linger.ms
            producer.flush()
            try:
                future.result()
            except errors.KafkaError:
                pass
    producer.flush()
    return failed[0]


def main(argv: list[str] | None = None) -> int:
    return run_tool(argv, build_parser(), _tool, description=DESCRIPTION,
                    failures=[((errors.KafkaError, ValueError, ConfigError, SerializationError), "ERROR {}")])


def _tool(opts: argparse.Namespace) -> int:
    if not (opts.bootstrap_server or opts.broker_list):
        raise UsageError("Missing required option(s) [bootstrap-server]")
    if not opts.topic:
        raise UsageError("Missing required option(s) [topic]")
    props = _pairs(opts.property + opts.reader_property, "property")
    avro = avro_config(props, opts.line_reader)
    reader = LineReader(props)
    from samsa.client.producer import Producer
    producer = None
    try:
        producer = Producer({**producer_config(opts), **avro})
        source = open(opts.file, encoding="utf-8") if opts.file else sys.stdin
        with source:
            failed = produce(source, producer, opts.topic, reader, opts.sync)
        return 1 if failed else 0
    except OSError as e:
        print(f"Cannot read {e.filename}: {e.strerror}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    finally:
        if producer is not None:
            producer.close()


if __name__ == "__main__":
    sys.exit(main())
