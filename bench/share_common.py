"""What bench/share_bench.py and bench/share_queue_bench.py share: a share group's config, a
confluent-kafka consumer of either kind with its read function, and stopping the consumer
processes. Not a test."""

from __future__ import annotations

from typing import Any, Callable


def set_share_group_config(bootstrap: str, group: str) -> None:
    """``share.auto.offset.reset=earliest`` for ``group`` (IncrementalAlterConfigs on the GROUP resource)."""
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
    r = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept until the answer: a destroyed handle fails it
    admin.incremental_alter_configs([r])[r].result(60)


def confluent_reader(kind: str, bootstrap: str, group: str, topic: str, *, batch: int,
                     share_config: dict | None = None) -> tuple[Any, Callable[[], list]]:
    """A subscribed confluent-kafka ``ShareConsumer`` (``kind`` "share", with ``share_config`` added)
    or classic ``Consumer`` (auto commit, ``auto.offset.reset=earliest``, ``batch`` records a
    consume()), and a function that reads once (0.2 s at most) and returns the good messages."""
    from confluent_kafka import Consumer, ShareConsumer
    if kind == "share":
        c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 3, **(share_config or {})})
        c.subscribe([topic])
        return c, lambda: [m for m in c.poll(0.2) if not m.error()]
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "log_level": 3})
    c.subscribe([topic])
    return c, lambda: [m for m in c.consume(batch, 0.2) if not m.error()]


def stop_processes(procs: list, stop) -> None:
    """Sets ``stop`` (the processes' Event), waits 30 s for each and kills what is still alive."""
    stop.set()
    for p in procs:
        p.join(30)
        if p.is_alive():
            p.kill()
