"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka uses them: credentials
stored salted and hashed, the server's exchange, and the client's.

A stored credential is Kafka's string ``salt=<b64>,stored_key=<b64>,server_key=<b64>,
iterations=<n>`` (ZooKeeper ``/config/users/<user>``): never the password.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
from dataclasses import dataclass
from typing import Callable

from samsa.protocol import errors

MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MECHANISM_TYPES = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}  # the ScramMechanism enum of the protocol
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384


class ScramError(Exception):
    """The exchange failed: a bad message, an unknown user or a wrong password."""


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_text(self) -> str:
        b = lambda x: base64.b64encode(x).decode()  # noqa: E731
        return (f"salt={b(self.salt)},stored_key={b(self.stored_key)},server_key={b(self.server_key)},"
                f"iterations={self.iterations}")

    @classmethod
    def from_text(cls, text: str) -> "ScramCredential":
        d = dict(part.split("=", 1) for part in text.split(","))
        return cls(base64.b64decode(d["salt"]), base64.b64decode(d["stored_key"]),
                   base64.b64decode(d["server_key"]), int(d["iterations"]))


def _hmac(digest: str, key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, digest).digest()


def salted_password(digest: str, password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(digest, password.encode(), salt, iterations)


def credential_from_salted(digest: str, salt: bytes, salted: bytes, iterations: int) -> ScramCredential:
    client_key = _hmac(digest, salted, b"Client Key")
    return ScramCredential(salt, hashlib.new(digest, client_key).digest(), _hmac(digest, salted, b"Server Key"),
                           iterations)


def make_credential(mechanism: str, password: str, iterations: int = 4096, salt: bytes | None = None) -> ScramCredential:
    digest = MECHANISMS[mechanism]
    salt = salt or os.urandom(32)
    return credential_from_salted(digest, salt, salted_password(digest, password, salt, iterations), iterations)


def _attrs(message: str) -> dict[str, str]:
    out = {}
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=":
            raise ScramError(f"Invalid SCRAM message attribute {part!r}")
        out[part[0]] = part[2:]
    return out


def _saslname(name: str) -> str:
    return name.replace("=2C", ",").replace("=3D", "=")


class ScramServer:
    """One server exchange: client-first -> server-first, client-final -> server-final."""

    def __init__(self, mechanism: str, lookup):
        self.mechanism = mechanism
        self.digest = MECHANISMS[mechanism]
        self.lookup = lookup  # username -> ScramCredential | None
        self.state = 0
        self.username = ""
        self.complete = False

    def respond(self, token: bytes) -> bytes:
        text = token.decode("utf-8", "replace")
        if self.state == 0:
            m = re.fullmatch(r"([ny]|p=[^,]*),(a=[^,]*)?,(.*)", text, re.S)
            if m is None:
                raise ScramError("Invalid SCRAM client first message")
            if m.group(1).startswith("p"):
                raise ScramError("SCRAM channel binding is not supported")
            self.client_first_bare = m.group(3)
            attrs = _attrs(self.client_first_bare)
            if "n" not in attrs or "r" not in attrs:
                raise ScramError("Invalid SCRAM client first message")
            self.username = _saslname(attrs["n"])
            authzid = m.group(2)
            if authzid and _saslname(authzid[2:]) != self.username:
                raise ScramError("Authentication failed: Client requested an authorization id that is "
                                 "different from username")
            self.credential = self.lookup(self.username)
            if self.credential is None:
                raise ScramError(f"Authentication failed during authentication due to invalid credentials with "
                                 f"SASL mechanism {self.mechanism}")
            self.nonce = attrs["r"] + base64.b64encode(os.urandom(18)).decode()
            c = self.credential
            self.server_first = f"r={self.nonce},s={base64.b64encode(c.salt).decode()},i={c.iterations}"
            self.state = 1
            return self.server_first.encode()
        if self.state == 1:
            without_proof, sep, proof = text.rpartition(",p=")
            if not sep:
                raise ScramError("Invalid SCRAM client final message")
            attrs = _attrs(without_proof)
            # Kafka checks endsWith: librdkafka before 2.1 sends its own nonce twice.
            if not attrs.get("r", "").endswith(self.nonce):
                raise ScramError("Invalid client nonce in the final client message.")
            auth_message = f"{self.client_first_bare},{self.server_first},{without_proof}".encode()
            c = self.credential
            signature = _hmac(self.digest, c.stored_key, auth_message)
            try:
                client_key = bytes(a ^ b for a, b in zip(base64.b64decode(proof), signature))
            except ValueError:
                raise ScramError("Invalid SCRAM client proof") from None
            if len(client_key) != len(signature) or not hmac.compare_digest(
                    hashlib.new(self.digest, client_key).digest(), c.stored_key):
                raise ScramError(f"Authentication failed during authentication due to invalid credentials with "
                                 f"SASL mechanism {self.mechanism}")
            self.state = 2
            self.complete = True
            server_signature = _hmac(self.digest, c.server_key, auth_message)
            return b"v=" + base64.b64encode(server_signature)
        raise ScramError("SCRAM exchange already complete")


class ScramClient:
    """The client's side of one exchange."""

    def __init__(self, mechanism: str, username: str, password: str):
        self.digest = MECHANISMS[mechanism]
        self.username, self.password = username, password
        self.nonce = base64.b64encode(os.urandom(18)).decode()

    def first(self) -> bytes:
        name = self.username.replace("=", "=3D").replace(",", "=2C")
        self.client_first_bare = f"n={name},r={self.nonce}"
        return f"n,,{self.client_first_bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        text = server_first.decode()
        attrs = _attrs(text)
        if not attrs.get("r", "").startswith(self.nonce):
            raise ScramError("Invalid server nonce in SCRAM server first message")
        iterations = int(attrs["i"])
        if iterations < MIN_ITERATIONS:
            raise ScramError(f"SCRAM iterations {iterations} below the minimum {MIN_ITERATIONS}")
        salted = salted_password(self.digest, self.password, base64.b64decode(attrs["s"]), iterations)
        without_proof = f"c=biws,r={attrs['r']}"
        auth_message = f"{self.client_first_bare},{text},{without_proof}".encode()
        client_key = _hmac(self.digest, salted, b"Client Key")
        stored_key = hashlib.new(self.digest, client_key).digest()
        proof = bytes(a ^ b for a, b in zip(client_key, _hmac(self.digest, stored_key, auth_message)))
        self.expected = _hmac(self.digest, _hmac(self.digest, salted, b"Server Key"), auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        attrs = _attrs(server_final.decode())
        if "e" in attrs:
            raise ScramError(f"SCRAM authentication failed: {attrs['e']}")
        if not hmac.compare_digest(base64.b64decode(attrs.get("v", "")), self.expected):
            raise ScramError("Invalid SCRAM server signature")


def plan_alterations(req: dict, has_credential: Callable[[str, str], bool]
                     ) -> tuple[dict[str, dict], dict[str, dict[str, ScramCredential | None]]]:
    """AlterUserScramCredentials checked as Kafka checks it: the users refused (user -> result),
    and the credentials to write (user -> mechanism -> credential, or None to delete)."""
    by_type = {v: k for k, v in MECHANISM_TYPES.items()}
    results: dict[str, dict] = {}
    changes: dict[str, dict[str, ScramCredential | None]] = {}

    def fail(user: str, code: int, message: str) -> None:
        results[user] = {"user": user, "error_code": code, "error_message": message}

    for d in req["deletions"]:
        mech = by_type.get(d["mechanism"])
        if not d["name"]:
            fail(d["name"], errors.E_UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
        elif mech is None:
            fail(d["name"], errors.E_UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
        elif not has_credential(d["name"], mech):
            fail(d["name"], errors.E_RESOURCE_NOT_FOUND,
                 f"Attempt to delete a user credential that does not exist: {d['name']} {mech}")
        else:
            changes.setdefault(d["name"], {})[mech] = None
    for u in req["upsertions"]:
        mech = by_type.get(u["mechanism"])
        if not u["name"]:
            fail(u["name"], errors.E_UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
        elif mech is None:
            fail(u["name"], errors.E_UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
        elif u["iterations"] < MIN_ITERATIONS:  # Kafka's words, without the bounds
            fail(u["name"], errors.E_UNACCEPTABLE_CREDENTIAL, "Too few iterations")
        elif u["iterations"] > MAX_ITERATIONS:
            fail(u["name"], errors.E_UNACCEPTABLE_CREDENTIAL, "Too many iterations")
        elif not u["salt"] or not u["salted_password"]:
            fail(u["name"], errors.E_UNACCEPTABLE_CREDENTIAL, "Salt and salted password must not be empty")
        else:
            changes.setdefault(u["name"], {})[mech] = credential_from_salted(MECHANISMS[mech], u["salt"],
                                                                             u["salted_password"], u["iterations"])
    return results, changes
