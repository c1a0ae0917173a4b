"""Kafka principals (``User:alice``) and how a TLS client certificate becomes one.

``ssl.principal.mapping.rules`` is Kafka's list of ``RULE:pattern/replacement/[LU]`` and
``DEFAULT`` applied to the certificate subject in RFC 2253 form (``CN=alice,OU=eng,O=acme``);
the first rule whose pattern matches the whole subject names the user.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class KafkaPrincipal:
    type: str
    name: str

    def __str__(self) -> str:
        return f"{self.type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> "KafkaPrincipal":
        """'User:alice' -> KafkaPrincipal('User', 'alice'); ValueError without a type."""
        kind, sep, name = text.partition(":")
        if not sep or not kind:
            raise ValueError(f"Principal {text!r} must look like Type:name (User:alice)")
        return cls(kind, name)


ANONYMOUS = KafkaPrincipal("User", "ANONYMOUS")

# RFC 2253 attribute names for the OIDs Python's ssl reports by long name.
_SHORT = {"commonName": "CN", "organizationalUnitName": "OU", "organizationName": "O", "countryName": "C",
          "localityName": "L", "stateOrProvinceName": "ST", "streetAddress": "STREET", "domainComponent": "DC",
          "userId": "UID", "emailAddress": "EMAILADDRESS"}


def _escape(value: str) -> str:
    out = re.sub(r'([,+"\\<>;=])', r"\\\1", value)
    if out.startswith((" ", "#")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out


def rfc2253(subject: tuple) -> str:
    """The subject of ``SSLSocket.getpeercert()`` as Java's X500Principal.getName() gives it:
    most specific RDN first."""
    rdns = []
    for rdn in reversed(subject):
        rdns.append("+".join(f"{_SHORT.get(k, k)}={_escape(v)}" for k, v in rdn))
    return ",".join(rdns)


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""  # "L", "U" or ""

    def apply(self, name: str) -> str | None:
        if self.pattern is None:
            return name
        m = self.pattern.fullmatch(name)
        if m is None:
            return None
        # Java's $1 back-references; a literal $ would be written \$.
        out = re.sub(r"\$(\d+)", lambda g: m.group(int(g.group(1))) or "", self.replacement)
        return out.lower() if self.case == "L" else out.upper() if self.case == "U" else out


def parse_mapping_rules(rules: list[str] | str) -> list[_Rule]:
    """``ssl.principal.mapping.rules`` (a comma list where a rule may itself hold commas)."""
    text = ",".join(rules) if isinstance(rules, list) else rules
    out: list[_Rule] = []
    pos = 0
    rule_re = re.compile(r"\s*(DEFAULT|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?))\s*(,|$)")
    while pos < len(text):
        m = rule_re.match(text, pos)
        if m is None:
            raise ValueError(f"Invalid rule: {text[pos:]!r} (ssl.principal.mapping.rules)")
        if m.group(1) == "DEFAULT":
            out.append(_Rule(None))
        else:
            out.append(_Rule(re.compile(m.group(2)), m.group(3), m.group(4)))
        pos = m.end()
        if m.group(5) == "":
            break
    return out or [_Rule(None)]


class SslPrincipalMapper:
    def __init__(self, rules: list[str] | str = "DEFAULT"):
        self.rules = parse_mapping_rules(rules)

    def principal(self, subject: tuple | None) -> KafkaPrincipal:
        """The principal of a peer certificate's subject; ANONYMOUS without a certificate."""
        if not subject:
            return ANONYMOUS
        dn = rfc2253(subject)
        for rule in self.rules:
            name = rule.apply(dn)
            if name is not None:
                return KafkaPrincipal("User", name)
        raise ValueError(f"No rules apply to {dn}, rules {[r.pattern and r.pattern.pattern for r in self.rules]}")
