"""Source offsets by (connector, source partition): in memory, in a file, or in a topic.

Keys and values are Kafka's: the key is the JSON array ``[connector, partition]`` and the
value the offset's JSON (both as JsonConverter writes them with schemas disabled), so the
offsets topic of a Samsa worker reads like a Java worker's.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any


def offset_key(connector: str, partition: dict[str, Any]) -> bytes:
    return json.dumps([connector, partition], separators=(",", ":"), sort_keys=True).encode()


def parse_key(key: bytes) -> tuple[str, dict[str, Any]] | None:
    try:
        name, partition = json.loads(key)
    except (ValueError, TypeError):
        return None
    return (name, partition) if isinstance(name, str) else None


class OffsetStore:
    """The in-memory map; subclasses persist it."""

    def __init__(self) -> None:
        self.data: dict[bytes, bytes] = {}
        self.lock = threading.Lock()

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def get(self, connector: str, partition: dict[str, Any]) -> dict[str, Any] | None:
        with self.lock:
            raw = self.data.get(offset_key(connector, partition))
        return None if raw is None else json.loads(raw)

    def put(self, connector: str, offsets: dict[bytes, dict[str, Any] | None]) -> None:
        """``offsets``: offset_key(...) → offset (None removes it)."""
        values = {k: None if v is None else json.dumps(v, separators=(",", ":")).encode() for k, v in offsets.items()}
        self._write(values)
        with self.lock:
            for k, v in values.items():
                if v is None:
                    self.data.pop(k, None)
                else:
                    self.data[k] = v

    def _write(self, values: dict[bytes, bytes | None]) -> None:
        pass

    def for_connector(self, connector: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        out = []
        with self.lock:
            items = list(self.data.items())
        for k, v in items:
            parsed = parse_key(k)
            if parsed and parsed[0] == connector:
                out.append((parsed[1], json.loads(v)))
        return out


class FileOffsetStore(OffsetStore):
    """``offset.storage.file.filename``: the whole map, rewritten atomically at each flush.

    Kafka writes a Java-serialized HashMap there; this file is JSON (one object of key → value).
    """

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = Path(path)

    def start(self) -> None:
        if self.path.exists() and self.path.stat().st_size:
            stored = json.loads(self.path.read_text())
            self.data = {k.encode(): v.encode() for k, v in stored.items()}

    def _write(self, values: dict[bytes, bytes | None]) -> None:
        with self.lock:
            merged = dict(self.data)
            for k, v in values.items():
                if v is None:
                    merged.pop(k, None)
                else:
                    merged[k] = v
            tmp = self.path.with_name(self.path.name + ".tmp")
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "w") as f:
                json.dump({k.decode(): v.decode() for k, v in merged.items()}, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
