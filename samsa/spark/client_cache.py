"""Clients kept on an executor across tasks, one per distinct config: starting a client (its
connections, metadata) costs more than a small task's work."""

from __future__ import annotations

import threading
from typing import Any, Callable, Generic, TypeVar

C = TypeVar("C")


class ClientCache(Generic[C]):
    def __init__(self, make: Callable[[dict[str, Any]], C], close: Callable[[C], None]):
        self._make, self._close = make, close
        self._clients: dict[tuple, C] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _key(config: dict[str, Any]) -> tuple:
        return tuple(sorted((k, str(v)) for k, v in config.items()))

    def get(self, config: dict[str, Any]) -> C:
        key = self._key(config)
        with self._lock:
            client = self._clients.get(key)
            if client is None:
                client = self._clients[key] = self._make(config)
            return client

    def drop(self, config: dict[str, Any]) -> None:
        """Throw the config's client away (its state is unknown): the next task starts a new one."""
        with self._lock:
            client = self._clients.pop(self._key(config), None)
        if client is not None:
            try:
                self._close(client)
            except Exception:  # noqa: BLE001 - a broken client is being thrown away
                pass
