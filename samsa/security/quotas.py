"""Client quotas as Kafka's ClientQuotaManager applies them.

Quotas live in the metadata store as entity configs (``users/<u>``, ``clients/<id>``,
``users/<u>/clients/<id>``, ``<default>`` for either name). A request's user and client id
find their quota at the most specific entity that sets the key, in Kafka's order; the
rate is measured per matched entity (a default quota holds each user or client to it
separately) over ``quota.window.num`` samples of ``quota.window.size.seconds``. When the
measured rate exceeds the quota, the throttle time is how long the client must stay silent
for the rate to fall back to the quota (KIP-219: answered in ``throttle_time_ms`` and the
connection muted for that long).
"""

from __future__ import annotations

import time
from collections import deque

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
QUOTA_KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE, CONTROLLER_MUTATION_RATE)
DEFAULT = "<default>"

# (user level, client level) in Kafka's order of precedence: "name", DEFAULT or None (not part of the entity).
_PRECEDENCE = (("name", "name"), ("name", DEFAULT), ("name", None), (DEFAULT, "name"), (DEFAULT, DEFAULT),
               (DEFAULT, None), (None, "name"), (None, DEFAULT))


def entity_path(user: str | None, client: str | None) -> str:
    """``users/alice/clients/c1`` and the like (None: that part absent)."""
    if user is not None and client is not None:
        return f"users/{user}/clients/{client}"
    return f"users/{user}" if user is not None else f"clients/{client}"


def parse_entity_path(path: str) -> tuple[str | None, str | None]:
    parts = path.split("/")
    if len(parts) == 4 and parts[0] == "users" and parts[2] == "clients":
        return parts[1], parts[3]
    if len(parts) == 2 and parts[0] in ("users", "clients"):
        return (parts[1], None) if parts[0] == "users" else (None, parts[1])
    raise ValueError(f"not a quota entity: {path}")


class Rate:
    """A value per second over the last ``num`` samples of ``window_s`` seconds each."""

    __slots__ = ("window_s", "num", "samples")

    def __init__(self, window_s: float, num: int):
        self.window_s = window_s
        self.num = num
        self.samples: deque[list[float]] = deque()  # [start, total]

    def record(self, value: float, now: float) -> None:
        samples = self.samples
        if not samples or now - samples[-1][0] >= self.window_s:
            samples.append([now, 0.0])
        samples[-1][1] += value
        oldest = now - self.window_s * self.num
        while samples and samples[0][0] + self.window_s < oldest:
            samples.popleft()

    def throttle_ms(self, quota: float, now: float) -> int:
        """How long no more may be recorded for the rate to be back at ``quota``; 0 within it."""
        if not self.samples:
            return 0
        total = sum(s[1] for s in self.samples)
        # Kafka's Rate: a young measurement counts as ``num - 1`` full windows (bursts up to that).
        elapsed = max(now - self.samples[0][0], self.window_s * max(self.num - 1, 1))
        excess = total - quota * elapsed
        if excess <= 0:
            return 0
        return min(int(excess / quota * 1000), int(self.window_s * self.num * 1000))


class TokenBucket:
    """Kafka's TokenBucket (KIP-599), for ``controller_mutation_rate``: it starts full with
    ``quota * num * window_s`` tokens, refills at ``quota`` a second up to that burst, and each
    mutation takes one; below zero the quota is violated for ``-tokens / quota`` seconds."""

    __slots__ = ("tokens", "updated")

    def __init__(self) -> None:
        self.tokens: float | None = None  # full on first use
        self.updated = 0.0

    def refill(self, quota: float, burst: float, now: float) -> float:
        if self.tokens is None:
            self.tokens = burst
        else:
            self.tokens = min(burst, self.tokens + quota * (now - self.updated))
        self.updated = now
        return self.tokens

    def record(self, value: float, quota: float, burst: float, now: float) -> None:
        self.tokens = min(burst, self.refill(quota, burst, now) - value)

    def throttle_ms(self, quota: float, burst: float, now: float, cap_ms: int) -> int:
        """0 while tokens are left; else how long until the bucket is back at zero."""
        tokens = self.refill(quota, burst, now)
        if tokens >= 0:
            return 0
        return cap_ms if quota <= 0 else min(round(-tokens / quota * 1000), cap_ms)


class QuotaManager:
    """The configured quotas and each matched entity's measured rates."""

    def __init__(self, window_s: float = 1.0, num: int = 11, mutation_window_s: float = 1.0, mutation_num: int = 11):
        self.window_s = window_s
        self.num = num
        self.mutation_window_s = mutation_window_s  # controller.quota.window.*: the token bucket's burst
        self.mutation_num = mutation_num
        self.configs: dict[tuple[str | None, str | None], dict[str, float]] = {}
        self._resolved: dict[tuple[str, str, str], tuple[tuple, float] | None] = {}
        self._rates: dict[tuple, Rate] = {}
        self._buckets: dict[tuple, TokenBucket] = {}
        self.keys: frozenset[str] = frozenset()  # the quota keys set anywhere

    def load(self, entities: dict[str, dict[str, str]]) -> None:
        """From the metadata store's entity configs (SCRAM credentials and others are skipped)."""
        configs: dict[tuple[str | None, str | None], dict[str, float]] = {}
        for path, values in entities.items():
            quotas = {k: float(v) for k, v in values.items() if k in QUOTA_KEYS}
            if quotas:
                try:
                    configs[parse_entity_path(path)] = quotas
                except ValueError:
                    continue
        self.configs = configs
        self.keys = frozenset(k for q in configs.values() for k in q)
        self._resolved = {}

    @property
    def active(self) -> bool:
        return bool(self.configs)

    def quota(self, key: str, user: str, client: str) -> tuple[tuple, float] | None:
        """(the measured entity, the quota) for a user and client id, or None: unlimited."""
        cached = self._resolved.get((key, user, client), False)
        if cached is not False:
            return cached  # type: ignore[return-value]
        found = None
        for u_level, c_level in _PRECEDENCE:
            u = None if u_level is None else (user if u_level == "name" else DEFAULT)
            c = None if c_level is None else (client if c_level == "name" else DEFAULT)
            value = self.configs.get((u, c), {}).get(key)
            if value is not None:
                found = ((key, user if u is not None else None, client if c is not None else None), value)
                break
        self._resolved[(key, user, client)] = found
        return found

    def record(self, key: str, user: str, client: str, value: float, now: float | None = None) -> int:
        """Record ``value`` against the quota that applies; the throttle time in ms (0: within)."""
        if key not in self.keys:
            return 0
        q = self.quota(key, user, client)
        if q is None:
            return 0
        entity, limit = q
        now = time.monotonic() if now is None else now
        rate = self._rates.get(entity)
        if rate is None:
            rate = self._rates[entity] = Rate(self.window_s, self.num)
        rate.record(value, now)
        return rate.throttle_ms(limit, now) if limit > 0 else int(self.window_s * self.num * 1000)

    def mutations(self, user: str, client: str, count: float = 0, now: float | None = None) -> int | None:
        """``controller_mutation_rate``: record ``count`` partition mutations (0: only look) and
        return the throttle time in ms (0: within the quota), or None when no quota applies."""
        if CONTROLLER_MUTATION_RATE not in self.keys:
            return None
        q = self.quota(CONTROLLER_MUTATION_RATE, user, client)
        if q is None:
            return None
        entity, limit = q
        now = time.monotonic() if now is None else now
        bucket = self._buckets.get(entity)
        if bucket is None:
            bucket = self._buckets[entity] = TokenBucket()
        burst = limit * self.mutation_num * self.mutation_window_s
        if count:
            bucket.record(count, limit, burst, now)
        return bucket.throttle_ms(limit, burst, now, int(self.mutation_window_s * self.mutation_num * 1000))


class ConnectionQuotas:
    """``max.connections``, ``max.connections.per.ip`` and ``max.connections.per.ip.overrides``
    (``host:count,...``): whether one more connection from an address may be accepted."""

    def __init__(self, max_total: int, max_per_ip: int, overrides: str = ""):
        self.max_total = max_total
        self.max_per_ip = max_per_ip
        self.overrides: dict[str, int] = {}
        for item in (x.strip() for x in overrides.split(",")):
            if item:
                host, _, count = item.rpartition(":")
                if not host or not count.isdigit():
                    raise ValueError(f"max.connections.per.ip.overrides: {item!r} is not host:count")
                self.overrides[host] = int(count)
        self.total = 0
        self.per_ip: dict[str, int] = {}

    @property
    def unlimited(self) -> bool:
        return self.max_total >= 2**31 - 1 and self.max_per_ip >= 2**31 - 1 and not self.overrides

    def admit(self, ip: str) -> str | None:
        """None and counted, or why not (Kafka's wording)."""
        limit = self.overrides.get(ip, self.max_per_ip)
        if self.per_ip.get(ip, 0) >= limit:
            return f"Rejected connection from /{ip}, address already has the configured maximum of {limit} connections."
        if self.total >= self.max_total:
            return f"Rejected connection from /{ip}: the broker has the configured maximum of {self.max_total} " \
                   f"connections (max.connections)."
        self.per_ip[ip] = self.per_ip.get(ip, 0) + 1
        self.total += 1
        return None

    def release(self, ip: str) -> None:
        n = self.per_ip.get(ip, 0) - 1
        if n <= 0:
            self.per_ip.pop(ip, None)
        else:
            self.per_ip[ip] = n
        self.total = max(self.total - 1, 0)
