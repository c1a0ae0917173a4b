"""``samsa producer-perf-test``: kafka-producer-perf-test.sh with Kafka's flags and output.

    samsa producer-perf-test --topic perf --num-records 1000000 --record-size 100 --throughput -1 \\
        --producer-props bootstrap.servers=localhost:9092 acks=1

prints, every five seconds and at the end, as Kafka's ProducerPerformance does::

    264705 records sent, 52941.0 records/sec (5.05 MB/sec), 12.3 ms avg latency, 140.0 ms max latency.
    1000000 records sent, 53191.489362 records/sec (5.07 MB/sec), 11.02 ms avg latency, 140.00 ms max latency, 8 ms 50th, 27 ms 95th, 45 ms 99th, 120 ms 99.9th.

Latency is from the send call to the delivery callback. ``--client samsa|confluent|
kafka-python|aiokafka`` drives another client through the same loop, so any two compare
in one run.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from array import array
from pathlib import Path
from typing import Any, Callable

from samsa.cli.common import Parser, UsageError, error_message, read_properties, run_tool
from samsa.client.metrics import format_metrics
from samsa.configdef import ConfigError
from samsa.protocol import errors

DESCRIPTION = "This tool is used to verify the producer performance."
CLIENTS = ("samsa", "confluent", "kafka-python", "aiokafka")
REPORT_S = 5.0
MB = 1024 * 1024


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="samsa producer-perf-test", description=DESCRIPTION)
    a = p.add_argument
    a("--topic", metavar="TOPIC", help="REQUIRED: produce messages to this topic")
    a("--num-records", metavar="NUM-RECORDS", type=int, help="REQUIRED: number of messages to produce")
    a("--record-size", metavar="RECORD-SIZE", type=int, help="message size in bytes. Note that you must provide "
      "exactly one of --record-size or --payload-file.")
    a("--payload-file", metavar="PAYLOAD-FILE", help="file to read the message payloads from.")
    a("--payload-delimiter", metavar="PAYLOAD-DELIMITER", default="\\n",
      help='provides delimiter to be used when --payload-file is provided. (default: \\n)')
    a("--throughput", metavar="THROUGHPUT", type=float,
      help="REQUIRED: throttle maximum message throughput to *approximately* THROUGHPUT messages/sec. "
      "Set this to -1 to disable throttling.")
    a("--producer-props", metavar="PROP-NAME=PROP-VALUE", nargs="+", default=[],
      help="kafka producer related configuration properties like bootstrap.servers,client.id etc.")
    a("--producer.config", dest="producer_config", metavar="CONFIG-FILE", help="producer config properties file.")
    a("--bootstrap-server", metavar="BOOTSTRAP-SERVERS", help="The server(s) to connect to.")
    a("--print-metrics", action="store_true", help="print out metrics at the end of the test.")
    a("--transactional-id", metavar="TRANSACTIONAL-ID",
      help="The transactional id to use. This config takes precedence over the transactional.id specified via "
      "--producer.config or --producer-props. Note that if the transactional id is not specified while "
      "--transaction-duration-ms is provided, the default value for the transactional id will be "
      "performance-producer-default-transactional-id.")
    a("--transaction-duration-ms", metavar="TRANSACTION-DURATION", type=int,
      help="The max age of each transaction. The commitTransaction will be called after this time has elapsed. "
      "The value should be greater than 0. If the transactional id is specified via --producer-props, "
      "--producer.config, or --transactional-id but --transaction-duration-ms is not specified, "
      "the default value will be 3000.")
    a("--client", choices=CLIENTS, default="samsa",
      help="The client library to drive: samsa (default), confluent (confluent-kafka), kafka-python or aiokafka.")
    return p


class Stats:
    """Kafka's ProducerPerformance.Stats: windows every five seconds, totals and percentiles.

    :meth:`record` runs once per record in a client's delivery path, so it only keeps the
    latency; sums and maxima are taken when a window is printed."""

    def __init__(self, count: int, out: Callable[[str], None] = print):
        self.start = self.window_start = time.monotonic()
        self.window_end = self.start + REPORT_S
        self.client_metrics: dict | None = None  # Samsa's producer's metrics(), for --print-metrics
        self.latencies = array("d")
        self.bytes = 0
        self.window_first = self.window_bytes = 0  # where the window starts in latencies, and its bytes before
        self.errors = 0
        self.out = out

    @property
    def count(self) -> int:
        return len(self.latencies)

    def record(self, sent_at: float, size: int, error: Exception | None) -> None:
        now = time.monotonic()
        if error is not None:
            self.errors += 1
            if self.errors <= 5:
                print(f"Error when sending message: {error_message(error)}", file=sys.stderr)
            return
        self.latencies.append((now - sent_at) * 1000)
        self.bytes += size
        if now >= self.window_end:
            self.print_window(now)

    def print_window(self, now: float) -> None:
        elapsed = max(now - self.window_start, 1e-9)
        window = self.latencies[self.window_first:]
        n = len(window)
        size = self.bytes - self.window_bytes
        self.out(f"{n} records sent, {n / elapsed:.1f} records/sec ({size / elapsed / MB:.2f} MB/sec), "
                 f"{sum(window) / max(n, 1):.1f} ms avg latency, {max(window, default=0.0):.1f} ms max latency.")
        self.window_start, self.window_end = now, now + REPORT_S
        self.window_first, self.window_bytes = len(self.latencies), self.bytes

    def print_total(self) -> None:
        elapsed = max(time.monotonic() - self.start, 1e-9)
        ordered = sorted(self.latencies)
        count = len(ordered)

        def pct(p: float) -> int:
            return int(ordered[min(int(p * count), count - 1)]) if ordered else 0
        self.out(f"{count} records sent, {count / elapsed:f} records/sec ({self.bytes / elapsed / MB:.2f} "
                 f"MB/sec), {sum(ordered) / max(count, 1):.2f} ms avg latency, {max(ordered, default=0.0):.2f} ms max "
                 f"latency, {pct(0.5)} ms 50th, {pct(0.95)} ms 95th, {pct(0.99)} ms 99th, {pct(0.999)} ms 99.9th.")


class Throttler:
    """Sleep when ahead of ``rate`` records per second (-1: never)."""

    def __init__(self, rate: float):
        self.rate = rate
        self.start = time.monotonic()

    def delay(self, sent: int) -> float:
        if self.rate <= 0:
            return 0.0
        return max(self.start + sent / self.rate - time.monotonic(), 0.0)


def payloads(opts: argparse.Namespace) -> Callable[[int], bytes]:
    if opts.payload_file:
        delimiter = opts.payload_delimiter.encode().decode("unicode_escape")
        try:
            text = Path(opts.payload_file).read_text()
        except OSError as e:
            raise UsageError(f"Cannot read payload file {opts.payload_file}: {e.strerror}") from None
        items = [p.encode() for p in text.split(delimiter) if p]
        if not items:
            raise UsageError(f"File {opts.payload_file} contains no payload")
        rng = random.Random()
        return lambda i: items[rng.randrange(len(items))]
    payload = bytes(random.randrange(65, 91) for _ in range(opts.record_size))
    return lambda i: payload


# ---------------------------------------------------------------------------- one loop per client

class Transactions:
    """Kafka's ProducerPerformance with transactions: one transaction per --transaction-duration-ms."""

    def __init__(self, producer: Any, duration_ms: int | None):
        self.producer, self.duration = producer, None if duration_ms is None else duration_ms / 1000
        self.started = 0.0
        if self.duration is not None:
            producer.init_transactions()
            self._begin()

    def _begin(self) -> None:
        self.producer.begin_transaction()
        self.started = time.monotonic()

    def tick(self) -> None:
        if self.duration is not None and time.monotonic() - self.started >= self.duration:
            self.producer.commit_transaction()
            self._begin()

    def finish(self) -> None:
        if self.duration is not None:
            self.producer.commit_transaction()


def run_samsa(props: dict[str, str], opts: argparse.Namespace, stats: Stats, payload: Callable[[int], bytes]) -> None:
    from samsa.client.producer import Producer
    with Producer(props) as producer:
        txn = Transactions(producer, opts.transaction_duration_ms)
        throttle = Throttler(opts.throughput)
        for i in range(opts.num_records):
            txn.tick()
            value = payload(i)
            sent = time.monotonic()
            producer.send(opts.topic, value, on_delivery=lambda m, e, s=sent, n=len(value): stats.record(s, n, e))
            wait = throttle.delay(i + 1)
            if wait:
                time.sleep(wait)
        producer.flush()
        txn.finish()
        stats.client_metrics = producer.metrics()


def run_confluent(props: dict[str, str], opts: argparse.Namespace, stats: Stats,
                  payload: Callable[[int], bytes]) -> None:
    from confluent_kafka import Producer
    producer = Producer(props)
    txn = Transactions(producer, opts.transaction_duration_ms)
    throttle = Throttler(opts.throughput)
    for i in range(opts.num_records):
        txn.tick()
        value = payload(i)
        sent = time.monotonic()
        while True:
            try:
                producer.produce(opts.topic, value,
                                 on_delivery=lambda e, m, s=sent, n=len(value): stats.record(s, n, e))
                break
            except BufferError:
                producer.poll(0.005)
        producer.poll(0)
        wait = throttle.delay(i + 1)
        if wait:
            producer.poll(wait)
    producer.flush()
    txn.finish()


def python_client_config(props: dict[str, str]) -> dict[str, Any]:
    """Dotted Kafka keys as kafka-python/aiokafka keyword arguments (numbers as ints)."""
    out: dict[str, Any] = {}
    for k, v in props.items():
        value: Any = {"true": True, "false": False}.get(v.lower(), v)
        if isinstance(value, str) and value.lstrip("-").isdigit():
            value = int(value)
        out[k.replace(".", "_")] = value
    if str(out.get("acks")) == "-1":
        out["acks"] = "all"
    return out


def run_kafka_python(props: dict[str, str], opts: argparse.Namespace, stats: Stats,
                     payload: Callable[[int], bytes]) -> None:
    from kafka import KafkaProducer
    producer = KafkaProducer(**python_client_config(props))
    throttle = Throttler(opts.throughput)
    try:
        for i in range(opts.num_records):
            value = payload(i)
            sent = time.monotonic()
            fut = producer.send(opts.topic, value)
            fut.add_callback(lambda m, s=sent, n=len(value): stats.record(s, n, None))
            fut.add_errback(lambda e, s=sent, n=len(value): stats.record(s, n, e))
            wait = throttle.delay(i + 1)
            if wait:
                time.sleep(wait)
        producer.flush()
    finally:
        producer.close()


def run_aiokafka(props: dict[str, str], opts: argparse.Namespace, stats: Stats,
                 payload: Callable[[int], bytes]) -> None:
    from aiokafka import AIOKafkaProducer

    async def main() -> None:
        config = python_client_config(props)
        config.pop("client_id", None)
        producer = AIOKafkaProducer(**config)
        await producer.start()
        throttle = Throttler(opts.throughput)
        try:
            for i in range(opts.num_records):
                value = payload(i)
                sent = time.monotonic()
                fut = await producer.send(opts.topic, value)
                fut.add_done_callback(lambda f, s=sent, n=len(value): stats.record(
                    s, n, None if f.cancelled() else f.exception()))
                await asyncio.sleep(throttle.delay(i + 1))
            await producer.flush()
        finally:
            await producer.stop()
    asyncio.run(main())


RUNNERS = {"samsa": run_samsa, "confluent": run_confluent, "kafka-python": run_kafka_python,
           "aiokafka": run_aiokafka}


def producer_props(opts: argparse.Namespace) -> dict[str, str]:
    props: dict[str, str] = {}
    if opts.producer_config:
        props.update(read_properties(opts.producer_config, "producer config file "))
    for item in opts.producer_props:
        key, sep, value = item.partition("=")
        if not sep:
            raise UsageError(f"Invalid property: {item}")
        props[key] = value
    if opts.bootstrap_server:
        props["bootstrap.servers"] = opts.bootstrap_server
    if "bootstrap.servers" not in props:
        raise UsageError("Either --bootstrap-server or bootstrap.servers in --producer-props/--producer.config "
                         "must be set")
    props.setdefault("client.id", "perf-producer-client")
    return props


def main(argv: list[str] | None = None) -> int:
    return run_tool(argv, build_parser(), _tool, description=DESCRIPTION,
                    failures=[((errors.KafkaError, ConfigError, ValueError, TypeError), "ERROR {}")])


def _tool(opts: argparse.Namespace) -> int:
    for flag in ("topic", "num_records", "throughput"):
        if getattr(opts, flag) is None:
            raise UsageError(f"argument --{flag.replace('_', '-')} is required")
    if (opts.record_size is None) == (opts.payload_file is None):
        raise UsageError("Exactly one of --record-size or --payload-file must be specified")
    props = producer_props(opts)
    if opts.transaction_duration_ms is not None and opts.transaction_duration_ms <= 0:
        raise UsageError("--transaction-duration-ms should be greater than zero")
    if opts.transactional_id:
        props["transactional.id"] = opts.transactional_id
    elif opts.transaction_duration_ms is not None:
        props.setdefault("transactional.id", "performance-producer-default-transactional-id")
    if "transactional.id" in props:
        if opts.transaction_duration_ms is None:
            opts.transaction_duration_ms = 3000
        if opts.client not in ("samsa", "confluent"):
            raise UsageError(f"--transactional-id: the {opts.client} client is driven without transactions here")
    payload = payloads(opts)
    stats = Stats(opts.num_records, lambda line: print(line, flush=True))
    try:
        RUNNERS[opts.client](props, opts, stats, payload)
    except ImportError as e:
        print(f"The {opts.client} client is not installed: {e}", file=sys.stderr)
        return 1
    stats.print_total()
    if opts.print_metrics:
        if stats.client_metrics is not None:
            print(format_metrics(stats.client_metrics))
        else:
            print(f"(--print-metrics: the metrics of the {opts.client} client are not read by this tool)",
                  file=sys.stderr)
    return 1 if stats.errors else 0


if __name__ == "__main__":
    sys.exit(main())
