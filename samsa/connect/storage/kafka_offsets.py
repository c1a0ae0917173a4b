"""Source offsets in ``offset.storage.topic`` (distributed mode)."""

from __future__ import annotations

from typing import Any, Callable

from samsa.connect.storage.offsets import OffsetStore


class KafkaOffsetStore(OffsetStore):
    def __init__(self) -> None:
        super().__init__()
        self.send: Callable[[bytes, bytes | None], Any] | None = None
        self.flush: Callable[[], None] | None = None

    def _write(self, values: dict[bytes, bytes | None]) -> None:
        assert self.send is not None and self.flush is not None
        for k, v in values.items():
            self.send(k, v)
        self.flush()

    def on_record(self, record: Any) -> None:
        with self.lock:
            if record.value is None:
                self.data.pop(record.key, None)
            else:
                self.data[record.key] = record.value
