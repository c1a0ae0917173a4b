"""Connectors for the tests, loaded by the worker processes by Python path."""

from __future__ import annotations

import os
import time

from samsa.connect.api import ConfigKey, SourceConnector, SourceTask
from samsa.connect.data import STRING_SCHEMA, SourceRecord


class CountingSourceConnector(SourceConnector):
    """Task i writes ``i-0, i-1, ...`` to ``topic``; the task numbered ``fail.task`` throws on its first poll."""

    def config_def(self) -> list[ConfigKey]:
        return [ConfigKey("topic"), ConfigKey("fail.task", "INT", "-1")]

    def start(self, props: dict[str, str]) -> None:
        self.props = props

    def task_class(self) -> type:
        return CountingSourceTask

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        return [{"topic": self.props["topic"], "task": str(i), "fail.task": self.props.get("fail.task", "-1")}
                for i in range(max_tasks)]


class CountingSourceTask(SourceTask):
    def start(self, props: dict[str, str]) -> None:
        self.topic, self.task = props["topic"], props["task"]
        if props["fail.task"] == self.task:
            self.boom = True
        else:
            self.boom = False
        stored = self.context.offset_storage_reader.offset({"task": self.task})
        self.next = stored["n"] + 1 if stored else 0

    def poll(self) -> list[SourceRecord]:
        if self.boom:
            raise RuntimeError("this task was told to fail")
        time.sleep(0.05)
        records = [SourceRecord(self.topic, None, None, None, STRING_SCHEMA, f"{self.task}-{n}", None, [],
                                {"task": self.task}, {"n": n}) for n in range(self.next, self.next + 5)]
        self.next += 5
        return records


class StartRecordingSourceConnector(SourceConnector):
    """Each start of one of its tasks appends ``<task> <pid>`` to ``starts.file``; the tasks produce nothing.
    A test reads the file to tell which tasks were (re)started, in which worker process."""

    def config_def(self) -> list[ConfigKey]:
        return [ConfigKey("starts.file")]

    def start(self, props: dict[str, str]) -> None:
        self.props = props

    def task_class(self) -> type:
        return StartRecordingSourceTask

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        return [{"starts.file": self.props["starts.file"], "task": str(i)} for i in range(max_tasks)]


class StartRecordingSourceTask(SourceTask):
    def start(self, props: dict[str, str]) -> None:
        with open(props["starts.file"], "a") as f:
            f.write(f"{props['task']} {os.getpid()}\n")

    def poll(self) -> list[SourceRecord]:
        time.sleep(0.1)
        return []
