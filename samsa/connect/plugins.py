"""Finding connectors, converters, transforms and predicates by class name.

Accepted: Kafka's full Java class names, their simple names and the simple name without
``Connector`` (``FileStreamSource``), a Python path (``package.module.Class`` or
``package.module:Class``), and third-party connectors registered under the entry-point
group ``samsa.connect.plugins`` (the entry point's name is the alias).
"""

from __future__ import annotations

import importlib
import importlib.metadata
from typing import Any

from samsa.connect import converters, transforms
from samsa.connect.api import Connector, SinkConnector, SourceConnector
from samsa.connect.errors import ConnectException

ENTRY_POINT_GROUP = "samsa.connect.plugins"

# Kafka's full class name → where Samsa's class lives (imported when first asked for).
CONNECTORS: dict[str, str] = {
    "org.apache.kafka.connect.file.FileStreamSourceConnector": "samsa.connect.connectors.file:FileStreamSourceConnector",
    "org.apache.kafka.connect.file.FileStreamSinkConnector": "samsa.connect.connectors.file:FileStreamSinkConnector",
    "io.debezium.connector.postgresql.PostgresConnector": "samsa.connect.connectors.postgres_cdc:PostgresConnector",
    "io.confluent.connect.jdbc.JdbcSinkConnector": "samsa.connect.connectors.jdbc_sink:JdbcSinkConnector",
    "org.apache.kafka.connect.mirror.MirrorSourceConnector": "samsa.connect.mirror.source:MirrorSourceConnector",
    "org.apache.kafka.connect.mirror.MirrorCheckpointConnector":
        "samsa.connect.mirror.checkpoint:MirrorCheckpointConnector",
    "org.apache.kafka.connect.mirror.MirrorHeartbeatConnector": "samsa.connect.mirror.heartbeat:MirrorHeartbeatConnector",
}


def _load(path: str) -> Any:
    module, _, name = path.partition(":")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None


def _aliases(full: str) -> list[str]:
    simple = full.rsplit(".", 1)[-1]
    out = [full, simple]
    if simple.endswith("Connector"):
        out.append(simple[: -len("Connector")])
    return out


def _entry_points() -> dict[str, Any]:
    try:
        return {ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}
    except Exception:  # noqa: BLE001 - a broken distribution must not stop the worker
        return {}


def connector_class(name: str) -> type[Connector]:
    """The connector class ``connector.class`` names, or ConnectException (REST answers 400)."""
    name = (name or "").strip()
    for full, path in CONNECTORS.items():
        if name in _aliases(full):
            cls = _load(path)
            if cls is not None:
                return cls
    eps = _entry_points()
    if name in eps:
        return eps[name].load()
    found = _python_class(name)
    if isinstance(found, type) and issubclass(found, Connector):
        return found
    raise ConnectException(f"Failed to find any class that implements Connector and which name matches {name}, "
                           f"available connectors are: {', '.join(sorted(p['class'] for p in connector_plugins()))}")


def _python_class(name: str) -> Any:
    if ":" in name:
        return _load(name)
    module, _, attr = name.rpartition(".")
    return _load(f"{module}:{attr}") if module else None


def connector_type(cls: type) -> str:
    if issubclass(cls, SourceConnector):
        return "source"
    if issubclass(cls, SinkConnector):
        return "sink"
    return "unknown"


def connector_plugins() -> list[dict[str, str]]:
    """``GET /connector-plugins``: class, type and version of each connector found."""
    out = []
    for full, path in CONNECTORS.items():
        cls = _load(path)
        if cls is not None:
            out.append({"class": full, "type": connector_type(cls), "version": cls().version()})
    for name, ep in _entry_points().items():
        try:
            cls = ep.load()
        except Exception:  # noqa: BLE001
            continue
        out.append({"class": f"{cls.__module__}.{cls.__qualname__}", "type": connector_type(cls),
                    "version": cls().version()})
    return sorted(out, key=lambda p: p["class"])


def _find(name: str, table: dict[str, type], what: str) -> type:
    name = name.strip()
    if name in table:
        return table[name]
    for full, cls in table.items():
        if name == full.rsplit(".", 1)[-1]:
            return cls
    found = _python_class(name)
    if isinstance(found, type):
        return found
    raise ConnectException(f"Invalid value {name} for configuration: Class {name} could not be found ({what}).")


def converter(name: str) -> converters.Converter:
    return _find(name, converters.ALIASES, "converter")()


def find_transform(name: str, table: dict[str, type]) -> type:
    return _find(name, table, "transformation" if table is transforms.TRANSFORMS else "predicate")
