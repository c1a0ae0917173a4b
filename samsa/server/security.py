"""Each listener's security, as its config describes it: the TLS context, the SASL
mechanisms with their JAAS lines, and the per-connection authentication state.

The pieces are :mod:`samsa.security`'s; this module reads the broker's config for one
listener (``listener.name.<l>.<key>`` before ``<key>``) and keeps what a connection needs.
"""

from __future__ import annotations

import enum
import logging
import ssl
import time
from dataclasses import dataclass, field
from typing import Callable

from samsa.broker_config import BrokerConfig, ConfigError
from samsa.protocol import errors
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
    failed_auth_delay_ms: int = 100  # connection.failed.authentication.delay.ms (KIP-306)
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
            jaas = config.jaas_config(name, mech)
            if mech == "PLAIN" and not jaas:
                raise ConfigError(f"Listener {name}: PLAIN needs its users in "
                                  f"listener.name.{name.lower()}.plain.sasl.jaas.config")
            try:
                sec.new_mechanism(mech)  # the JAAS line reads
            except (ValueError, SaslAuthenticationError) as e:
                raise ConfigError(f"Listener {name}, {mech}: {e}") from None
            sec.jaas[mech] = jaas
        sec.reauth_ms = get("connections.max.reauth.ms") or 0
        sec.failed_auth_delay_ms = config["connection.failed.authentication.delay.ms"]
    return sec


class SaslState(enum.Enum):
    """Where a SASL connection's authentication stands (Kafka's SaslServerAuthenticator states)."""

    HANDSHAKE = "awaiting SaslHandshake"  # new: ApiVersions and SaslHandshake only
    TOKENS = "awaiting SaslAuthenticate"  # SaslHandshake v1+ accepted: tokens come in SaslAuthenticate
    RAW_TOKENS = "awaiting bare tokens"  # SaslHandshake v0 accepted: tokens come as bare size-prefixed frames
    AUTHENTICATED = "authenticated"  # requests pass until the session expires (KIP-368)
    REAUTHENTICATING = "re-authenticating"  # KIP-368: a new exchange on an open session
    FAILED = "failed"  # the failure is answered after connection.failed.authentication.delay.ms, then closed


class SaslEvent(enum.Enum):
    HANDSHAKE_V0 = "SaslHandshake v0"
    HANDSHAKE = "SaslHandshake v1+"
    TOKEN = "a token, exchange not complete"
    COMPLETE = "a token completing the exchange"


S, E = SaslState, SaslEvent
# The one transition table. A pair not in it is an illegal SASL state (ILLEGAL_SASL_STATE, the
# connection closed); any failure goes to FAILED from wherever it happens.
TRANSITIONS: dict[tuple[SaslState, SaslEvent], SaslState] = {
    (S.HANDSHAKE, E.HANDSHAKE_V0): S.RAW_TOKENS,
    (S.HANDSHAKE, E.HANDSHAKE): S.TOKENS,
    (S.RAW_TOKENS, E.TOKEN): S.RAW_TOKENS,
    (S.RAW_TOKENS, E.COMPLETE): S.AUTHENTICATED,
    (S.TOKENS, E.TOKEN): S.TOKENS,
    (S.TOKENS, E.COMPLETE): S.AUTHENTICATED,
    (S.AUTHENTICATED, E.HANDSHAKE): S.REAUTHENTICATING,  # KIP-368 re-authenticates with v1+ only
    (S.REAUTHENTICATING, E.TOKEN): S.REAUTHENTICATING,
    (S.REAUTHENTICATING, E.COMPLETE): S.AUTHENTICATED,
}
# States in which ordinary requests pass (while the session has not expired).
_OPEN = frozenset({S.AUTHENTICATED, S.REAUTHENTICATING})
del S, E


class SaslStateError(Exception):
    """A SASL request out of order (ILLEGAL_SASL_STATE)."""


class SaslSession:
    """A SASL connection's authentication as an explicit state machine: the state, the mechanism
    under way, who the client proved to be and when that proof expires (KIP-368).

    The dispatcher (bare tokens after SaslHandshake v0, and the gate before every request) and
    the SaslHandshake/SaslAuthenticate handlers drive it through the same three calls:
    :meth:`handshake`, :meth:`authenticate` and :meth:`admits`. Whichever path completes the
    exchange, the principal reaches the connection through ``on_principal``.
    """

    def __init__(self, security: ListenerSecurity, peer: str,
                 on_principal: Callable[[KafkaPrincipal], None] = lambda principal: None):
        self.security = security
        self.peer = peer
        self.on_principal = on_principal
        self.state = SaslState.HANDSHAKE
        self.mechanism: ServerMechanism | None = None
        self.mechanism_name = ""
        self.principal: KafkaPrincipal | None = None
        self.expires_at = 0.0  # time.monotonic(); 0: never
        self.failure = ""  # why, once FAILED

    def _to(self, event: SaslEvent) -> None:
        new = TRANSITIONS.get((self.state, event))
        if new is None:
            raise SaslStateError(f"Unexpected {event.value} while {self.state.value}")
        self.state = new

    def fail(self, reason: str) -> None:
        """To FAILED, with Kafka's one log line naming the client."""
        log_failure(self.peer, reason, self.mechanism_name)
        self.state = SaslState.FAILED
        self.failure = reason
        self.mechanism = None

    @property
    def raw_tokens(self) -> bool:
        return self.state is SaslState.RAW_TOKENS

    @property
    def failed(self) -> bool:
        return self.state is SaslState.FAILED

    def admits(self) -> bool:
        """Ordinary requests may pass: authenticated (or re-authenticating) and not expired."""
        return self.state in _OPEN and (not self.expires_at or time.monotonic() < self.expires_at)

    def handshake(self, mechanism: str, version: int) -> int:
        """SaslHandshake: the error code to answer (0, UNSUPPORTED_SASL_MECHANISM, ILLEGAL_SASL_STATE);
        on an error the session has FAILED."""
        mechanism = mechanism.upper()
        try:
            self._to(SaslEvent.HANDSHAKE_V0 if version == 0 else SaslEvent.HANDSHAKE)
        except SaslStateError as e:
            self.fail(str(e))
            return errors.E_ILLEGAL_SASL_STATE
        if mechanism not in self.security.mechanisms:
            self.fail(f"Unsupported SASL mechanism {mechanism}")
            return errors.E_UNSUPPORTED_SASL_MECHANISM
        self.mechanism = self.security.new_mechanism(mechanism)
        self.mechanism_name = mechanism
        return 0

    def authenticate(self, token: bytes) -> tuple[int, bytes, int]:
        """One client token (in SaslAuthenticate or bare after a v0 handshake): the error code
        (0, SASL_AUTHENTICATION_FAILED, ILLEGAL_SASL_STATE), the server's token and, once
        complete, the session lifetime in ms (0: none). On an error the session has FAILED and
        ``failure`` says why."""
        if self.mechanism is None:
            self.fail(f"Unexpected SaslAuthenticate while {self.state.value}")
            return errors.E_ILLEGAL_SASL_STATE, b"", 0
        again = self.state is SaslState.REAUTHENTICATING
        try:
            reply = self.mechanism.respond(token)
            if not self.mechanism.complete:
                self._to(SaslEvent.TOKEN)
                return 0, reply, 0
            principal = self.mechanism.principal()
            if again and principal != self.principal:
                raise SaslAuthenticationError(f"Cannot change principals during re-authentication from "
                                              f"{self.principal}: {principal}")
            lifetimes = [x for x in (self.security.reauth_ms, self.mechanism.lifetime_ms()) if x]
            self._to(SaslEvent.COMPLETE)
        except SaslAuthenticationError as e:
            self.fail(str(e))
            return errors.E_SASL_AUTHENTICATION_FAILED, b"", 0
        lifetime = min(lifetimes) if lifetimes else 0
        self.expires_at = time.monotonic() + lifetime / 1000 if lifetime else 0.0
        self.mechanism = None
        self.principal = principal
        self.on_principal(principal)
        if again:
            log.info("Re-authenticated %s with /%s [mechanism %s], session lifetime %d ms", principal,
                     self.peer.rsplit(":", 1)[0], self.mechanism_name, lifetime)
        return 0, reply, lifetime


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
