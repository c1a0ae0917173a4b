"""Typed configuration keys, shared by the broker and the clients.

Kafka configs are dotted keys with a type, a default and a validity rule. Values arrive as
Python values or as the strings a properties file holds; :func:`parse_value` turns either
into the key's type or raises :class:`ConfigError` naming the key, the value and the rule.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

LONG_MAX = 9223372036854775807
INT_MAX = 2147483647


class ConfigError(ValueError):
    """A config value that cannot be used; the message says which key and why."""


@dataclass(frozen=True)
class Key:
    name: str
    type: str                      # int, long, double, bool, string, list, password
    default: Any
    check: Callable[[Any], str | None] | None = None  # returns a complaint or None
    dynamic: bool = False          # may be altered at run time (per broker, via AlterConfigs)


def at_least(n: int) -> Callable[[Any], str | None]:
    return lambda v: None if v is None or v >= n else f"Value must be at least {n}"


def _num(n: float) -> str:
    return str(int(n)) if float(n).is_integer() else str(n)


def between(lo: float, hi: float, *, also: Any = None) -> Callable[[Any], str | None]:
    """Kafka's Range.between: "at least lo" / "no more than hi"; with ``also`` (a value allowed
    outside the range, e.g. gzip's -1) Kafka's "between lo and hi or equal to also"."""
    def check(v: Any) -> str | None:
        if v is None or lo <= v <= hi or (also is not None and v == also):
            return None
        if also is not None:
            return f"Value must be between {_num(lo)} and {_num(hi)} or equal to {_num(also)}"
        return f"Value must be at least {_num(lo)}" if v < lo else f"Value must be no more than {_num(hi)}"
    return check


def one_of(*choices: str) -> Callable[[Any], str | None]:
    def check(v: Any) -> str | None:
        values = v if isinstance(v, list) else [v]
        bad = [x for x in values if x not in choices]
        return f"String must be one of: {', '.join(choices)}" if bad else None
    return check


def parse_value(key: Key, raw: Any) -> Any:
    if raw is None:
        return None
    t = key.type
    if not isinstance(raw, str):
        value = raw
    else:
        s = raw.strip()
        try:
            if t in ("int", "long"):
                value = None if s == "" and key.default is None else int(s)
            elif t == "double":
                value = float(s)
            elif t == "bool":
                if s.lower() not in ("true", "false"):
                    raise ValueError
                value = s.lower() == "true"
            elif t == "list":
                value = [x.strip() for x in s.split(",") if x.strip()]
            else:
                value = s
        except ValueError:
            complaint = ("Expected value to be either true or false" if t == "bool" else
                         "Not a number of type " + {"int": "INT", "long": "LONG", "double": "DOUBLE"}[t])
            raise ConfigError(f"Invalid value {raw} for configuration {key.name}: {complaint}") from None
    if t == "int" and value is not None and not -2**31 <= value < 2**31:
        raise ConfigError(f"Invalid value {raw} for configuration {key.name}: Not a number of type INT")
    if key.check is not None:
        complaint = key.check(value)
        if complaint:
            raise ConfigError(f"Invalid value {raw} for configuration {key.name}: {complaint}")
    return value


def keys(*items: Key) -> dict[str, Key]:
    return {k.name: k for k in items}


def parse_properties(text: str) -> dict[str, str]:
    """Java .properties: comments, ``=``/``:`` separators, backslash continuations."""
    out: dict[str, str] = {}
    logical: list[str] = []
    for raw in text.splitlines():
        line = raw.strip() if not logical else raw.lstrip()
        if not logical and (not line or line[0] in "#!"):
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            logical.append(line[:-1])
            continue
        logical.append(line)
        entry = "".join(logical)
        logical = []
        m = re.match(r"([^=:\s]+)\s*[=:\s]\s*(.*)$", entry)
        if m:
            out[m.group(1)] = m.group(2).strip()
        elif entry:
            out[entry] = ""
    return out


def format_value(value: Any) -> str | None:
    """A config value as Kafka prints it in DescribeConfigs."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(value)
    return str(value)
