"""The differential harness: one scenario against Apache Kafka and against Samsa, compared.

A scenario is a function of a :class:`Side` (one broker: raw requests through Samsa's codec,
confluent-kafka clients) returning plain data. :func:`compare` runs it on both sides,
normalises what may legitimately differ (cluster and node ids, topic ids, hosts and ports,
throttle times, timestamps the broker picks) and asserts the rest is equal.
``SAMSA_DIFF_SIDE=samsa`` (or ``kafka``) runs one side alone and prints what it answered.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from typing import Any, Callable

from samsa.client.connection import BrokerConnection
from samsa.protocol.records import build_batch

SIDE_ENV = "SAMSA_DIFF_SIDE"

# Response fields whose values the broker picks freely: replaced by "*" before comparing.
VOLATILE = {"throttle_time_ms", "cluster_id", "host", "port", "topic_id", "log_append_time_ms",
            "member_id", "client_host", "controller_id", "leader_id", "node_id", "broker_id",
            "producer_id", "coordinator_epoch", "current_txn_start_offset", "last_timestamp",
            "transaction_start_time_ms", "session_id", "finalized_features_epoch",
            "usable_bytes", "total_bytes", "size", "offset_lag", "path", "log_dir",
            "log_start_offset_of_tiered" }


class Side:
    """One broker under test: ``name`` is "kafka" or "samsa"."""

    def __init__(self, name: str, bootstrap: str, security=None):
        self.name = name
        self.bootstrap = bootstrap
        host, port = bootstrap.rsplit(":", 1)
        self.host, self.port = host, int(port)
        self.security = security
        self.loop = asyncio.new_event_loop()
        self._conn: BrokerConnection | None = None

    def __repr__(self) -> str:
        return f"<Side {self.name} {self.bootstrap}>"

    def _run(self, coro):
        return self.loop.run_until_complete(coro)

    def connection(self) -> BrokerConnection:
        if self._conn is None or not self._conn.connected:
            self._conn = BrokerConnection(self.host, self.port, client_id="differential",
                                          request_timeout_ms=30000, security=self.security)
            self._run(self._conn.connect())
        return self._conn

    def call(self, api_key: int, body: dict, version: int | None = None, timeout_ms: int = 30000) -> dict:
        """One request (at ``version``, else the highest both speak) and its decoded response."""
        conn = self.connection()
        return self._run(conn.request(api_key, body, version, timeout_ms=timeout_ms))

    def fresh_call(self, api_key: int, body: dict, version: int | None = None) -> dict | str:
        """The request on a new connection; "closed" if the broker closes it instead of answering."""
        async def go():
            c = BrokerConnection(self.host, self.port, client_id="differential", security=self.security)
            await c.connect()
            try:
                return await c.request(api_key, body, version, timeout_ms=15000)
            except Exception as e:  # noqa: BLE001 - the broker closing the connection is the answer
                return f"closed: {type(e).__name__}"
            finally:
                c.close()
        return self._run(go())

    def versions(self, api_key: int) -> tuple[int, int] | None:
        return self.connection().api_versions.get(api_key)

    def produce(self, topic: str, records: list, partition: int = 0, acks: int = -1, version: int = 9,
                transactional_id: str | None = None, **batch_kw) -> dict:
        """One Produce of one batch of ``records`` ((key, value[, ts]) tuples)."""
        batch = build_batch(records, **batch_kw)
        return self.call(0, {"transactional_id": transactional_id, "acks": acks, "timeout_ms": 10000,
                             "topic_data": [{"name": topic, "partition_data": [{"index": partition,
                                                                                "records": batch}]}]},
                         version)

    def close(self) -> None:
        conn = self._conn
        if conn is not None:
            async def shut() -> None:
                conn.close()
                await conn.wait_closed()
            try:
                self._run(shut())
            except Exception:  # noqa: BLE001 - closing a connection the broker already closed
                pass
        self.loop.close()


def normalise(value: Any, volatile: set[str] = VOLATILE, keep: set[str] = frozenset()) -> Any:
    """``value`` with the fields the broker picks freely replaced by "*", bytes as hex."""
    if isinstance(value, dict):
        return {k: ("*" if (k in volatile and k not in keep and v not in (None, -1)) else
                    normalise(v, volatile, keep)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [normalise(v, volatile, keep) for v in value]
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if isinstance(value, str):
        return re.sub(r"127\.0\.0\.1:\d+", "HOST:PORT", value)
    return value


def sort_lists(value: Any) -> Any:
    """Lists sorted (by their JSON form) where Kafka promises no order."""
    if isinstance(value, dict):
        return {k: sort_lists(v) for k, v in value.items()}
    if isinstance(value, list):
        items = [sort_lists(v) for v in value]
        return sorted(items, key=lambda v: json.dumps(v, sort_keys=True, default=str))
    return value


def differences(k: Any, s: Any, path: str = "") -> list[str]:
    """Where ``s`` (Samsa's answer) differs from ``k`` (Kafka's), one line a place."""
    if isinstance(k, dict) and isinstance(s, dict):
        out = []
        for key in list(k) + [x for x in s if x not in k]:
            if key not in s or key not in k:
                out.append(f"{path}.{key}: kafka {k.get(key, '<absent>')!r} samsa {s.get(key, '<absent>')!r}")
            else:
                out += differences(k[key], s[key], f"{path}.{key}")
        return out
    if isinstance(k, list) and isinstance(s, list) and len(k) == len(s):
        return [d for i, (a, b) in enumerate(zip(k, s)) for d in differences(a, b, f"{path}[{i}]")]
    return [] if k == s else [f"{path}: kafka {json.dumps(k, default=str)[:400]} samsa {json.dumps(s, default=str)[:400]}"]


def one_side() -> str | None:
    side = os.environ.get(SIDE_ENV, "both")
    return None if side == "both" else side


def compare(scenario: Callable[[Side], Any], kafka: Side | None, samsa: Side | None,
            allow: str | None = None) -> tuple[Any, Any]:
    """Run ``scenario`` on both sides; assert the answers equal (unless ``allow`` gives why not)."""
    if kafka is None or samsa is None:
        side = kafka or samsa
        got = normalise(scenario(side))
        print(f"{side.name}: {json.dumps(got, default=str, indent=1)}")
        return got, got
    k = normalise(scenario(kafka))
    s = normalise(scenario(samsa))
    if allow:
        return k, s
    assert s == k, ("Samsa differs from Kafka:\n  " + "\n  ".join(differences(k, s)[:12])
                    + f"\n kafka: {json.dumps(k, default=str)[:3000]}\n samsa: {json.dumps(s, default=str)[:3000]}")
    return k, s


# ---------------------------------------------------------------------------- scenario helpers

def wait_leaders(side: Side, topic: str, partitions: int = 1, timeout: float = 30) -> None:
    """Until Metadata shows ``topic`` with a leader for each partition (Kafka's controller is asynchronous)."""
    from waiting import wait_until

    def ready() -> bool:
        r = side.call(3, {"topics": [{"name": topic}], "allow_auto_topic_creation": False}, 9)
        t = r["topics"][0]
        return t["error_code"] == 0 and len(t["partitions"]) >= partitions and all(
            p["leader_id"] >= 0 for p in t["partitions"])
    wait_until(ready, f"{topic} has leaders on {side.name}", timeout)


def create_topic(side: Side, topic: str, partitions: int = 1, configs: dict | None = None,
                 replication: int = 1) -> dict:
    r = side.call(19, {"topics": [{"name": topic, "num_partitions": partitions, "replication_factor": replication,
                                   "assignments": [], "configs": [{"name": k, "value": v}
                                                                  for k, v in (configs or {}).items()]}],
                       "timeout_ms": 30000, "validate_only": False}, 5)
    assert r["topics"][0]["error_code"] in (0, 36), r
    wait_leaders(side, topic, partitions)
    return r


def topic_result(r: dict) -> list[dict]:
    """A CreateTopics response's per-topic outcome (name, error, message)."""
    return [{"name": t["name"], "error_code": t["error_code"], "error_message": t["error_message"]}
            for t in r["topics"]]
