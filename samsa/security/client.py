"""A client's security from Kafka's client keys: ``security.protocol``, ``ssl.*``,
``sasl.mechanism`` and ``sasl.jaas.config`` (``username``/``password`` of Plain or Scram
login modules; ``unsecuredLoginStringClaim_sub`` of OAuthBearer's unsecured login).
``sasl.username``/``sasl.password`` (librdkafka's names) are read too."""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from typing import Any, Callable

from samsa.security.jaas import parse_jaas
from samsa.security.sasl import SUPPORTED, ClientMechanism
from samsa.security.tls import client_context

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


@dataclass
class ClientSecurity:
    protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    mechanism: str = "GSSAPI"
    username: str | None = None
    password: str | None = None
    options: dict[str, str] = field(default_factory=dict)

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    def sasl_client(self) -> ClientMechanism:
        return ClientMechanism(self.mechanism, self.username, self.password, self.options)


def client_security(get: Callable[[str], Any]) -> ClientSecurity | None:
    """None for PLAINTEXT (nothing to do); ValueError naming a bad setting."""
    protocol = (get("security.protocol") or "PLAINTEXT").upper()
    if protocol not in PROTOCOLS:
        raise ValueError(f"security.protocol={protocol}: expected one of {', '.join(PROTOCOLS)}")
    if protocol == "PLAINTEXT":
        return None
    sec = ClientSecurity(protocol)
    if protocol in ("SSL", "SASL_SSL"):
        sec.ssl_context = client_context(get)
    if sec.sasl:
        sec.mechanism = (get("sasl.mechanism") or "GSSAPI").upper()
        if sec.mechanism not in SUPPORTED:
            raise ValueError(f"sasl.mechanism={sec.mechanism} is not supported (Samsa has {', '.join(SUPPORTED)})")
        jaas = get("sasl.jaas.config")
        options = parse_jaas(jaas).options if jaas else {}
        sec.options = options
        sec.username = options.get("username") or get("sasl.username")
        sec.password = options.get("password") or get("sasl.password")
        if sec.mechanism != "OAUTHBEARER" and not (sec.username and sec.password is not None):
            raise ValueError(f"sasl.mechanism={sec.mechanism} needs a username and password in sasl.jaas.config")
    return sec


def properties_getter(props: dict[str, Any]) -> Callable[[str], Any]:
    """A getter over a plain dict of client properties (list values split on commas)."""
    lists = ("ssl.enabled.protocols", "ssl.cipher.suites")

    def get(key: str) -> Any:
        v = props.get(key)
        if key in lists and isinstance(v, str):
            return [x.strip() for x in v.split(",") if x.strip()]
        if key == "ssl.endpoint.identification.algorithm" and key not in props:
            return "https"
        return v
    return get
