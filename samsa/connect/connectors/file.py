"""FileStreamSource and FileStreamSink, Kafka's quickstart connectors.

The source's partition is ``{"filename": path}`` and its offset ``{"position": byte offset
after the last whole line}``, as Kafka's; a restart goes on from the stored position.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from samsa.connect.api import ConfigKey, SinkConnector, SinkTask, SourceConnector, SourceTask
from samsa.connect.data import STRING_SCHEMA, SinkRecord, SourceRecord
from samsa.connect.errors import ConnectException


class FileStreamSourceConnector(SourceConnector):
    def config_def(self) -> list[ConfigKey]:
        return [ConfigKey("file", default=None, doc="Source filename. If not specified, the standard input will be used"),
                ConfigKey("topic", "LIST", doc="The topic to publish data to"),
                ConfigKey("batch.size", "INT", 2000, "LOW", "The maximum number of records the source task can read "
                                                            "from the file each time it is polled")]

    def validate(self, config: dict[str, str]) -> list[tuple[str, str]]:
        topics = [t for t in str(config.get("topic", "")).split(",") if t.strip()]
        if len(topics) > 1:
            return [("topic", "'topic' in FileStreamSourceConnector configuration requires definition of a single "
                              "topic.")]
        return []

    def start(self, props: dict[str, str]) -> None:
        self.props = dict(props)

    def task_class(self) -> type:
        return FileStreamSourceTask

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        return [{k: v for k, v in self.props.items() if k in ("file", "topic", "batch.size")}]


class FileStreamSourceTask(SourceTask):
    def start(self, props: dict[str, str]) -> None:
        self.filename = props.get("file") or None
        self.topic = props["topic"]
        self.batch_size = int(props.get("batch.size", 2000))
        self.position = 0
        self.stream: Any = None
        self.buffer = b""
        if self.filename:
            stored = self.context.offset_storage_reader.offset({"filename": self.filename})
            if stored and stored.get("position") is not None:
                self.position = int(stored["position"])

    def _open(self) -> bool:
        if self.stream is not None:
            return True
        if self.filename is None:
            self.stream = sys.stdin.buffer
            return True
        try:
            self.stream = open(self.filename, "rb")
        except FileNotFoundError:
            return False
        self.stream.seek(self.position)
        return True

    def poll(self) -> list[SourceRecord] | None:
        if not self._open():
            time.sleep(0.2)  # Kafka's task waits for the file to appear
            return None
        chunk = self.stream.read(1 << 16) if self.filename else self.stream.readline()
        if not chunk:
            time.sleep(0.05)
            return None
        self.buffer += chunk
        records: list[SourceRecord] = []
        while len(records) < self.batch_size:
            nl = self.buffer.find(b"\n")
            if nl < 0:
                break
            line, self.buffer = self.buffer[:nl], self.buffer[nl + 1:]
            self.position += nl + 1
            text = line.rstrip(b"\r").decode("utf-8", errors="replace")
            records.append(SourceRecord(self.topic, None, None, None, STRING_SCHEMA, text,
                                        int(time.time() * 1000), [], {"filename": self.filename},
                                        {"position": self.position}))
        return records

    def stop(self) -> None:
        if self.stream is not None and self.filename:
            self.stream.close()


class FileStreamSinkConnector(SinkConnector):
    def config_def(self) -> list[ConfigKey]:
        return [ConfigKey("file", default=None, doc="Destination filename. If not specified, the standard output "
                                                    "will be used")]

    def start(self, props: dict[str, str]) -> None:
        self.props = dict(props)

    def task_class(self) -> type:
        return FileStreamSinkTask

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        return [{"file": self.props.get("file", "")} for _ in range(max_tasks)]


class FileStreamSinkTask(SinkTask):
    def start(self, props: dict[str, str]) -> None:
        self.filename = props.get("file") or None
        self.out: TextIO = open(self.filename, "a", encoding="utf-8") if self.filename else sys.stdout

    def put(self, records: list[SinkRecord]) -> None:
        for r in records:
            value = r.value
            if value is None:
                text = "null"
            elif isinstance(value, (bytes, bytearray)):
                text = bytes(value).decode("utf-8", errors="replace")
            else:
                text = str(value)
            self.out.write(text + "\n")

    def flush(self, offsets: dict[Any, int]) -> None:
        try:
            self.out.flush()
        except OSError as e:
            raise ConnectException(f"Couldn't flush {self.filename}: {e}") from e

    def stop(self) -> None:
        if self.filename:
            self.out.close()
