"""A test CA and certificates made with Debian's openssl at run time (nothing secret is committed)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

PASSWORD = "test-store-pw"


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@dataclass
class Certs:
    dir: Path

    @property
    def ca(self) -> Path:
        return self.dir / "ca.pem"

    def cert(self, name: str) -> Path:
        return self.dir / f"{name}.pem"

    def key(self, name: str) -> Path:
        return self.dir / f"{name}.key"

    def p12(self, name: str) -> Path:
        return self.dir / f"{name}.p12"

    @property
    def truststore_p12(self) -> Path:
        return self.dir / "truststore.p12"


def make_certs(directory: Path, clients: tuple[str, ...] = ("alice", "bob")) -> Certs:
    """A CA, a broker certificate for 127.0.0.1/localhost, and one client certificate per
    name (subject CN=<name>,OU=test,O=samsa); each also as a PKCS12 store."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
             "-days", "2", "-subj", "/CN=samsa-test-ca", cwd=d)
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name in ("broker", *clients):
        subj = "/CN=localhost/O=samsa" if name == "broker" else f"/O=samsa/OU=test/CN={name}"
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
                 "-subj", subj, cwd=d)
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                 "-out", f"{name}.pem", "-days", "2", *(["-extfile", "san.ext"] if name == "broker" else []), cwd=d)
        _openssl("pkcs12", "-export", "-in", f"{name}.pem", "-inkey", f"{name}.key", "-certfile", "ca.pem",
                 "-out", f"{name}.p12", "-passout", f"pass:{PASSWORD}", cwd=d)
    _openssl("pkcs12", "-export", "-nokeys", "-in", "ca.pem", "-out", "truststore.p12",
             "-passout", f"pass:{PASSWORD}", cwd=d)
    return Certs(d)
