"""Worker and connector configs: Kafka's key names, defaults and the checks a POST gets."""

from __future__ import annotations

import re
from typing import Any

from samsa.connect import plugins
from samsa.connect.api import NO_DEFAULT, ConfigKey, Connector, SinkConnector
from samsa.connect.errors import ConnectException

WORKER_DEFAULTS: dict[str, str] = {
    "key.converter": "org.apache.kafka.connect.json.JsonConverter",
    "value.converter": "org.apache.kafka.connect.json.JsonConverter",
    "header.converter": "org.apache.kafka.connect.storage.SimpleHeaderConverter",
    "offset.flush.interval.ms": "60000",
    "offset.flush.timeout.ms": "5000",
    "task.shutdown.graceful.timeout.ms": "5000",
    "listeners": "http://:8083",
    "session.timeout.ms": "10000",
    "heartbeat.interval.ms": "3000",
    "rebalance.timeout.ms": "60000",
    "connect.protocol": "sessioned",
    "scheduled.rebalance.max.delay.ms": "300000",
    "config.storage.replication.factor": "3",
    "offset.storage.replication.factor": "3",
    "status.storage.replication.factor": "3",
    "offset.storage.partitions": "25",
    "status.storage.partitions": "5",
}

COMMON_KEYS = [
    ConfigKey("name", doc="Globally unique name to use for this connector."),
    ConfigKey("connector.class", "STRING", doc="Name or alias of the class for this connector."),
    ConfigKey("tasks.max", "INT", "1", doc="Maximum number of tasks to use for this connector."),
    ConfigKey("key.converter", "CLASS", None, "LOW"),
    ConfigKey("value.converter", "CLASS", None, "LOW"),
    ConfigKey("header.converter", "CLASS", None, "LOW"),
    ConfigKey("transforms", "LIST", "", "LOW"),
    ConfigKey("predicates", "LIST", "", "LOW"),
    ConfigKey("errors.tolerance", "STRING", "none", "MEDIUM"),
    ConfigKey("errors.log.enable", "BOOLEAN", "false", "MEDIUM"),
    ConfigKey("errors.log.include.messages", "BOOLEAN", "false", "MEDIUM"),
]
SINK_KEYS = [
    ConfigKey("topics", "LIST", "", doc="List of topics to consume, separated by commas"),
    ConfigKey("topics.regex", "STRING", "", doc="Regular expression giving topics to consume."),
    ConfigKey("errors.deadletterqueue.topic.name", "STRING", "", "MEDIUM"),
    ConfigKey("errors.deadletterqueue.topic.replication.factor", "SHORT", "3", "MEDIUM"),
    ConfigKey("errors.deadletterqueue.context.headers.enable", "BOOLEAN", "false", "MEDIUM"),
]


def flag(config: dict[str, Any], key: str, default: bool = False) -> bool:
    value = config.get(key)
    return default if value in (None, "") else str(value).strip().lower() == "true"


def integer(config: dict[str, Any], key: str, default: int) -> int:
    value = config.get(key)
    return default if value in (None, "") else int(str(value).strip())


def worker_config(props: dict[str, str]) -> dict[str, str]:
    out = dict(WORKER_DEFAULTS)
    out.update(props)
    if not out.get("bootstrap.servers"):
        out["bootstrap.servers"] = "localhost:9092"
    return out


def prefixed(config: dict[str, Any], prefix: str) -> dict[str, Any]:
    return {k[len(prefix):]: v for k, v in config.items() if k.startswith(prefix)}


def sink_topics(config: dict[str, Any]) -> list[str]:
    return [t.strip() for t in str(config.get("topics") or "").split(",") if t.strip()]


def validate(config: dict[str, Any]) -> tuple[type[Connector] | None, list[tuple[ConfigKey, list[str]]]]:
    """The connector class (None if not found) and each key with its errors, as /config/validate reports."""
    cls: type[Connector] | None = None
    results: list[tuple[ConfigKey, list[str]]] = []
    class_error: list[str] = []
    try:
        cls = plugins.connector_class(str(config.get("connector.class") or ""))
    except ConnectException as e:
        class_error.append(str(e) if config.get("connector.class") else
                           'Missing required configuration "connector.class" which has no default value.')
    keys = list(COMMON_KEYS)
    if cls is not None and issubclass(cls, SinkConnector):
        keys += SINK_KEYS
    own: list[ConfigKey] = []
    extra: list[tuple[str, str]] = []
    if cls is not None:
        connector = cls()
        own = connector.config_def()
        try:
            extra = connector.validate({k: str(v) for k, v in config.items()})
        except Exception as e:  # noqa: BLE001 - a connector's own check failing is its error
            extra = [("connector.class", f"{type(e).__name__}: {e}")]
    for key in keys + own:
        errs: list[str] = []
        value = config.get(key.name)
        if key.name == "connector.class":
            errs = class_error
        elif key.required and (value is None or str(value).strip() == "") and key.name != "name":
            errs.append(f'Missing required configuration "{key.name}" which has no default value.')
        elif key.type == "INT" and value not in (None, ""):
            try:
                if int(str(value)) < (1 if key.name == "tasks.max" else -2**31):
                    errs.append(f"Invalid value {value} for configuration {key.name}: Value must be at least 1")
            except ValueError:
                errs.append(f"Invalid value {value} for configuration {key.name}: Not a number of type INT")
        elif key.name == "errors.tolerance" and value not in (None, "", "none", "all"):
            errs.append(f"Invalid value {value} for configuration errors.tolerance: String must be one of: none, all")
        errs += [msg for k, msg in extra if k == key.name]
        results.append((key, errs))
    if cls is not None and issubclass(cls, SinkConnector):
        topics, regex = sink_topics(config), str(config.get("topics.regex") or "").strip()
        problem = None
        if topics and regex:
            problem = "topics and topics.regex are mutually exclusive options, but both are set."
        elif not topics and not regex:
            problem = "Must configure one of topics or topics.regex"
        elif regex:
            try:
                re.compile(regex)
            except re.error as e:
                problem = f"Invalid value {regex} for configuration topics.regex: {e}"
        dlq = str(config.get("errors.deadletterqueue.topic.name") or "").strip()
        if dlq and (dlq in topics or (regex and re.fullmatch(regex, dlq))):
            problem = f"The DLQ topic '{dlq}' may not be included in the list of topics ('topics=...') consumed by " \
                      f"the connector"
        if problem:
            for k, errs in results:
                if k.name in ("topics", "topics.regex"):
                    errs.append(problem)
    for alias in [a.strip() for a in str(config.get("transforms") or "").split(",") if a.strip()]:
        key = ConfigKey(f"transforms.{alias}.type", "CLASS", group="Transforms: " + alias)
        t = config.get(key.name)
        errs = [] if t else [f'Missing required configuration "{key.name}" which has no default value.']
        if t:
            from samsa.connect.transforms import TRANSFORMS
            try:
                plugins.find_transform(str(t), TRANSFORMS)
            except ConnectException:
                errs.append(f"Invalid value {t} for configuration {key.name}: Class {t} could not be found.")
        results.append((key, errs))
    return cls, results


def error_count(results: list[tuple[ConfigKey, list[str]]]) -> int:
    return sum(1 for _, errs in results if errs)


def validation_json(plugin: str, results: list[tuple[ConfigKey, list[str]]], config: dict[str, Any]) -> dict:
    """``PUT /connector-plugins/{plugin}/config/validate``'s answer (ConfigInfos)."""
    groups: list[str] = []
    configs = []
    for key, errs in results:
        group = key.group or "Common"
        if group not in groups:
            groups.append(group)
        default = None if key.default is NO_DEFAULT or key.default is None else str(key.default)
        configs.append({
            "definition": {"name": key.name, "type": key.type, "required": key.required, "default_value": default,
                           "importance": key.importance, "documentation": key.doc, "group": group,
                           "width": "NONE", "display_name": key.name, "dependents": [], "order": -1},
            "value": {"name": key.name, "value": None if config.get(key.name) is None else str(config[key.name]),
                      "recommended_values": [], "errors": errs, "visible": True}})
    return {"name": plugin, "error_count": error_count(results), "groups": groups, "configs": configs}


def invalid_message(results: list[tuple[ConfigKey, list[str]]]) -> str:
    errs = [e for _, es in results for e in es]
    return (f"Connector configuration is invalid and contains the following {len(errs)} error(s):\n" +
            "\n".join(errs) + "\nYou can also find the above list of errors at the endpoint "
            "`/connector-plugins/{connectorType}/config/validate`")
