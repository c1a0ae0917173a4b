"""The connector API: Connector → task configs → Tasks, as Kafka's ``connect-api``.

A connector subclasses :class:`SourceConnector` or :class:`SinkConnector`, names its task
class and splits its config into ``task_configs(max_tasks)``. Source tasks ``poll()``
:class:`SourceRecord`s carrying a source partition and offset (the worker stores the offsets
once the records are acknowledged); sink tasks get ``put(records)`` and ``flush(offsets)``
before the worker commits the consumer offsets.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from samsa.connect.data import SinkRecord, SourceRecord

NO_DEFAULT = object()


@dataclass
class ConfigKey:
    """One connector config key: what ``/config/validate`` reports and what a POST is checked against."""

    name: str
    type: str = "STRING"        # Kafka's ConfigDef types: STRING, INT, LONG, BOOLEAN, LIST, CLASS, PASSWORD
    default: Any = NO_DEFAULT   # NO_DEFAULT: required
    importance: str = "HIGH"
    doc: str = ""
    group: str | None = None

    @property
    def required(self) -> bool:
        return self.default is NO_DEFAULT


class OffsetStorageReader:
    """What a source task reads its stored offsets with."""

    def __init__(self, lookup: Callable[[dict[str, Any]], dict[str, Any] | None]):
        self._lookup = lookup

    def offset(self, partition: dict[str, Any]) -> dict[str, Any] | None:
        return self._lookup(partition)

    def offsets(self, partitions: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
        return [(p, self._lookup(p)) for p in partitions]


class ConnectorContext:
    def __init__(self, request_reconfiguration: Callable[[], None], raise_error: Callable[[BaseException], None],
                 offset_reader: OffsetStorageReader | None = None):
        self.request_task_reconfiguration = request_reconfiguration
        self.raise_error = raise_error
        self.offset_storage_reader = offset_reader


class Connector:
    context: ConnectorContext

    def version(self) -> str:
        return "3.9.0"

    def initialize(self, context: ConnectorContext) -> None:
        self.context = context

    def config_def(self) -> list[ConfigKey]:
        return []

    def validate(self, config: dict[str, str]) -> list[tuple[str, str]]:
        """Extra (key, error) pairs beyond the config_def's required keys."""
        return []

    def start(self, props: dict[str, str]) -> None:
        raise NotImplementedError

    def task_class(self) -> type["Task"]:
        raise NotImplementedError

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        raise NotImplementedError

    def stop(self) -> None:
        pass

    # KIP-875: a connector may check offsets the REST API is asked to write
    def alter_offsets(self, config: dict[str, str], offsets: dict) -> bool:
        return True


class SourceConnector(Connector):
    TYPE = "source"

    def exactly_once_support(self) -> bool:
        return False


class SinkConnector(Connector):
    TYPE = "sink"


class Task:
    def version(self) -> str:
        return "3.9.0"

    def start(self, props: dict[str, str]) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        pass


class SourceTaskContext:
    def __init__(self, config: dict[str, str], offset_reader: OffsetStorageReader):
        self.configs = config
        self.offset_storage_reader = offset_reader


class SourceTask(Task):
    context: SourceTaskContext

    def initialize(self, context: SourceTaskContext) -> None:
        self.context = context

    def poll(self) -> list[SourceRecord] | None:
        """Records, or None/[] when there is nothing now (the task should block briefly first)."""
        raise NotImplementedError

    def commit(self) -> None:
        """Offsets of everything polled so far have been stored."""

    def commit_record(self, record: SourceRecord, metadata: Any) -> None:
        """``record`` was acknowledged by the broker (``metadata`` is its RecordMetadata, or None if filtered)."""


class ErrantRecordReporter:
    def __init__(self, report: Callable[[SinkRecord, BaseException], None]):
        self.report = report


class SinkTaskContext:
    def __init__(self, config: dict[str, str], reporter: ErrantRecordReporter | None = None):
        self.configs = config
        self.errant_record_reporter = reporter
        self.offsets_to_reset: dict[Any, int] = {}
        self.commit_requested = False

    def offset(self, offsets: dict[Any, int]) -> None:
        """Ask the worker to rewind/forward these partitions (TopicPartition → offset)."""
        self.offsets_to_reset.update(offsets)

    def request_commit(self) -> None:
        self.commit_requested = True


class SinkTask(Task):
    context: SinkTaskContext

    def initialize(self, context: SinkTaskContext) -> None:
        self.context = context

    def open(self, partitions: list[Any]) -> None:
        pass

    def close(self, partitions: list[Any]) -> None:
        pass

    def put(self, records: list[SinkRecord]) -> None:
        raise NotImplementedError

    def flush(self, offsets: dict[Any, int]) -> None:
        pass

    def pre_commit(self, offsets: dict[Any, int]) -> dict[Any, int]:
        """The offsets the worker may commit (TopicPartition → next offset); flush() by default."""
        self.flush(offsets)
        return offsets
