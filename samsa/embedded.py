"""A Samsa broker inside your Python process, for tests: starts in milliseconds.

    with samsa.embedded.Broker() as broker:
        producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap_servers})

It is the same broker as ``samsa server start``, on its own event loop in a thread, bound
to an ephemeral loopback port, with its data in a temporary directory unless
``log.dirs`` is given. Defaults differ from Kafka's only where one broker needs it:
``offsets.topic.replication.factor=1`` (and the transaction and share state topics' replication
factors and min ISRs 1) and ``group.initial.rebalance.delay.ms=0``.

Secured listeners take the broker's keys (each listener on its own ephemeral port)::

    Broker({"listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
            "ssl.keystore.type": "PEM", "ssl.keystore.location": "broker.pem", ...})
    broker.bootstrap_servers_of("SASL_SSL")  # "127.0.0.1:<its port>"
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import threading
from typing import Any

from samsa.server.broker import BrokerServer
from samsa.broker_config import BrokerConfig


class Broker:
    def __init__(self, config: dict[str, Any] | None = None, **overrides: Any):
        # One broker: internal topics can only have one replica; tests want groups to form at once.
        props = {"listeners": "PLAINTEXT://127.0.0.1:0", "broker.id": "0", "offsets.topic.replication.factor": "1",
                 "transaction.state.log.replication.factor": "1", "transaction.state.log.min.isr": "1",
                 "share.coordinator.state.topic.replication.factor": "1", "share.coordinator.state.topic.min.isr": "1",
                 "group.initial.rebalance.delay.ms": "0"}
        props.update({k: str(v) for k, v in (config or {}).items()})
        props.update({k.replace("_", "."): str(v) for k, v in overrides.items()})
        self._tmp: str | None = None
        if "log.dirs" not in props and "log.dir" not in props:
            self._tmp = tempfile.mkdtemp(prefix="samsa-")
            props["log.dirs"] = self._tmp
        self.config = BrokerConfig(props)
        self.server: BrokerServer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        assert self.server is not None, "broker not started"
        return self.server.bound[0][2]

    @property
    def bootstrap_servers(self) -> str:
        """The first listener's address."""
        return f"127.0.0.1:{self.port}"

    @property
    def listeners(self) -> dict[str, int]:
        """Each listener's name and bound port."""
        assert self.server is not None, "broker not started"
        return {name: port for name, _host, port in self.server.bound}

    def bootstrap_servers_of(self, listener: str) -> str:
        """The address of the listener of this name (e.g. ``SASL_SSL``); KeyError naming the known ones."""
        ports = self.listeners
        if listener.upper() not in ports:
            raise KeyError(f"no listener {listener!r}: this broker has {', '.join(ports)}")
        return f"127.0.0.1:{ports[listener.upper()]}"

    def start(self) -> "Broker":
        started = threading.Event()
        failure: list[BaseException] = []

        def main() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            self.server = BrokerServer(self.config)
            try:
                loop.run_until_complete(self.server.start())
            except BaseException as e:  # surfaced to the caller of start()
                failure.append(e)
                started.set()
                loop.close()
                return
            started.set()
            loop.run_forever()
            loop.run_until_complete(self.server.stop())
            loop.close()

        self._thread = threading.Thread(target=main, name="samsa-broker", daemon=True)
        self._thread.start()
        started.wait()
        if failure:
            self._cleanup()
            raise failure[0]
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=30)
        self._cleanup()

    def _cleanup(self) -> None:
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def __enter__(self) -> "Broker":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
