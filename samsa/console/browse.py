"""The message browser: records of one partition from an offset, a time, or the newest ones."""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from samsa.aio import AIOConsumer
from samsa.client.types import TopicPartition
from samsa.console.service import ConsoleError

DECODINGS = ("text", "json", "hex")
MAX_LIMIT = 500


@dataclass
class Query:
    """What the browser form asks for (all strings as they came, checked here)."""

    partition: int
    offset: int | None = None       # from this offset
    timestamp: int | None = None    # from the first record at or after this time (ms)
    newest: bool = False            # the last ``limit`` records, newest first
    limit: int = 50
    decode: str = "text"
    filter: str = ""

    @classmethod
    def parse(cls, params: dict[str, str], partitions: int) -> "Query":
        def number(key: str, what: str) -> int | None:
            raw = (params.get(key) or "").strip()
            if not raw:
                return None
            try:
                return int(raw)
            except ValueError:
                raise ConsoleError(f"{what} must be a whole number, not '{raw}'.") from None

        partition = number("partition", "The partition") or 0
        if not 0 <= partition < partitions:
            raise ConsoleError(f"Partition {partition} does not exist: the topic has partitions 0 to {partitions - 1}.",
                               404)
        limit = number("limit", "The number of messages")
        limit = 50 if limit is None else limit
        if not 1 <= limit <= MAX_LIMIT:
            raise ConsoleError(f"The number of messages must be between 1 and {MAX_LIMIT}.")
        offset = number("offset", "The offset")
        if offset is not None and offset < 0:
            raise ConsoleError("The offset must be 0 or more.")
        decode = params.get("decode") or "text"
        if decode not in DECODINGS:
            raise ConsoleError(f"Unknown decoding '{decode}': choose text, json or hex.")
        return cls(partition, offset, parse_time(params.get("time") or ""), params.get("newest") in ("1", "on", "true"),
                   limit, decode, params.get("filter") or "")


def parse_time(text: str) -> int | None:
    """A time in the form's words: ISO 8601 (UTC unless it says otherwise) or epoch milliseconds."""
    text = text.strip()
    if not text:
        return None
    if re.fullmatch(r"\d{10,}", text):
        return int(text)
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise ConsoleError(f"'{text}' is not a time: give ISO 8601 (2026-11-25T10:00:00) or milliseconds.") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return int(when.timestamp() * 1000)


@dataclass
class Message:
    offset: int
    timestamp: int
    key: str | None
    value: str | None
    headers: list[tuple[str, str]]

    @property
    def time(self) -> str:
        return datetime.fromtimestamp(self.timestamp / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


@dataclass
class Page:
    messages: list[Message]
    start: int
    end: int
    first: int          # where reading began
    scanned: int        # records read (before the filter)


def decode(data: bytes | None, how: str) -> str | None:
    if data is None:
        return None
    if how == "hex":
        return data.hex(" ")
    text = data.decode("utf-8", errors="replace")
    if how == "json":
        try:
            return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except ValueError:
            return text + "   (not JSON)"
    return text


async def browse(bootstrap: str, config: dict[str, Any], topic: str, q: Query, timeout_s: float = 10.0) -> Page:
    """Read up to ``q.limit`` records of one partition as ``q`` says (no group, nothing committed)."""
    tp = TopicPartition(topic, q.partition)
    consumer = AIOConsumer({**config, "bootstrap.servers": bootstrap, "enable.auto.commit": False,
                            "auto.offset.reset": "none", "client.id": "samsa-console"})
    await consumer.start()
    try:
        consumer.assign([tp])
        start = (await consumer.beginning_offsets([tp]))[tp]
        end = (await consumer.end_offsets([tp]))[tp]
        first = _first_offset(q, start, end)
        if q.timestamp is not None:
            found = (await consumer.offsets_for_times({tp: q.timestamp})).get(tp)
            first = found.offset if found is not None else end
        if first < end:
            consumer.seek(tp, first)
        wanted = min(q.limit, end - first) if not q.filter else None
        records = await _read(consumer, tp, first, end, wanted, q.limit, q.filter, q.decode, timeout_s)
    finally:
        await consumer.stop()
    messages, scanned = records
    if q.newest:
        messages.reverse()
    return Page(messages, start, end, first, scanned)


def _first_offset(q: Query, start: int, end: int) -> int:
    if q.newest:
        return max(start, end - q.limit)
    if q.offset is None:
        return start
    if q.offset > end:
        raise ConsoleError(f"Offset {q.offset} is past the end of partition {q.partition} "
                           f"(its messages are at offsets {start} to {end - 1}; the next will be {end}).")
    return max(q.offset, start)


async def _read(consumer: AIOConsumer, tp: TopicPartition, first: int, end: int, wanted: int | None, limit: int,
                needle: str, how: str, timeout_s: float) -> tuple[list[Message], int]:
    messages: list[Message] = []
    scanned = 0
    position = first
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while position < end and len(messages) < limit and loop.time() < deadline:
        for r in await consumer.poll(timeout=0.5):
            position = r.offset + 1
            if r.offset >= end:
                break
            scanned += 1
            m = Message(r.offset, r.timestamp, decode(r.key, "hex" if how == "hex" else "text"), decode(r.value, how),
                        [(k, decode(v, "text") or "") for k, v in (r.headers or [])])
            if needle and not any(needle in (s or "") for s in (m.key, m.value)):
                continue
            messages.append(m)
            if len(messages) >= limit or (wanted is not None and len(messages) >= wanted):
                break
    return messages, scanned
