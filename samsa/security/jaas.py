"""Kafka's one-line JAAS configs (``sasl.jaas.config``)::

    org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="a" user_alice="x";
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_ENTRY = re.compile(r'\s*([\w.$]+)\s+(required|requisite|sufficient|optional)\s*(.*?);?\s*$', re.S)
_OPTION = re.compile(r'\s*([\w.\-]+)\s*=\s*(?:"((?:\\.|[^"\\])*)"|(\S+?))(?=\s|;|$)', re.S)


@dataclass
class JaasEntry:
    module: str
    flag: str = "required"
    options: dict[str, str] = field(default_factory=dict)


def parse_jaas(text: str) -> JaasEntry:
    """The login module, its flag and its options; ValueError naming what is wrong."""
    m = _ENTRY.match(text or "")
    if m is None:
        raise ValueError("sasl.jaas.config must look like '<LoginModule> required key=\"value\" ...;'")
    options: dict[str, str] = {}
    rest = m.group(3).strip().rstrip(";")
    pos = 0
    while pos < len(rest):
        if rest[pos].isspace():
            pos += 1
            continue
        o = _OPTION.match(rest, pos)
        if o is None:
            raise ValueError(f"sasl.jaas.config: cannot read the option at {rest[pos:pos + 30]!r}")
        value = o.group(2) if o.group(2) is not None else o.group(3)
        options[o.group(1)] = re.sub(r"\\(.)", r"\1", value)
        pos = o.end()
    return JaasEntry(m.group(1), m.group(2), options)
