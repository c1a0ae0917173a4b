"""``controller_mutation_rate`` (KIP-599) for CreateTopics, CreatePartitions and DeleteTopics.

Each created, added or deleted partition is one mutation, taken from the user's and client
id's token bucket. From the versions that know THROTTLING_QUOTA_EXCEEDED on (CreateTopics
v6, CreatePartitions v3, DeleteTopics v5) the quota is strict: once the bucket is below
zero, the request's remaining topics are refused with that error; older versions are served
and throttled instead. Either way the answer carries ``throttle_time_ms`` and the connection
is muted for it. Validate-only requests mutate nothing and are not counted.
"""

from __future__ import annotations

from typing import Any

from samsa.protocol import errors
from samsa.protocol.api_keys import ApiKey
from samsa.security.quotas import QuotaManager

STRICT_SINCE = {ApiKey.CREATE_TOPICS: 6, ApiKey.CREATE_PARTITIONS: 3, ApiKey.DELETE_TOPICS: 5}


class MutationQuota:
    """One request's view of its principal's and client id's mutation quota."""

    def __init__(self, ctx: Any):
        self.ctx = ctx
        self.user, self.client = ctx.connection.principal.name, ctx.header.client_id or ""
        quotas: QuotaManager | None = ctx.broker.quotas
        applies = quotas is not None and quotas.mutations(self.user, self.client) is not None
        self.quotas = quotas if applies else None
        self.strict = ctx.version >= STRICT_SINCE[ctx.header.api_key]
        self.throttle_ms = 0

    def check(self) -> None:
        """Strict versions: THROTTLING_QUOTA_EXCEEDED while the quota is spent (before mutating)."""
        if self.quotas is None or not self.strict:
            return
        ms = self.quotas.mutations(self.user, self.client) or 0
        if ms > 0:
            self.throttle_ms = max(self.throttle_ms, ms)
            raise errors.ThrottlingQuotaExceededError("The throttling quota has been exceeded.")

    def record(self, partitions: int) -> None:
        """Count what was mutated; older versions are throttled once it goes over the quota."""
        if self.quotas is None or partitions <= 0:
            return
        ms = self.quotas.mutations(self.user, self.client, partitions) or 0
        if not self.strict:
            self.throttle_ms = max(self.throttle_ms, ms)

    def respond(self, response: dict) -> dict:
        """The throttle time in the answer, and the connection muted for it (KIP-219)."""
        if self.throttle_ms > 0:
            response["throttle_time_ms"] = max(response.get("throttle_time_ms", 0), self.throttle_ms)
            self.ctx.connection.mute(self.throttle_ms)
        return response
