"""Group configs (KIP-848): per-group overrides of the broker's ``group.consumer.*`` keys,
set with IncrementalAlterConfigs on a GROUP resource and read by the coordinator.

One table, :data:`GROUP_CONFIGS`: each group key, the broker key whose value it overrides
(its synonym in DescribeConfigs), and the broker keys bounding it. Share groups (KIP-932)
add their ``share.*`` keys here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from samsa.protocol import errors

#: group key -> (broker default key, broker minimum key, broker maximum key)
GROUP_CONFIGS: dict[str, tuple[str, str | None, str | None]] = {
    "consumer.session.timeout.ms": ("group.consumer.session.timeout.ms", "group.consumer.min.session.timeout.ms",
                                    "group.consumer.max.session.timeout.ms"),
    "consumer.heartbeat.interval.ms": ("group.consumer.heartbeat.interval.ms",
                                       "group.consumer.min.heartbeat.interval.ms",
                                       "group.consumer.max.heartbeat.interval.ms"),
}


def validate(configs: dict[str, str], broker: Callable[[str], Any]) -> None:
    """Raise InvalidConfigError as Kafka words it for an unknown key or a value out of bounds."""
    for key, value in configs.items():
        spec = GROUP_CONFIGS.get(key)
        if spec is None:
            raise errors.InvalidConfigError(f"Unknown group config name: {key}")
        _, low_key, high_key = spec
        try:
            number = int(value)
        except (TypeError, ValueError):
            raise errors.InvalidConfigError(
                f"Invalid value {value} for configuration {key}: Not a number of type INT") from None
        low = broker(low_key) if low_key else None
        high = broker(high_key) if high_key else None
        if (low is not None and number < low) or (high is not None and number > high):
            raise errors.InvalidConfigError(f"{key} must be in the range {low} to {high} inclusive.")
