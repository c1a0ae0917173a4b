"""``samsa consumer-perf-test``: kafka-consumer-perf-test.sh with Kafka's flags and output.

    samsa consumer-perf-test --bootstrap-server localhost:9092 --topic perf --messages 300000

prints, as Kafka's ConsumerPerformance does::

    start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec
    2026-11-22 10:00:00:000, 2026-11-22 10:00:01:000, 28.6102, 28.6102, 300000, 300000.0000, 120, 880, 32.5116, 340909.0909

The clock starts once the consumer is made and stops after the last poll; the group
join (from the first revocation to the assignment) is ``rebalance.time.ms``, the rest is
``fetch.time.ms``. Bytes are keys plus values. ``--client samsa|confluent|kafka-python|
aiokafka`` drives another client through the same loop, so that they compare in one run.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from samsa.cli.common import Parser, UsageError, error_message, read_properties, run_tool
from samsa.client.metrics import format_metrics
from samsa.protocol import errors

DESCRIPTION = "This tool is used to verify the consumer performance."
CLIENTS = ("samsa", "confluent", "kafka-python", "aiokafka")
HEADER = ("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, "
          "fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")
DETAILED_HEADER = ("time, threadId, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, "
                   "fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")
MB = 1024 * 1024
POLL_MS = 100


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="samsa consumer-perf-test", description=DESCRIPTION)
    a = p.add_argument
    a("--bootstrap-server", "--broker-list", dest="bootstrap_server", metavar="<String: server to connect to>",
      help="REQUIRED: The server(s) to connect to.")
    a("--topic", metavar="<String: topic>", help="REQUIRED: The topic to consume from.")
    a("--messages", metavar="<Long: count>", type=int, help="REQUIRED: The number of messages to send or consume")
    a("--group", metavar="<String: gid>", help="The group id to consume on. (default: perf-consumer-NNNNN)")
    a("--fetch-size", metavar="<Integer: size>", type=int, default=1048576,
      help="The amount of data to fetch in a single request. (default: 1048576)")
    a("--from-latest", action="store_true",
      help="If the consumer does not already have an established offset to consume from, start with the latest "
      "message present in the log rather than the earliest message.")
    a("--socket-buffer-size", metavar="<Integer: size>", type=int, default=2097152,
      help="The size of the tcp RECV size. (default: 2097152)")
    a("--consumer.config", dest="consumer_config", metavar="<String: config file>",
      help="Consumer config properties file.")
    a("--print-metrics", action="store_true", help="Print out the metrics.")
    a("--show-detailed-stats", action="store_true",
      help="If set, stats are reported for each reporting interval as configured by reporting-interval")
    a("--reporting-interval", metavar="<Integer: interval_ms>", type=int, default=5000,
      help="Interval in milliseconds at which to print progress info. (default: 5000)")
    a("--date-format", metavar="<String: date format>", default="yyyy-MM-dd HH:mm:ss:SSS",
      help="The date format to use for formatting the time field. (default: yyyy-MM-dd HH:mm:ss:SSS)")
    a("--hide-header", action="store_true", help="If set, skips printing the header for the stats")
    a("--timeout", metavar="<Long: milliseconds>", type=int, default=10000,
      help="The maximum allowed time in milliseconds between returned records. (default: 10000)")
    a("--threads", type=int, help=argparse.SUPPRESS)
    a("--num-fetch-threads", type=int, help=argparse.SUPPRESS)
    a("--client", choices=CLIENTS, default="samsa",
      help="The client library to drive: samsa (default), confluent (confluent-kafka), kafka-python or aiokafka.")
    return p


def java_date(fmt: str) -> Callable[[float], str]:
    """A formatter for Java SimpleDateFormat patterns of the usual letters (SSS: milliseconds)."""
    tokens = [("yyyy", "%Y"), ("yy", "%y"), ("MM", "%m"), ("dd", "%d"), ("HH", "%H"), ("mm", "%M"), ("ss", "%S")]
    parts = []
    for part in fmt.split("SSS"):
        for java, py in tokens:
            part = part.replace(java, py)
        parts.append(part)

    def render(t: float) -> str:
        local = time.localtime(t)
        return f"{int(t * 1000) % 1000:03d}".join(time.strftime(p, local) if p else "" for p in parts)
    return render


@dataclass
class Stats:
    """What the poll loop counts, as Kafka's ConsumerPerformance counts it."""

    opts: argparse.Namespace
    date: Callable[[float], str]
    messages: int = 0
    bytes: int = 0
    join_ms: float = 0.0
    join_round_ms: float = 0.0
    join_start: float = field(default_factory=time.time)
    last_report: float = 0.0
    last_messages: int = 0
    last_bytes: int = 0
    client_metrics: dict | None = None  # Samsa's consumer's metrics(), for --print-metrics

    def revoked(self, *_: Any) -> None:
        self.join_start = time.time()

    def assigned(self, *_: Any) -> None:
        elapsed = (time.time() - self.join_start) * 1000
        self.join_ms += elapsed
        self.join_round_ms += elapsed

    def add(self, messages: int, size: int, now: float) -> None:
        """Count a poll's records (``size``: their keys and values in bytes)."""
        self.messages += messages
        self.bytes += size
        self.report(now)

    def report(self, now: float) -> None:
        if (now - self.last_report) * 1000 < self.opts.reporting_interval:
            return
        if self.opts.show_detailed_stats:
            elapsed_ms = (now - self.last_report) * 1000
            fetch_ms = elapsed_ms - self.join_round_ms
            mb, interval_mb = self.bytes / MB, (self.bytes - self.last_bytes) / MB
            interval_n = self.messages - self.last_messages
            line = (f"{self.date(now)}, 0, {mb:.4f}, {1000 * interval_mb / elapsed_ms if elapsed_ms else 0:.4f}, "
                    f"{self.messages}, {1000 * interval_n / elapsed_ms if elapsed_ms else 0:.4f}")
            if fetch_ms <= 0:
                line += f", {int(self.join_round_ms)}, {int(fetch_ms)}, {0.0:.4f}, {0.0:.4f}"
            else:
                line += (f", {int(self.join_round_ms)}, {int(fetch_ms)}, {1000 * interval_mb / fetch_ms:.4f}, "
                         f"{1000 * interval_n / fetch_ms:.4f}")
            print(line, flush=True)
        self.join_round_ms = 0.0
        self.last_report = now
        self.last_messages = self.messages
        self.last_bytes = self.bytes

    def go_on(self, now: float, last_consumed: float) -> bool:
        return self.messages < self.opts.messages and (now - last_consumed) * 1000 <= self.opts.timeout


# ---------------------------------------------------------------------------- one loop per client

def run_samsa(props: dict[str, str], opts: argparse.Namespace, stats: Stats) -> None:
    from samsa.client.consumer import Consumer

    class Listener:
        def on_partitions_revoked(self, partitions: Any) -> None:
            stats.revoked()

        def on_partitions_assigned(self, partitions: Any) -> None:
            stats.assigned()

    with Consumer(props) as consumer:
        consumer.subscribe([opts.topic], listener=Listener())
        now = last = stats.last_report = time.time()
        while stats.go_on(now, last):
            records = consumer.poll(POLL_MS / 1000)
            now = time.time()
            if records:
                last = now
                size = 0
                for r in records:
                    if r.key is not None:
                        size += len(r.key)
                    if r.value is not None:
                        size += len(r.value)
                stats.add(len(records), size, now)
        stats.client_metrics = consumer.metrics()


def run_confluent(props: dict[str, str], opts: argparse.Namespace, stats: Stats) -> None:
    import confluent_kafka

    conf = {k: v for k, v in props.items() if k not in ("receive.buffer.bytes", "key.deserializer",
                                                         "value.deserializer")}
    conf["socket.receive.buffer.bytes"] = props.get("receive.buffer.bytes", "0")
    consumer = confluent_kafka.Consumer(conf)
    try:
        consumer.subscribe([opts.topic], on_assign=lambda c, ps: stats.assigned(),
                           on_revoke=lambda c, ps: stats.revoked())
        now = last = stats.last_report = time.time()
        while stats.go_on(now, last):
            messages = consumer.consume(500, POLL_MS / 1000)
            now = time.time()
            if messages:
                last = now
                size = count = 0
                for m in messages:
                    if m.error() is None:
                        count += 1
                        if m.key() is not None:
                            size += len(m.key())
                        if m.value() is not None:
                            size += len(m.value())
                stats.add(count, size, now)
    finally:
        consumer.close()


def _snake(props: dict[str, str]) -> dict[str, Any]:
    ints = {"max.partition.fetch.bytes", "receive.buffer.bytes", "max.poll.records", "fetch.max.wait.ms",
            "fetch.min.bytes", "fetch.max.bytes", "session.timeout.ms", "heartbeat.interval.ms"}
    out: dict[str, Any] = {}
    for k, v in props.items():
        if k in ("key.deserializer", "value.deserializer"):
            continue
        out[k.replace(".", "_")] = int(v) if k in ints else ({"true": True, "false": False}.get(v, v))
    out["bootstrap_servers"] = props["bootstrap.servers"]
    return out


def run_kafka_python(props: dict[str, str], opts: argparse.Namespace, stats: Stats) -> None:
    import kafka

    class Listener(kafka.ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked: Any) -> None:
            stats.revoked()

        def on_partitions_assigned(self, assigned: Any) -> None:
            stats.assigned()

    kw = _snake(props)
    kw.pop("receive_buffer_bytes", None)
    consumer = kafka.KafkaConsumer(**kw)
    try:
        consumer.subscribe([opts.topic], listener=Listener())
        now = last = stats.last_report = time.time()
        while stats.go_on(now, last):
            batches = consumer.poll(timeout_ms=POLL_MS)
            now = time.time()
            if batches:
                last = now
                size = count = 0
                for records in batches.values():
                    count += len(records)
                    for r in records:
                        if r.key is not None:
                            size += len(r.key)
                        if r.value is not None:
                            size += len(r.value)
                stats.add(count, size, now)
    finally:
        consumer.close()


def run_aiokafka(props: dict[str, str], opts: argparse.Namespace, stats: Stats) -> None:
    import aiokafka
    from aiokafka.abc import ConsumerRebalanceListener

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked: Any) -> None:
            stats.revoked()

        def on_partitions_assigned(self, assigned: Any) -> None:
            stats.assigned()

    async def main() -> None:
        kw = _snake(props)
        kw.pop("receive_buffer_bytes", None)
        consumer = aiokafka.AIOKafkaConsumer(**kw)
        await consumer.start()
        try:
            consumer.subscribe([opts.topic], listener=Listener())
            now = last = stats.last_report = time.time()
            while stats.go_on(now, last):
                batches = await consumer.getmany(timeout_ms=POLL_MS)
                now = time.time()
                if batches:
                    last = now
                    size = count = 0
                    for records in batches.values():
                        count += len(records)
                        for r in records:
                            if r.key is not None:
                                size += len(r.key)
                            if r.value is not None:
                                size += len(r.value)
                    stats.add(count, size, now)
        finally:
            await consumer.stop()
    asyncio.run(main())


RUNNERS = {"samsa": run_samsa, "confluent": run_confluent, "kafka-python": run_kafka_python,
           "aiokafka": run_aiokafka}


# ---------------------------------------------------------------------------- main

def consumer_props(opts: argparse.Namespace) -> dict[str, str]:
    props: dict[str, str] = {}
    if opts.consumer_config:
        props.update(read_properties(opts.consumer_config, "consumer config file "))
    props["bootstrap.servers"] = opts.bootstrap_server
    props["group.id"] = opts.group or props.get("group.id") or f"perf-consumer-{random.randrange(100000)}"
    props["receive.buffer.bytes"] = str(opts.socket_buffer_size)
    props["max.partition.fetch.bytes"] = str(opts.fetch_size)
    props["auto.offset.reset"] = "latest" if opts.from_latest else "earliest"
    props["check.crcs"] = "false"
    props.setdefault("client.id", "perf-consumer-client")
    return props


def check_args(opts: argparse.Namespace) -> None:
    for flag in ("bootstrap_server", "topic", "messages"):
        if getattr(opts, flag) is None:
            raise UsageError(f"Missing required argument \"[{flag.replace('_', '-')}]\"")
    if opts.messages <= 0:
        raise UsageError("--messages must be positive")


def main(argv: list[str] | None = None) -> int:
    return run_tool(argv, build_parser(), _tool, description=DESCRIPTION)


def _tool(opts: argparse.Namespace) -> int:
    check_args(opts)
    props = consumer_props(opts)
    date = java_date(opts.date_format)
    if not opts.hide_header:
        print(DETAILED_HEADER if opts.show_detailed_stats else HEADER, flush=True)
    stats = Stats(opts, date)
    start = time.time()
    try:
        RUNNERS[opts.client](props, opts, stats)
    except ImportError as e:
        print(f"The {opts.client} client is not installed: {e}", file=sys.stderr)
        return 1
    except (errors.KafkaError, ValueError, RuntimeError, OSError) as e:
        print(f"Error while consuming: {error_message(e)}", file=sys.stderr)
        return 1
    end = time.time()
    if stats.messages < opts.messages:
        print(f"WARNING: Exiting before consuming the expected number of messages: timeout ({opts.timeout} ms) "
              f"exceeded. You can use the --timeout option to increase the timeout.")
    if not opts.show_detailed_stats:
        elapsed = end - start
        fetch_ms = elapsed * 1000 - stats.join_ms
        mb = stats.bytes / MB
        fetch_s = fetch_ms / 1000
        print(f"{date(start)}, {date(end)}, {mb:.4f}, {mb / elapsed:.4f}, {stats.messages}, "
              f"{stats.messages / elapsed:.4f}, {int(stats.join_ms)}, {int(fetch_ms)}, "
              f"{mb / fetch_s if fetch_s > 0 else 0.0:.4f}, {stats.messages / fetch_s if fetch_s > 0 else 0.0:.4f}",
              flush=True)
    if opts.print_metrics:
        if stats.client_metrics is not None:
            print(format_metrics(stats.client_metrics))
        else:
            print(f"(--print-metrics: the metrics of the {opts.client} client are not read by this tool)",
                  file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
