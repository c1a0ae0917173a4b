"""The registry's properties file: the Schema Registry's keys, meanings and defaults."""

from __future__ import annotations

import logging
import socket
from typing import Any
from urllib.parse import urlparse

from samsa.schema_registry import schemas

DEFAULTS = {
    "listeners": "http://0.0.0.0:8081",
    "kafkastore.topic": "_schemas",
    "kafkastore.topic.replication.factor": "3",
    "kafkastore.timeout.ms": "500",
    "kafkastore.init.timeout.ms": "60000",
    "schema.compatibility.level": "backward",
    "schema.registry.group.id": "schema-registry",
    "leader.eligibility": "true",
    "mode.mutability": "true",
    # Samsa's: how long the group coordinator waits for a silent (killed) registry process
    # before another one is elected to write (the registry's own group session timeout).
    "schema.registry.group.session.timeout.ms": "10000",
}


log = logging.getLogger("samsa.schema_registry")


class RegistryConfigError(ValueError):
    pass


def registry_config(props: dict[str, str]) -> dict[str, str]:
    config = {**DEFAULTS, **props}
    if "avro.compatibility.level" in props and "schema.compatibility.level" not in props:
        config["schema.compatibility.level"] = props["avro.compatibility.level"]  # the older name
    if not config.get("kafkastore.bootstrap.servers"):
        raise RegistryConfigError("Missing required configuration \"kafkastore.bootstrap.servers\" which has no "
                                  "default value.")
    if config["schema.compatibility.level"].upper() not in schemas.LEVELS:
        raise RegistryConfigError(f"Invalid value {config['schema.compatibility.level']} for configuration "
                                  "schema.compatibility.level")
    for key in ("kafkastore.topic.replication.factor", "kafkastore.timeout.ms", "kafkastore.init.timeout.ms",
                "schema.registry.group.session.timeout.ms"):
        try:
            int(config[key])
        except ValueError:
            raise RegistryConfigError(f"Invalid value {config[key]} for configuration {key}: Not a number of "
                                      "type INT") from None
    listener_address(config["listeners"])
    config["kafkastore.bootstrap.servers"] = bootstrap_brokers(config["kafkastore.bootstrap.servers"],
                                                               config.get("kafkastore.security.protocol",
                                                                          "PLAINTEXT"))
    return config


def client_config(config: dict[str, str]) -> dict[str, Any]:
    """The broker connection's keys: ``kafkastore.bootstrap.servers`` and every other
    ``kafkastore.security.protocol`` / ``kafkastore.ssl.*`` / ``kafkastore.sasl.*`` without the prefix."""
    out: dict[str, Any] = {"bootstrap.servers": bootstrap_brokers(config["kafkastore.bootstrap.servers"],
                                                                 config.get("kafkastore.security.protocol",
                                                                            "PLAINTEXT"))}
    for k, v in config.items():
        if k.startswith(("kafkastore.security.", "kafkastore.ssl.", "kafkastore.sasl.")):
            out[k[len("kafkastore."):]] = v
    return out


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def bootstrap_brokers(endpoints: str, security_protocol: str) -> str:
    """``kafkastore.bootstrap.servers`` as Confluent's registry reads it: a list of endpoints, each
    ``host:port`` or ``PROTOCOL://host:port``. Those whose protocol is not ``kafkastore.security.protocol``
    are left out (a warning each); a bare ``host:port`` is taken as that protocol's."""
    protocol = security_protocol.strip().upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise RegistryConfigError("Only PLAINTEXT, SSL, SASL_PLAINTEXT, and SASL_SSL Kafka endpoints are "
                                  "supported.")
    kept = []
    for endpoint in (e.strip() for e in endpoints.split(",")):
        if not endpoint:
            continue
        scheme, sep, _ = endpoint.partition("://")
        if sep and scheme.upper() != protocol:
            log.warning("Ignoring Kafka broker endpoint %s that does not match the setting for "
                        "kafkastore.security.protocol=%s", endpoint, protocol)
            continue
        kept.append(endpoint if sep else f"{protocol}://{endpoint}")
    if not kept:
        raise RegistryConfigError("No supported Kafka endpoints are configured. kafkastore.bootstrap.servers "
                                  "must have at least one endpoint matching kafkastore.security.protocol.")
    return ",".join(kept)


def listener_address(listeners: str) -> tuple[str, int]:
    """``listeners=http://:8081`` → ("0.0.0.0", 8081); the first listener is served."""
    first = listeners.split(",")[0].strip()
    url = urlparse(first if "://" in first else "http://" + first)
    if url.scheme not in ("http", ""):
        raise RegistryConfigError(f"Invalid listener {first}: only http:// listeners are supported")
    return url.hostname or "0.0.0.0", url.port or 8081


def identity(config: dict[str, str], port: int) -> dict:
    host, _ = listener_address(config["listeners"])
    if config.get("host.name"):
        host = config["host.name"]
    elif host in ("0.0.0.0", "::", ""):
        host = socket.gethostname()
    return {"version": 1, "host": host, "port": port, "master_eligibility":
            config["leader.eligibility"].lower() == "true", "scheme": "http"}
