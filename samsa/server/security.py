"""Each listener's security, as its config describes it: the TLS context, the SASL
mechanisms with their JAAS lines, and the per-connection authentication state.

The pieces are :mod:`samsa.security`'s; this module reads the broker's config for one
listener (``listener.name.<l>.<key>`` before ``<key>``) and keeps what a connection needs.
"""

from __future__ import annotations

import logging
import ssl
import time
from dataclasses import dataclass, field
from typing import Callable

from samsa.broker_config import BrokerConfig, ConfigError
from samsa.security.principal import ANONYMOUS, KafkaPrincipal, SslPrincipalMapper
from samsa.security.sasl import SUPPORTED, SaslAuthenticationError, ServerMechanism, server_mechanism
from samsa.security.scram import ScramCredential
from samsa.security.tls import SslConfigError, server_context

log = logging.getLogger("samsa.server.authentication")


@dataclass
class ListenerSecurity:
    name: str
    protocol: str
    ssl_context: ssl.SSLContext | None = None
    principal_mapper: SslPrincipalMapper | None = None
    mechanisms: list[str] = field(default_factory=list)
    jaas: dict[str, str | None] = field(default_factory=dict)  # mechanism -> its JAAS line
    reauth_ms: int = 0
    scram_lookup: Callable[[str, str], ScramCredential | None] = lambda mechanism, user: None

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    def new_mechanism(self, mechanism: str) -> ServerMechanism:
        return server_mechanism(mechanism, self.jaas.get(mechanism), self.scram_lookup)


def listener_security(config: BrokerConfig, name: str,
                      scram_lookup: Callable[[str, str], ScramCredential | None]) -> ListenerSecurity:
    """What a listener needs, checked at start-up: ConfigError names the problem."""
    protocol = config.security_protocol(name)
    sec = ListenerSecurity(name, protocol, scram_lookup=scram_lookup)
    get = lambda key: config.listener_value(name, key)  # noqa: E731
    if protocol in ("SSL", "SASL_SSL"):
        try:
            sec.ssl_context = server_context(get)
            sec.principal_mapper = SslPrincipalMapper(get("ssl.principal.mapping.rules") or "DEFAULT")
        except (SslConfigError, ValueError) as e:
            raise ConfigError(f"Listener {name}: {e}") from None
    if sec.sasl:
        sec.mechanisms = [m.upper() for m in get("sasl.enabled.mechanisms") or []]
        unknown = [m for m in sec.mechanisms if m not in SUPPORTED]
        if unknown:
            raise ConfigError(f"Listener {name}: SASL mechanism {unknown[0]} is not supported "
                              f"(sasl.enabled.mechanisms; Samsa has {', '.join(SUPPORTED)})")
        if not sec.mechanisms:
            raise ConfigError(f"Listener {name}: sasl.enabled.mechanisms is empty")
        for mech in sec.mechanisms:
            jaas = (config.unknown.get(f"listener.name.{name.lower()}.{mech.lower()}.sasl.jaas.config")
                    or config.unknown.get(f"{mech.lower()}.sasl.jaas.config") or get("sasl.jaas.config"))
            if mech == "PLAIN" and not jaas:
                raise ConfigError(f"Listener {name}: PLAIN needs its users in "
                                  f"listener.name.{name.lower()}.plain.sasl.jaas.config")
            try:
                sec.new_mechanism(mech)  # the JAAS line reads
            except (ValueError, SaslAuthenticationError) as e:
                raise ConfigError(f"Listener {name}, {mech}: {e}") from None
            sec.jaas[mech] = jaas
        sec.reauth_ms = get("connections.max.reauth.ms") or 0
    return sec


class SaslSession:
    """A SASL connection's authentication: the mechanism under way, who it proved to be,
    and when that proof expires (KIP-368)."""

    def __init__(self, security: ListenerSecurity, peer: str):
        self.security = security
        self.peer = peer
        self.mechanism: ServerMechanism | None = None
        self.mechanism_name = ""
        self.raw_tokens = False  # SaslHandshake v0: tokens follow as bare size-prefixed frames
        self.principal: KafkaPrincipal | None = None
        self.authenticated = False
        self.expires_at = 0.0  # time.monotonic(); 0: never

    @property
    def open(self) -> bool:
        """Authenticated and not expired: ordinary requests may pass."""
        return self.authenticated and (not self.expires_at or time.monotonic() < self.expires_at)

    def handshake(self, mechanism: str, version: int) -> bool:
        if mechanism not in self.security.mechanisms:
            return False
        self.mechanism = self.security.new_mechanism(mechanism)
        self.mechanism_name = mechanism
        self.raw_tokens = version == 0
        return True

    def authenticate(self, token: bytes) -> tuple[bytes, int]:
        """The server's token and, once complete, the session lifetime in ms (0: none).
        SaslAuthenticationError when the client failed."""
        if self.mechanism is None:
            raise SaslAuthenticationError("SaslAuthenticate before SaslHandshake")
        reply = self.mechanism.respond(token)
        if not self.mechanism.complete:
            return reply, 0
        principal = self.mechanism.principal()
        if self.authenticated and self.principal is not None and principal != self.principal:
            raise SaslAuthenticationError(f"Cannot change principals during re-authentication from "
                                          f"{self.principal}: {principal}")
        self.principal = principal
        self.authenticated = True
        lifetimes = [x for x in (self.security.reauth_ms, self.mechanism.lifetime_ms()) if x]
        lifetime = min(lifetimes) if lifetimes else 0
        self.expires_at = time.monotonic() + lifetime / 1000 if lifetime else 0.0
        self.mechanism = None
        return reply, lifetime


def log_failure(peer: str, reason: str, mechanism: str = "") -> None:
    """One line per failed authentication, with the client's address (Kafka's wording)."""
    host = peer.rsplit(":", 1)[0]
    log.warning("Failed authentication with /%s (%s)%s", host, reason,
                f" [mechanism {mechanism}]" if mechanism else "")


def ssl_principal(security: ListenerSecurity, ssl_object) -> KafkaPrincipal:
    cert = ssl_object.getpeercert() if ssl_object is not None else None
    if not cert or security.principal_mapper is None:
        return ANONYMOUS
    return security.principal_mapper.principal(cert.get("subject"))
