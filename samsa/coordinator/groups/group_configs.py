"""Group configs (KIP-848, KIP-932): per-group overrides of the broker's ``group.consumer.*`` and
``group.share.*`` and ``group.streams.*`` keys (KIP-1071), and the share groups' own keys, set with IncrementalAlterConfigs on a
GROUP resource and read by the coordinator and the share partitions.

One table, :data:`GROUP_CONFIGS`: each group key, the broker key whose value it overrides
(its synonym in DescribeConfigs) and the broker keys bounding it; a key with no broker key
(``share.auto.offset.reset``, ``share.isolation.level``) has its type, default and allowed
values in :data:`OWN_DEFAULTS`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from samsa.protocol import errors

#: group key -> (broker default key, broker minimum key, broker maximum key)
GROUP_CONFIGS: dict[str, tuple[str | None, str | None, str | None]] = {
    "consumer.session.timeout.ms": ("group.consumer.session.timeout.ms", "group.consumer.min.session.timeout.ms",
                                    "group.consumer.max.session.timeout.ms"),
    "consumer.heartbeat.interval.ms": ("group.consumer.heartbeat.interval.ms",
                                       "group.consumer.min.heartbeat.interval.ms",
                                       "group.consumer.max.heartbeat.interval.ms"),
    "share.session.timeout.ms": ("group.share.session.timeout.ms", "group.share.min.session.timeout.ms",
                                 "group.share.max.session.timeout.ms"),
    "share.heartbeat.interval.ms": ("group.share.heartbeat.interval.ms", "group.share.min.heartbeat.interval.ms",
                                    "group.share.max.heartbeat.interval.ms"),
    "share.record.lock.duration.ms": ("group.share.record.lock.duration.ms", "group.share.min.record.lock.duration.ms",
                                      "group.share.max.record.lock.duration.ms"),
    "share.delivery.count.limit": ("group.share.delivery.count.limit", "group.share.min.delivery.count.limit",
                                   "group.share.max.delivery.count.limit"),
    "share.partition.max.record.locks": ("group.share.partition.max.record.locks",
                                         "group.share.min.partition.max.record.locks",
                                         "group.share.max.partition.max.record.locks"),
    "streams.session.timeout.ms": ("group.streams.session.timeout.ms", "group.streams.min.session.timeout.ms",
                                   "group.streams.max.session.timeout.ms"),
    "streams.heartbeat.interval.ms": ("group.streams.heartbeat.interval.ms", "group.streams.min.heartbeat.interval.ms",
                                      "group.streams.max.heartbeat.interval.ms"),
    "streams.num.standby.replicas": ("group.streams.num.standby.replicas", None, "group.streams.max.standby.replicas"),
    "streams.initial.rebalance.delay.ms": ("group.streams.initial.rebalance.delay.ms", None, None),
    "streams.assignment.interval.ms": ("group.streams.assignment.interval.ms",
                                       "group.streams.min.assignment.interval.ms",
                                       "group.streams.max.assignment.interval.ms"),
    "share.auto.offset.reset": (None, None, None),
    "share.isolation.level": (None, None, None),
}

#: Each numeric key's own lower bound (Kafka's GroupConfig definitions), checked before the broker's.
AT_LEAST: dict[str, int] = {"share.record.lock.duration.ms": 1000, "share.delivery.count.limit": 2,
                            "share.partition.max.record.locks": 100, "streams.num.standby.replicas": 0,
                            "streams.initial.rebalance.delay.ms": 0, "streams.assignment.interval.ms": 0}

#: The keys without a broker key: group key -> (type, default).
OWN_DEFAULTS: dict[str, tuple[str, str]] = {
    "share.auto.offset.reset": ("string", "latest"),
    "share.isolation.level": ("string", "read_uncommitted"),
}

_DURATION = re.compile(r"by_duration:P(?:\d+D)?(?:T(?:\d+H)?(?:\d+M)?(?:\d+(?:\.\d+)?S)?)?", re.IGNORECASE)


def _check_string(key: str, value: str) -> None:
    if key == "share.auto.offset.reset":
        if value.lower() in ("earliest", "latest") or (_DURATION.fullmatch(value) and value[13:] not in ("", "T")):
            return
        raise errors.InvalidConfigError(
            f"Invalid value {value} for configuration {key}: Invalid value `{value}` for configuration {key}. "
            "The value must be either 'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS>'.")
    if key == "share.isolation.level" and value not in ("read_committed", "read_uncommitted"):
        raise errors.InvalidConfigError(f"Invalid value {value} for configuration {key}: String must be one of: "
                                        "read_committed, read_uncommitted")


def default(key: str, broker: Callable[[str], Any]) -> Any:
    """A group key's value when the group does not set it."""
    broker_key = GROUP_CONFIGS[key][0]
    return broker(broker_key) if broker_key else OWN_DEFAULTS[key][1]


def validate(configs: dict[str, str], broker: Callable[[str], Any]) -> None:
    """Raise InvalidConfigError as Kafka words it for an unknown key or a value out of bounds."""
    for key, value in configs.items():
        spec = GROUP_CONFIGS.get(key)
        if spec is None:
            raise errors.InvalidConfigError(f"Unknown group config name: {key}")
        if key in OWN_DEFAULTS:
            _check_string(key, value)
            continue
        _, low_key, high_key = spec
        try:
            number = int(value)
        except (TypeError, ValueError):
            raise errors.InvalidConfigError(
                f"Invalid value {value} for configuration {key}: Not a number of type INT") from None
        at_least = AT_LEAST.get(key, 1)
        if number < at_least:
            raise errors.InvalidConfigError(
                f"Invalid value {value} for configuration {key}: Value must be at least {at_least}")
        low = broker(low_key) if low_key else None
        high = broker(high_key) if high_key else None
        if (low is not None and number < low) or (high is not None and number > high):
            if low is None:
                raise errors.InvalidConfigError(f"{key} must be less than or equal to {high}")
            if high is None:
                raise errors.InvalidConfigError(f"{key} must be greater than or equal to {low}")
            raise errors.InvalidConfigError(f"{key} must be in the range {low} to {high} inclusive.")
