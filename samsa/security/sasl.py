"""SASL mechanisms, server and client sides: PLAIN, SCRAM-SHA-256/512 and OAUTHBEARER with
Kafka's unsecured JWS tokens (``alg: none``, for development, as Kafka's
``OAuthBearerUnsecuredLoginCallbackHandler``/``ValidatorCallbackHandler``).

A server mechanism answers each client token (``respond``) until ``complete``; any failure
raises :class:`SaslAuthenticationError` with the message the client gets.
"""

from __future__ import annotations

import base64
import hmac
import json
import time
from typing import Callable, Protocol

from samsa.security.jaas import JaasEntry, parse_jaas
from samsa.security.principal import KafkaPrincipal
from samsa.security.scram import MECHANISMS as SCRAM_MECHANISMS
from samsa.security.scram import ScramClient, ScramCredential, ScramError, ScramServer

SUPPORTED = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


class SaslAuthenticationError(Exception):
    """Authentication failed; the message is what the client is told (SASL_AUTHENTICATION_FAILED)."""


class ServerMechanism(Protocol):
    complete: bool

    def respond(self, token: bytes) -> bytes: ...
    def principal(self) -> KafkaPrincipal: ...
    def lifetime_ms(self) -> int | None: ...


class PlainServer:
    """RFC 4616: ``authzid NUL user NUL password`` against the JAAS line's ``user_<name>`` options."""

    def __init__(self, users: dict[str, str]):
        self.users = users
        self.complete = False
        self.user = ""

    def respond(self, token: bytes) -> bytes:
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise SaslAuthenticationError("Invalid SASL/PLAIN response: expected 3 tokens")
        authzid, user, password = (p.decode("utf-8", "replace") for p in parts)
        if not user:
            raise SaslAuthenticationError("Authentication failed: username not specified")
        if authzid and authzid != user:
            raise SaslAuthenticationError("Authentication failed: Client requested an authorization id that is "
                                          "different from username")
        expected = self.users.get(user)
        if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
            raise SaslAuthenticationError("Authentication failed: Invalid username or password")
        self.user = user
        self.complete = True
        return b""

    def principal(self) -> KafkaPrincipal:
        return KafkaPrincipal("User", self.user)

    def lifetime_ms(self) -> int | None:
        return None


class ScramServerMechanism:
    def __init__(self, mechanism: str, lookup: Callable[[str], ScramCredential | None]):
        self.exchange = ScramServer(mechanism, lookup)

    @property
    def complete(self) -> bool:
        return self.exchange.complete

    def respond(self, token: bytes) -> bytes:
        try:
            return self.exchange.respond(token)
        except ScramError as e:
            raise SaslAuthenticationError(str(e)) from None

    def principal(self) -> KafkaPrincipal:
        return KafkaPrincipal("User", self.exchange.username)

    def lifetime_ms(self) -> int | None:
        return None


def _b64url(data: str) -> bytes:
    return base64.urlsafe_b64decode(data + "=" * (-len(data) % 4))


class OAuthBearerUnsecuredServer:
    """RFC 7628's client response (``n,,\\x01auth=Bearer <token>\\x01\\x01``) with an unsecured
    JWS: header ``{"alg":"none"}``, a ``sub`` claim (``unsecuredValidatorPrincipalClaimName``)
    and an ``exp`` in the future."""

    def __init__(self, options: dict[str, str]):
        self.claim = options.get("unsecuredValidatorPrincipalClaimName", "sub")
        self.scope = [s for s in options.get("unsecuredValidatorRequiredScope", "").split(",") if s]
        self.complete = False
        self._principal = ""
        self._expires_ms: int | None = None

    def respond(self, token: bytes) -> bytes:
        text = token.decode("utf-8", "replace")
        header, _, kvs = text.partition("\x01")
        if not header.startswith(("n,", "y,")):
            raise SaslAuthenticationError("Invalid OAUTHBEARER client first message")
        pairs = dict(kv.split("=", 1) for kv in kvs.split("\x01") if "=" in kv)
        auth = pairs.get("auth", "")
        if not auth.startswith("Bearer "):
            raise SaslAuthenticationError("Invalid OAUTHBEARER client first message: no Bearer token")
        parts = auth[7:].strip().split(".")
        try:
            if len(parts) != 3:
                raise ValueError("a JWS has three parts")
            head, claims = json.loads(_b64url(parts[0])), json.loads(_b64url(parts[1]))
        except (ValueError, json.JSONDecodeError) as e:
            raise SaslAuthenticationError(f"Authentication failed: invalid unsecured JWS ({e})") from None
        if head.get("alg") != "none" or parts[2]:
            raise SaslAuthenticationError("Authentication failed: only unsecured JWS (alg none) tokens are accepted")
        sub = claims.get(self.claim)
        if not isinstance(sub, str) or not sub:
            raise SaslAuthenticationError(f"Authentication failed: no '{self.claim}' claim in the token")
        exp = claims.get("exp")
        now = time.time()
        if not isinstance(exp, (int, float)) or exp <= now:
            raise SaslAuthenticationError("Authentication failed: the token has expired (exp)")
        scopes = claims.get("scope", [])
        scopes = scopes.split() if isinstance(scopes, str) else scopes
        missing = [s for s in self.scope if s not in scopes]
        if missing:
            raise SaslAuthenticationError(f"Authentication failed: the token lacks the required scope {missing}")
        self._principal = sub
        self._expires_ms = int((exp - now) * 1000)
        self.complete = True
        return b""

    def principal(self) -> KafkaPrincipal:
        return KafkaPrincipal("User", self._principal)

    def lifetime_ms(self) -> int | None:
        return self._expires_ms


def server_mechanism(mechanism: str, jaas: str | None,
                     scram_lookup: Callable[[str, str], ScramCredential | None]) -> ServerMechanism:
    """The server side of ``mechanism`` as a listener's JAAS line configures it."""
    entry = parse_jaas(jaas) if jaas else JaasEntry("")
    if mechanism == "PLAIN":
        users = {k[5:]: v for k, v in entry.options.items() if k.startswith("user_")}
        return PlainServer(users)
    if mechanism in SCRAM_MECHANISMS:
        return ScramServerMechanism(mechanism, lambda user: scram_lookup(mechanism, user))
    if mechanism == "OAUTHBEARER":
        return OAuthBearerUnsecuredServer(entry.options)
    raise SaslAuthenticationError(f"Unsupported SASL mechanism {mechanism}")


# ---------------------------------------------------------------- clients


def unsecured_jws(sub: str, lifetime_s: float = 3600, scope: list[str] | None = None, **claims) -> str:
    """An unsecured JWS as Kafka's OAuthBearerUnsecuredLoginCallbackHandler makes it."""
    enc = lambda d: base64.urlsafe_b64encode(json.dumps(d).encode()).decode().rstrip("=")  # noqa: E731
    now = time.time()
    body = {"sub": sub, "iat": int(now), "exp": int(now + lifetime_s), **claims}
    if scope:
        body["scope"] = scope
    return f"{enc({'alg': 'none'})}.{enc(body)}."


class ClientMechanism:
    """The client's tokens in order: ``first()``, then ``next(server_token)`` until it returns None."""

    def __init__(self, mechanism: str, username: str | None, password: str | None, options: dict[str, str]):
        self.mechanism = mechanism
        if mechanism in SCRAM_MECHANISMS:
            self.scram = ScramClient(mechanism, username or "", password or "")
        self.username, self.password, self.options = username or "", password or "", options
        self.step = 0

    def first(self) -> bytes:
        if self.mechanism == "PLAIN":
            return b"\0" + self.username.encode() + b"\0" + self.password.encode()
        if self.mechanism in SCRAM_MECHANISMS:
            return self.scram.first()
        if self.mechanism == "OAUTHBEARER":
            o = self.options
            sub = o.get("unsecuredLoginStringClaim_sub") or self.username
            if not sub:
                raise SaslAuthenticationError("OAUTHBEARER needs unsecuredLoginStringClaim_sub in sasl.jaas.config")
            token = unsecured_jws(sub, float(o.get("unsecuredLoginLifetimeSeconds", 3600)),
                                  [s for s in o.get("unsecuredLoginListClaim_scope", "").split(",") if s] or None)
            return f"n,,\x01auth=Bearer {token}\x01\x01".encode()
        raise SaslAuthenticationError(f"Unsupported SASL mechanism {self.mechanism}")

    def next(self, server_token: bytes) -> bytes | None:
        self.step += 1
        if self.mechanism in SCRAM_MECHANISMS:
            try:
                if self.step == 1:
                    return self.scram.final(server_token)
                self.scram.verify(server_token)
            except ScramError as e:
                raise SaslAuthenticationError(str(e)) from None
        return None
