"""Offsets on the driver: which partitions a query reads, where a batch starts and ends.

A source offset is Spark's Kafka offset JSON, ``{"topic": {"0": 23, "1": 7}}``: the next
offset to read in each partition. Spark writes it to the query's checkpoint, which is
how a restarted query resumes exactly where it stopped.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

from samsa.client.admin import Admin
from samsa.client.connection import KafkaConnectionError, KafkaTimeoutError
from samsa.client.types import TopicPartition
from samsa.protocol import errors
from samsa.spark.options import (EARLIEST, LATEST, Earliest, GlobalTimestamp, Latest, OffsetLimit, SourceOptions,
                                 SpecificOffsets, SpecificTimestamps)

log = logging.getLogger("samsa.spark")

TP = tuple[str, int]

FAIL_HINT = ("Some data may have been lost because they are not available in Samsa any more; either the data was "
             "aged out by retention or the topic may have been deleted before all the data in the topic was "
             "processed. If you don't want your streaming query to fail on such cases, set the source option "
             "\"failOnDataLoss\" to \"false\".")
SKIP_HINT = ("Some data may have been lost because they are not available in Samsa any more; either the data was "
             "aged out by retention or the topic may have been deleted before all the data in the topic was "
             "processed. If you want your streaming query to fail on such cases, set the source option "
             "\"failOnDataLoss\" to \"true\".")


class DataLossError(RuntimeError):
    """Records a query should have read are gone (failOnDataLoss=true)."""


class BrokerUnreachableError(RuntimeError):
    pass


def report_data_loss(fail: bool, message: str) -> None:
    if fail:
        raise DataLossError(f"{message}. {FAIL_HINT}")
    log.warning("%s. %s", message, SKIP_HINT)


def to_json(offsets: dict[TP, int]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = offset
    return out


def from_json(offsets: dict) -> dict[TP, int]:
    return {(topic, int(p)): int(o) for topic, parts in (offsets or {}).items() for p, o in parts.items()}


@dataclass
class OffsetRange(InputPartition):
    """One Spark task's share: offsets ``[start, end)`` of one partition."""

    topic: str
    partition: int
    start: int
    end: int


class OffsetReader:
    """The driver's view of the brokers, through one Admin client opened on first use."""

    def __init__(self, opts: SourceOptions):
        self.opts = opts
        self._admin: Admin | None = None

    def _call(self, fn, *args):
        try:
            if self._admin is None:
                self._admin = Admin(self.opts.admin_config())
            return fn(self._admin, *args)
        except (KafkaTimeoutError, KafkaConnectionError, OSError) as e:
            self.close()
            raise BrokerUnreachableError(
                f"Cannot reach Samsa at kafka.bootstrap.servers={self.opts.bootstrap_servers}: {e}") from None

    def close(self) -> None:
        if self._admin is not None:
            admin, self._admin = self._admin, None
            try:
                admin.close()
            except Exception:  # noqa: BLE001 - closing after a failure
                pass

    def partitions(self) -> list[TP]:
        """The partitions the subscription names now (assign: exactly those given)."""
        if self.opts.strategy == "assign":
            return sorted(set(self.opts.assigned))

        def look(admin: Admin) -> list[TP]:
            names = [t for t in admin.list_topics() if self.opts.matches(t)]
            if not names:
                return []
            try:
                described = admin.describe_topics(names)
            except errors.UnknownTopicOrPartitionError:  # deleted between the two calls: next time
                return []
            return sorted((name, p.partition) for name, d in described.items() for p in d.partitions)
        return self._call(look)

    def _list(self, specs: dict[TP, int]) -> dict[TP, int]:
        if not specs:
            return {}
        # read_committed plans up to the last stable offset: its consumers cannot read past it
        isolation = dict(self.opts.client).get("isolation.level", "read_uncommitted")
        result = self._call(lambda admin: admin.list_offsets({TopicPartition(*tp): s for tp, s in specs.items()},
                                                             isolation))
        return {(tp.topic, tp.partition): info.offset for tp, info in result.items()}

    def earliest(self, tps: list[TP]) -> dict[TP, int]:
        return self._list({tp: EARLIEST for tp in tps})

    def latest(self, tps: list[TP]) -> dict[TP, int]:
        return self._list({tp: LATEST for tp in tps})

    def resolve(self, limit: OffsetLimit, tps: list[TP], *, is_start: bool) -> dict[TP, int]:
        """Concrete offsets for ``tps`` from a starting or ending option."""
        if isinstance(limit, Earliest):
            return self.earliest(tps)
        if isinstance(limit, Latest):
            return self.latest(tps)
        if isinstance(limit, SpecificOffsets):
            missing = set(tps) - set(limit.offsets)
            if self.opts.strategy != "subscribepattern" and missing:
                names = ", ".join(f"{t}-{p}" for t, p in sorted(missing))
                what = "startingOffsets" if is_start else "endingOffsets"
                raise ValueError(f"If {what} contains specific offsets, you must specify all TopicPartitions: "
                                 f"missing [{names}]")
            wanted = {tp: limit.offsets.get(tp, EARLIEST if is_start else LATEST) for tp in tps}
            earliest = self.earliest([tp for tp, o in wanted.items() if o == EARLIEST])
            latest = self.latest([tp for tp, o in wanted.items() if o == LATEST])
            return {tp: earliest.get(tp, latest.get(tp, o)) for tp, o in wanted.items()}
        if isinstance(limit, GlobalTimestamp):
            return self._by_time({tp: limit.timestamp for tp in tps}, limit.on_no_match)
        assert isinstance(limit, SpecificTimestamps)
        missing = set(tps) - set(limit.timestamps)
        if missing:
            names = ", ".join(f"{t}-{p}" for t, p in sorted(missing))
            raise ValueError(f"No timestamp given for partitions [{names}]")
        return self._by_time({tp: limit.timestamps[tp] for tp in tps}, limit.on_no_match)

    def _by_time(self, stamps: dict[TP, int], on_no_match: str) -> dict[TP, int]:
        found = self._list(stamps)
        none = [tp for tp, o in found.items() if o < 0]
        if none and on_no_match == "error":
            names = ", ".join(f"{t}-{p}" for t, p in sorted(none))
            raise ValueError(f"No offset matched the timestamp for partitions [{names}]: no record is that "
                             "recent (set startingOffsetsByTimestampStrategy to 'latest' to start at the end)")
        latest = self.latest(none)
        return {tp: latest.get(tp, o) if o < 0 else o for tp, o in found.items()}


def rate_limit(begin: dict[TP, int], end: dict[TP, int], max_rows: int) -> dict[TP, int]:
    """At most about ``max_rows`` records, shared among partitions in proportion to their lag."""
    sizes = {tp: max(0, end[tp] - begin.get(tp, end[tp])) for tp in end}
    total = sum(sizes.values())
    if total <= max_rows:
        return dict(end)
    out = {}
    for tp, off in end.items():
        share = max_rows * sizes[tp] / total
        take = math.ceil(share) if share < 1 else math.floor(share)
        out[tp] = min(off, begin.get(tp, off) + take)
    return out


def plan_ranges(ranges: list[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """Spark tasks for the ranges: one per partition, split further to reach ``minPartitions``."""
    ranges = [r for r in ranges if r.end > r.start]
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.end - r.start for r in ranges)
    out: list[OffsetRange] = []
    for r in ranges:
        size = r.end - r.start
        parts = max(1, min(size, math.ceil(size / total * min_partitions)))
        step = size / parts
        bounds = [r.start + round(i * step) for i in range(parts)] + [r.end]
        out += [OffsetRange(r.topic, r.partition, a, b) for a, b in zip(bounds, bounds[1:]) if b > a]
    return out


def batch_ranges(start: dict[TP, int], end: dict[TP, int], new_start: dict[TP, int],
                 fail_on_data_loss: bool) -> list[OffsetRange]:
    """The ranges between two source offsets; partitions gone or rewound are data loss."""
    for tp, offset in new_start.items():
        if offset != 0:
            report_data_loss(fail_on_data_loss, f"Added partition {tp[0]}-{tp[1]} starts from {offset} instead of 0")
    gone = sorted(set(start) - set(end))
    if gone:
        names = ", ".join(f"{t}-{p}" for t, p in gone)
        report_data_loss(fail_on_data_loss, f"[{names}] are gone")
    out = []
    for tp, until in sorted(end.items()):
        begin = start[tp] if tp in start else new_start.get(tp, 0)
        if until < begin:
            report_data_loss(fail_on_data_loss,
                             f"Partition {tp[0]}-{tp[1]}'s offset was changed from {begin} to {until}")
            continue
        out.append(OffsetRange(tp[0], tp[1], begin, until))
    return out
