"""TLS contexts from Kafka's ``ssl.*`` keys, for a broker's listener and for a client.

Keystores: ``PEM`` (``ssl.keystore.location`` naming a file with the key and chain, or
KIP-651's ``ssl.keystore.certificate.chain`` and ``ssl.keystore.key`` holding the PEM text)
and ``PKCS12`` (``ssl.keystore.location`` and ``.password``, read with ``cryptography``).
``JKS`` is accepted where the file is in fact PKCS12 (what Java 9+'s keytool writes);
otherwise it is refused with a line saying how to convert it. Truststores likewise
(``ssl.truststore.certificates`` holds PEM text).
"""

from __future__ import annotations

import os
import re
import ssl
import tempfile
from typing import Any, Callable

Getter = Callable[[str], Any]

_PROTOCOLS = {"TLSv1": ssl.TLSVersion.TLSv1, "TLSv1.1": ssl.TLSVersion.TLSv1_1,
              "TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


class SslConfigError(ValueError):
    """An ``ssl.*`` setting that cannot be used (a missing file, a wrong password, a bad type)."""


def _read(path: str, key: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise SslConfigError(f"Cannot read {key}={path}: {e.strerror}") from None


def _pkcs12(data: bytes, password: str | None, key: str):
    try:
        from cryptography.hazmat.primitives.serialization import pkcs12
    except ImportError:  # pragma: no cover - a declared dependency
        raise SslConfigError("PKCS12 stores need the 'cryptography' package") from None
    try:
        return pkcs12.load_key_and_certificates(data, password.encode() if password else None)
    except ValueError as e:
        raise SslConfigError(f"Cannot load {key} as PKCS12 (wrong password or not a PKCS12 file): {e}") from None


def _pem_cert(cert) -> bytes:
    from cryptography.hazmat.primitives.serialization import Encoding
    return cert.public_bytes(Encoding.PEM)


def _keystore_pem(get: Getter) -> tuple[bytes, str | None] | None:
    """The key and its chain as PEM text (and the key's password), or None without a keystore."""
    kind = (get("ssl.keystore.type") or "JKS").upper()
    chain, key = get("ssl.keystore.certificate.chain"), get("ssl.keystore.key")
    if chain or key:
        if kind != "PEM":
            raise SslConfigError("ssl.keystore.certificate.chain and ssl.keystore.key need ssl.keystore.type=PEM")
        if not (chain and key):
            raise SslConfigError("ssl.keystore.certificate.chain and ssl.keystore.key must be given together")
        return _pem_text(key).encode() + b"\n" + _pem_text(chain).encode(), get("ssl.key.password")
    location = get("ssl.keystore.location")
    if not location:
        return None
    data = _read(location, "ssl.keystore.location")
    if kind == "PEM":
        return data, get("ssl.key.password")
    if kind not in ("PKCS12", "JKS"):
        raise SslConfigError(f"ssl.keystore.type={kind} is not supported: use PEM or PKCS12")
    if kind == "JKS" and data[:4] == b"\xfe\xed\xfe\xed":
        raise SslConfigError(f"{location} is a JKS keystore: convert it with keytool -importkeystore "
                             "-deststoretype PKCS12, or use ssl.keystore.type=PEM")
    private_key, cert, extra = _pkcs12(data, get("ssl.keystore.password"), "ssl.keystore.location")
    if private_key is None or cert is None:
        raise SslConfigError(f"{location} holds no private key and certificate")
    from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat
    pem = private_key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    return pem + _pem_cert(cert) + b"".join(_pem_cert(c) for c in extra or []), None


def _pem_text(value: str) -> str:
    """A PEM value from a properties file may have its line breaks flattened to spaces."""
    if "\n" in value:
        return value
    return re.sub(r"-----(BEGIN|END) ([A-Z ]+)-----",
                  lambda m: f"\n-----{m.group(1)} {m.group(2)}-----\n",
                  re.sub(r"\s+(?![A-Z ]*-----)", "\n", value)).strip() + "\n"


def _truststore_pem(get: Getter) -> str | None:
    kind = (get("ssl.truststore.type") or "JKS").upper()
    certs = get("ssl.truststore.certificates")
    if certs:
        return _pem_text(certs)
    location = get("ssl.truststore.location")
    if not location:
        return None
    data = _read(location, "ssl.truststore.location")
    if kind == "PEM" or data.lstrip().startswith(b"-----BEGIN"):
        return data.decode()
    if kind == "JKS" and data[:4] == b"\xfe\xed\xfe\xed":
        raise SslConfigError(f"{location} is a JKS truststore: convert it with keytool -importkeystore "
                             "-deststoretype PKCS12, or use ssl.truststore.type=PEM")
    _, cert, extra = _pkcs12(data, get("ssl.truststore.password"), "ssl.truststore.location")
    return b"".join(_pem_cert(c) for c in ([cert] if cert else []) + list(extra or [])).decode()


def _load_chain(ctx: ssl.SSLContext, pem: bytes, password: str | None) -> None:
    """``load_cert_chain`` reads files only: a private temporary file, removed at once."""
    fd, path = tempfile.mkstemp(prefix="samsa-key-", suffix=".pem")
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, pem)
        os.close(fd)
        ctx.load_cert_chain(path, password=password)
    except ssl.SSLError as e:
        raise SslConfigError(f"Cannot load the keystore's key and certificate: {e.reason or e}") from None
    finally:
        os.unlink(path)


def openssl_cipher(name: str) -> str | None:
    """Kafka's (IANA) cipher suite name as OpenSSL names it; None for TLS 1.3 suites, which
    OpenSSL always enables."""
    if not name.startswith("TLS_"):
        return name  # already OpenSSL's
    if "_WITH_" not in name:
        return None
    kx, cipher = name[4:].split("_WITH_", 1)
    cipher = re.sub(r"AES_(\d+)", r"AES\1", cipher).replace("CHACHA20_POLY1305", "CHACHA20-POLY1305")
    parts = ([] if kx == "RSA" else [kx.replace("_", "-")]) + [cipher.replace("_", "-")]
    return "-".join(parts)


def _common(ctx: ssl.SSLContext, get: Getter) -> None:
    enabled = [p for p in (get("ssl.enabled.protocols") or []) if p]
    if enabled:
        unknown = [p for p in enabled if p not in _PROTOCOLS]
        if unknown:
            raise SslConfigError(f"ssl.enabled.protocols: unknown protocol {unknown[0]} (TLSv1.2, TLSv1.3)")
        versions = sorted(_PROTOCOLS[p] for p in enabled)
        ctx.minimum_version, ctx.maximum_version = versions[0], versions[-1]
    suites = [s for s in (get("ssl.cipher.suites") or []) if s]
    if suites:
        names = [n for n in (openssl_cipher(s) for s in suites) if n]
        if names:
            try:
                ctx.set_ciphers(":".join(names))
            except ssl.SSLError:
                raise SslConfigError(f"ssl.cipher.suites: none of {suites} is known to OpenSSL") from None


def server_context(get: Getter) -> ssl.SSLContext:
    """A listener's context: its keystore, ``ssl.client.auth`` against its truststore."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    keystore = _keystore_pem(get)
    if keystore is None:
        raise SslConfigError("An SSL listener needs a keystore: ssl.keystore.location (PKCS12 or PEM) or "
                             "ssl.keystore.certificate.chain and ssl.keystore.key")
    _load_chain(ctx, *keystore)
    trust = _truststore_pem(get)
    if trust:
        ctx.load_verify_locations(cadata=trust)
    auth = (get("ssl.client.auth") or "none").lower()
    if auth not in ("none", "requested", "required"):
        raise SslConfigError(f"ssl.client.auth={auth}: expected none, requested or required")
    ctx.verify_mode = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}[auth]
    if auth != "none" and not trust:
        raise SslConfigError(f"ssl.client.auth={auth} needs a truststore to check client certificates against")
    _common(ctx, get)
    return ctx


def client_context(get: Getter) -> ssl.SSLContext:
    """A client's context: the truststore (else the system's CAs), an optional keystore, and
    host name checking unless ``ssl.endpoint.identification.algorithm`` is empty."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    trust = _truststore_pem(get)
    if trust:
        ctx.load_verify_locations(cadata=trust)
    else:
        ctx.load_default_certs()
    algorithm = get("ssl.endpoint.identification.algorithm")
    ctx.check_hostname = bool(algorithm)
    keystore = _keystore_pem(get)
    if keystore is not None:
        _load_chain(ctx, *keystore)
    _common(ctx, get)
    return ctx
