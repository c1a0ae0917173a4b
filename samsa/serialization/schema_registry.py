"""What every serde with a Schema Registry shares: Confluent's wire format (a zero magic byte,
the schema id as a big-endian int32, then the body), a small client of the registry's REST API
with its caches, and the subject name strategies.

Configured by the keys the registry's serializers use: ``schema.registry.url`` (several,
comma-separated, tried in turn), ``basic.auth.credentials.source=USER_INFO`` with
``basic.auth.user.info=user:password``, ``auto.register.schemas`` (true), ``use.latest.version``
(false), ``normalize.schemas`` (false), ``key.subject.name.strategy`` /
``value.subject.name.strategy`` (``io.confluent.kafka.serializers.subject.TopicNameStrategy``,
``RecordNameStrategy``, ``TopicRecordNameStrategy``; the short names work too).
"""

from __future__ import annotations

import base64
import json
import struct
import threading
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Callable

from samsa.serialization import SerializationError

MAGIC = 0
_HEADER = struct.Struct(">bI")
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


class SchemaRegistryError(Exception):
    """The registry answered an error: its HTTP status, ``error_code`` and message."""

    def __init__(self, status: int, code: int, message: str):
        super().__init__(f"{message} (HTTP status code {status}, SR code {code})")
        self.status, self.code, self.message = status, code, message


def frame(schema_id: int, body: bytes) -> bytes:
    return _HEADER.pack(MAGIC, schema_id) + body


def unframe(data: bytes) -> tuple[int, memoryview]:
    """(schema id, body) of a record in Confluent's wire format."""
    if len(data) < 5:
        raise SerializationError(f"Unknown magic byte: {len(data)} bytes is too short for the wire format")
    magic, schema_id = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise SerializationError(f"Unknown magic byte {magic}: not Confluent's wire format")
    return schema_id, memoryview(data)[5:]


class SchemaRegistryClient:
    """The REST calls the serdes make, with their results cached (ids never change meaning)."""

    def __init__(self, conf: dict[str, Any] | str):
        if isinstance(conf, str):
            conf = {"url": conf}
        urls = conf.get("url") or conf.get("schema.registry.url")
        if not urls:
            raise ValueError("Missing required configuration \"schema.registry.url\"")
        self.urls = [u.strip().rstrip("/") for u in str(urls).split(",") if u.strip()]
        self.timeout = float(conf.get("timeout", 30))
        self.headers = {"Accept": CONTENT_TYPE + ", application/json"}
        user_info = conf.get("basic.auth.user.info")
        if user_info:
            self.headers["Authorization"] = "Basic " + base64.b64encode(str(user_info).encode()).decode()
        self._lock = threading.Lock()
        self._by_id: dict[int, dict] = {}
        self._ids: dict[tuple, int] = {}
        self._latest: dict[str, dict] = {}

    def request(self, method: str, path: str, body: Any = None, query: dict | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        qs = "" if not query else "?" + urllib.parse.urlencode(query)
        last: Exception | None = None
        for base in self.urls:
            headers = dict(self.headers)
            if data is not None:
                headers["Content-Type"] = CONTENT_TYPE
            req = urllib.request.Request(base + path + qs, data=data, method=method, headers=headers)
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                    raw = resp.read()
                    return json.loads(raw) if raw else None
            except urllib.error.HTTPError as e:
                raw = e.read()
                try:
                    doc = json.loads(raw)
                    err = SchemaRegistryError(e.code, int(doc.get("error_code", -1)), str(doc.get("message")))
                except (ValueError, AttributeError):
                    err = SchemaRegistryError(e.code, -1, raw.decode(errors="replace")[:200])
                if e.code < 500:
                    raise err from None
                last = err
            except OSError as e:
                last = e
        raise last if isinstance(last, SchemaRegistryError) else SchemaRegistryError(
            503, -1, f"Schema registry {', '.join(self.urls)} unreachable: {last}")

    @staticmethod
    def _q(subject: str) -> str:
        return urllib.parse.quote(subject, safe="")

    def register(self, subject: str, schema: dict, normalize: bool = False) -> int:
        key = (subject, json.dumps(schema, sort_keys=True), normalize)
        with self._lock:
            if key in self._ids:
                return self._ids[key]
        resp = self.request("POST", f"/subjects/{self._q(subject)}/versions", schema,
                            {"normalize": "true"} if normalize else None)
        with self._lock:
            self._ids[key] = resp["id"]
        return resp["id"]

    def lookup(self, subject: str, schema: dict, normalize: bool = False) -> dict:
        return self.request("POST", f"/subjects/{self._q(subject)}", schema,
                            {"normalize": "true"} if normalize else None)

    def lookup_id(self, subject: str, schema: dict, normalize: bool = False) -> int:
        key = ("lookup", subject, json.dumps(schema, sort_keys=True), normalize)
        with self._lock:
            if key in self._ids:
                return self._ids[key]
        found = self.lookup(subject, schema, normalize)["id"]
        with self._lock:
            self._ids[key] = found
        return found

    def schema(self, schema_id: int, subject: str | None = None) -> dict:
        with self._lock:
            if schema_id in self._by_id:
                return self._by_id[schema_id]
        query = {"subject": subject} if subject else {}
        query["format"] = "serialized"
        found = self.request("GET", f"/schemas/ids/{schema_id}", query=query)
        with self._lock:
            self._by_id[schema_id] = found
        return found

    def latest(self, subject: str) -> dict:
        """The subject's latest version: {subject, version, id, schema, schemaType?, references?}."""
        return self.request("GET", f"/subjects/{self._q(subject)}/versions/latest")

    def version(self, subject: str, version: int | str) -> dict:
        return self.request("GET", f"/subjects/{self._q(subject)}/versions/{version}")

    def subjects(self) -> list[str]:
        return self.request("GET", "/subjects")

    def versions(self, subject: str) -> list[int]:
        return self.request("GET", f"/subjects/{self._q(subject)}/versions")

    def config(self, subject: str | None = None) -> str:
        path = "/config" if subject is None else f"/config/{self._q(subject)}"
        return self.request("GET", path, query={"defaultToGlobal": "true"})["compatibilityLevel"]


_CLIENTS: dict[tuple, SchemaRegistryClient] = {}
_CLIENTS_LOCK = threading.Lock()


def client_for(configs: dict[str, Any]) -> SchemaRegistryClient:
    """One client per registry URL and credentials in a process: their caches are shared."""
    url = configs.get("schema.registry.url")
    if not url:
        raise SerializationError("Missing required configuration \"schema.registry.url\" which has no default value.")
    user = configs.get("basic.auth.user.info") or configs.get("schema.registry.basic.auth.user.info")
    key = (str(url), user)
    with _CLIENTS_LOCK:
        if key not in _CLIENTS:
            _CLIENTS[key] = SchemaRegistryClient({"url": url, "basic.auth.user.info": user})
        return _CLIENTS[key]


# ------------------------------------------------------------------ subject name strategies

def topic_name_strategy(topic: str, is_key: bool, record_name: str | None) -> str:
    return f"{topic}-{'key' if is_key else 'value'}"


def record_name_strategy(topic: str, is_key: bool, record_name: str | None) -> str:
    if not record_name:
        raise SerializationError("RecordNameStrategy needs a named record type (an Avro record, a JSON schema's "
                                 "title, a Protobuf message)")
    return record_name


def topic_record_name_strategy(topic: str, is_key: bool, record_name: str | None) -> str:
    return f"{topic}-{record_name_strategy(topic, is_key, record_name)}"


STRATEGIES: dict[str, Callable[[str, bool, str | None], str]] = {
    "TopicNameStrategy": topic_name_strategy,
    "RecordNameStrategy": record_name_strategy,
    "TopicRecordNameStrategy": topic_record_name_strategy,
}


def strategy(spec: Any) -> Callable[[str, bool, str | None], str]:
    if callable(spec):
        return spec
    name = str(spec or "TopicNameStrategy").rsplit(".", 1)[-1]
    if name not in STRATEGIES:
        raise SerializationError(f"Unknown subject name strategy {spec}: TopicNameStrategy, RecordNameStrategy "
                                 "or TopicRecordNameStrategy")
    return STRATEGIES[name]


def _bool(v: Any, default: bool) -> bool:
    if v is None:
        return default
    return v if isinstance(v, bool) else str(v).strip().lower() == "true"


class RegistrySerde:
    """Shared configuration of the serdes: ``configure(configs)`` as the clients call it."""

    schema_type = "AVRO"
    is_key = False

    def __init__(self, schema: Any = None, conf: dict[str, Any] | None = None, is_key: bool = False):
        self.is_key = is_key
        self._schema_arg = schema
        self.client: SchemaRegistryClient | None = None
        self.auto_register, self.use_latest, self.normalize = True, False, False
        self.subject_strategy = topic_name_strategy
        if conf is not None:
            self.configure(conf)

    def configure(self, configs: dict[str, Any]) -> None:
        if configs.get("schema.registry.url"):
            self.client = client_for(configs)
        self.auto_register = _bool(configs.get("auto.register.schemas"), True)
        self.use_latest = _bool(configs.get("use.latest.version"), False)
        self.normalize = _bool(configs.get("normalize.schemas"), False)
        side = "key" if self.is_key else "value"
        self.subject_strategy = strategy(configs.get(f"{side}.subject.name.strategy"))
        self.configure_type(configs)

    def configure_type(self, configs: dict[str, Any]) -> None:
        pass

    def _registry(self) -> SchemaRegistryClient:
        if self.client is None:
            raise SerializationError("Missing required configuration \"schema.registry.url\" which has no "
                                     "default value.")
        return self.client

    def subject(self, topic: str, record_name: str | None) -> str:
        return self.subject_strategy(topic, self.is_key, record_name)

    def schema_id(self, topic: str, record_name: str | None, schema: dict) -> tuple[int, dict]:
        """(id, the registered schema) to write with: the subject's latest, or this schema registered or looked up."""
        reg, subject = self._registry(), self.subject(topic, record_name)
        try:
            if self.use_latest:
                latest = reg.latest(subject)
                return latest["id"], latest
            if self.auto_register:
                return reg.register(subject, schema, self.normalize), schema
            return reg.lookup_id(subject, schema, self.normalize), schema
        except SchemaRegistryError as e:
            raise SerializationError(f"Error registering or looking up the schema of subject {subject}: "
                                     f"{e}") from e

    def writer_schema(self, schema_id: int, topic: str) -> dict:
        try:
            return self._registry().schema(schema_id)
        except SchemaRegistryError as e:
            raise SerializationError(f"Error retrieving schema id {schema_id}: {e}") from e

    def close(self) -> None:
        pass
