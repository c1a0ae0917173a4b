"""errors.tolerance, errors.log.enable and the dead letter queue (sink connectors), as Kafka's
RetryWithToleranceOperator: a failure in a converter or transform either fails the task
(``none``) or skips the record (``all``), logged and sent to the DLQ topic when configured.
"""

from __future__ import annotations

import logging
import traceback
from typing import Any, Callable, TypeVar

from samsa.connect.config import flag, integer
from samsa.connect.errors import ConnectException

log = logging.getLogger(__name__)
T = TypeVar("T")

SKIP = object()  # a tolerated failure: the record is dropped

KEY_CONVERTER, VALUE_CONVERTER, HEADER_CONVERTER, TRANSFORMATION, TASK_PUT, TASK_POLL, KAFKA_PRODUCE, KAFKA_CONSUME = (
    "KEY_CONVERTER", "VALUE_CONVERTER", "HEADER_CONVERTER", "TRANSFORMATION", "TASK_PUT", "TASK_POLL",
    "KAFKA_PRODUCE", "KAFKA_CONSUME")
H = "__connect.errors."


class ToleranceExceeded(ConnectException):
    pass


class ErrorHandler:
    def __init__(self, connector: str, task: int, config: dict[str, Any],
                 dlq_send: Callable[[str, Any, Any, list], None] | None = None):
        self.connector, self.task = connector, task
        self.tolerate_all = str(config.get("errors.tolerance") or "none").lower() == "all"
        self.log_enable = flag(config, "errors.log.enable")
        self.log_messages = flag(config, "errors.log.include.messages")
        self.dlq_topic = str(config.get("errors.deadletterqueue.topic.name") or "").strip()
        self.dlq_headers = flag(config, "errors.deadletterqueue.context.headers.enable")
        self.dlq_replication = integer(config, "errors.deadletterqueue.topic.replication.factor", 3)
        self.dlq_send = dlq_send
        self.errors = 0

    def execute(self, stage: str, fn: Callable[[], T], original: Any = None) -> T | object:
        """``fn()``, or SKIP when it failed and failures are tolerated; ToleranceExceeded otherwise."""
        try:
            return fn()
        except Exception as e:  # noqa: BLE001 - every failure of a stage is the handler's to judge
            self.errors += 1
            self.report(stage, e, original)
            if not self.tolerate_all:
                raise ToleranceExceeded("Tolerance exceeded in error handler") from e
            return SKIP

    def report(self, stage: str, error: BaseException, original: Any) -> None:
        if self.log_enable:
            where = ""
            if original is not None and hasattr(original, "offset"):
                where = f", where consumed record is {{topic='{original.topic}', partition={original.partition}, " \
                        f"offset={original.offset}}}"
                if self.log_messages:
                    where += f" key={original.key!r} value={original.value!r}"
            log.error("Error encountered in task %s-%d. Executing stage '%s' with class '%s'%s.", self.connector,
                      self.task, stage, type(error).__name__, where, exc_info=error)
        if self.dlq_topic and self.dlq_send is not None and original is not None and hasattr(original, "offset"):
            headers = list(original.headers or [])
            if self.dlq_headers:
                context = {"topic": original.topic, "partition": str(original.partition),
                           "offset": str(original.offset), "connector.name": self.connector,
                           "task.id": str(self.task), "stage": stage, "class.name": stage,
                           "exception.class.name": type(error).__name__, "exception.message": str(error),
                           "exception.stacktrace": "".join(traceback.format_exception(error))}
                headers += [(H + k, v.encode()) for k, v in context.items()]
            try:
                self.dlq_send(self.dlq_topic, original.key, original.value, headers)
            except Exception as e:  # noqa: BLE001
                log.error("Could not produce message to dead letter queue. topic=%s: %s", self.dlq_topic, e)
