"""A codec for Kafka's protocol messages, driven by Kafka's own message schemas.

``schema/messages.json`` holds the structure of every message (field names, types,
version ranges, tagged fields), taken from the JSON definitions in Apache Kafka's source
tree with their prose removed. For each (message, version) actually used, this module
writes a Python decoder and encoder as source code and compiles it once: no schema walk
happens per message, and unknown tagged fields are skipped, as the protocol says.

Messages are plain dicts with snake_case keys (``TopicId`` -> ``topic_id``). An encoder
fills any missing field with its schema default, so handlers only set what they mean.
``records`` fields decode to memoryviews of the input (never copied) and encode as
separate chunks of the output list, so record bytes travel to the socket uncopied.
"""

from __future__ import annotations

import json
import os
import re
import struct
from functools import lru_cache
from importlib import resources
from typing import Any, Callable

from samsa.protocol.errors import InvalidRequestError
from samsa.protocol.varint import decode_uvarint, encode_uvarint

Decoder = Callable[[Any, int], tuple[dict, int]]
Encoder = Callable[[dict, bytearray, list], bytearray]

_PRIMITIVES = {
    "bool": ("?", 1, False),
    "int8": ("b", 1, 0),
    "int16": ("h", 2, 0),
    "uint16": ("H", 2, 0),
    "int32": ("i", 4, 0),
    "uint32": ("I", 4, 0),
    "int64": ("q", 8, 0),
    "float64": ("d", 8, 0.0),
}
ZERO_UUID = bytes(16)

# Encoders refuse a key that is no field of the message in any version (a misspelt
# "eror_code" would otherwise go out as error code 0). On in the test suite; the check
# costs a set comparison per encoded struct.
STRICT = os.environ.get("SAMSA_STRICT_CODEC", "") not in ("", "0")


class UnknownFieldError(ValueError):
    """A message dict with a key that its schema does not know (a bug in the caller)."""


def _refuse_unknown(obj: dict, known: frozenset, message_name: str) -> None:
    unknown = sorted(set(obj) - known)
    raise UnknownFieldError(f"{message_name} has no field {', '.join(unknown)} (fields: {', '.join(sorted(known))})")


class NullFieldError(ValueError):
    """None given for a field its schema does not let be null (a bug in the caller)."""


def _refuse_null(field: str, message_name: str) -> None:
    raise NullFieldError(f"{message_name}: field {field} is not nullable but was given None")


def snake(name: str) -> str:
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s).lower()


def parse_versions(spec: str | None) -> tuple[int, int]:
    """'3+' -> (3, 32767), '1-4' -> (1, 4), '5' -> (5, 5), 'none' -> empty range."""
    if spec is None or spec == "none":
        return (1, 0)
    if spec.endswith("+"):
        return (int(spec[:-1]), 32767)
    if "-" in spec:
        lo, hi = spec.split("-")
        return (int(lo), int(hi))
    return (int(spec), int(spec))


def _in(spec: str | None, version: int) -> bool:
    lo, hi = parse_versions(spec)
    return lo <= version <= hi


@lru_cache(maxsize=None)
def schemas() -> dict[str, dict]:
    text = resources.files("samsa.protocol").joinpath("schema/messages.json").read_text()
    return json.loads(text)


def _records_chunk(b: bytearray, chunks: list, value) -> bytearray:
    """Large record sets go out as their own chunk (no copy); small ones are appended."""
    if len(value) < 4096:
        b += value
        return b
    chunks.append(b)
    chunks.append(value)
    return bytearray()


# ---------------------------------------------------------------- code generation

class _Gen:
    """Writes the source of one message version's decoder and encoder."""

    def __init__(self, message: dict, version: int):
        self.message = message
        self.version = version
        self.flexible = _in(message.get("flexibleVersions"), version)
        self.structs = {c["name"]: c for c in message.get("commonStructs", [])}
        self.lines: list[str] = []
        self.funcs: list[str] = []
        self.counter = 0
        self.consts: dict[str, Any] = {}
        # A null where the schema allows none: a request with one is refused, as Kafka's parser
        # refuses it; a response (from a broker) is read leniently, except under STRICT (tests).
        self.strict_nulls = message.get("type") == "request" or STRICT

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def fields_of(self, field: dict) -> list[dict]:
        if "fields" in field:
            return field["fields"]
        type_name = field["type"].removeprefix("[]")
        return self.structs[type_name]["fields"]

    def active(self, fields: list[dict]) -> tuple[list[dict], list[dict]]:
        v = self.version
        present = [f for f in fields if _in(f.get("versions"), v)]
        tagged = [f for f in present if self.flexible and _in(f.get("taggedVersions"), v)]
        plain = [f for f in present if f not in tagged]
        return plain, sorted(tagged, key=lambda f: f["tag"])

    def default(self, field: dict) -> Any:
        t = field["type"]
        d = field.get("default")
        nullable = _in(field.get("nullableVersions"), self.version)
        if t.startswith("[]"):
            return None if (d == "null" and nullable) else []
        if t in _PRIMITIVES:
            if d is None:
                return _PRIMITIVES[t][2]
            if t == "bool":
                return d in (True, "true")
            if t == "float64":
                return float(d)
            return int(d, 0) if isinstance(d, str) else int(d)
        if t == "string":
            if nullable and (d is None or d == "null"):
                return None
            return d if isinstance(d, str) else ""
        if t in ("bytes", "records"):
            return None if nullable else b""
        if t == "uuid":
            return ZERO_UUID
        return None  # struct: encoded from {} (all defaults)

    # ---- decoding

    def decode_struct(self, fields: list[dict]) -> str:
        """Emit a function decoding a struct; return its name."""
        name = self.fresh("_d")
        body: list[str] = [f"def {name}(buf, pos):", "    o = {}"]
        plain, tagged = self.active(fields)
        for f in plain:
            body += ["    " + line for line in self.decode_value(f, f"o[{snake(f['name'])!r}]")]
        if self.flexible:
            tag_cases = []
            for f in tagged:
                inner = self.decode_value(f, f"o[{snake(f['name'])!r}]")
                tag_cases.append((f["tag"], inner))
            body += [
                "    n, pos = read_uvarint(buf, pos)",
                "    for _ in range(n):",
                "        tag, pos = read_uvarint(buf, pos)",
                "        size, pos = read_uvarint(buf, pos)",
                "        end = pos + size",
                "        if end > len(buf): raise InvalidRequestError('a tagged field runs past the end of the message')",
            ]
            kw = "if"
            for tag, inner in tag_cases:
                body.append(f"        {kw} tag == {tag}:")
                body += ["            " + line for line in inner]
                kw = "elif"
            body.append("        pos = end")
            # defaults for tagged fields absent from the message
            for f in tagged:
                key = snake(f["name"])
                const = self.const(self.default(f))
                body.append(f"    if {key!r} not in o: o[{key!r}] = {const}")
        body.append("    return o, pos")
        self.funcs.append("\n".join(body))
        return name

    def const(self, value: Any) -> str:
        if value is None or isinstance(value, (int, float, str, bool)):
            return repr(value)
        if isinstance(value, bytes):
            return repr(value)
        if isinstance(value, list):
            return "[]"
        key = self.fresh("_c")
        self.consts[key] = value
        return key

    def decode_value(self, f: dict, target: str) -> list[str]:
        t = f["type"]
        v = self.version
        nullable = _in(f.get("nullableVersions"), v)
        flex = self.flexible
        if t.startswith("[]"):
            elem = t[2:]
            n = self.fresh("n")
            lines = self.read_length(n, flex, "array")
            # As Kafka's generated readers: an element takes at least one byte, so a length
            # beyond what is left is a lie (refused before any allocation or loop).
            lines += [f"if {n} > len(buf) - pos: raise InvalidRequestError("
                      f"'Tried to allocate a collection of size %d, but there are only %d bytes remaining.'"
                      f" % ({n}, len(buf) - pos))"]
            if not nullable and self.strict_nulls:
                lines += self.refuse_null(n, f)
            if elem in _PRIMITIVES or elem in ("string", "bytes", "uuid"):
                item = {"type": elem, "versions": "0+"}
                inner = self.decode_value(item, "x")
            else:
                fn = self.decode_struct(self.fields_of(f))
                inner = [f"x, pos = {fn}(buf, pos)"]
            lines += [
                f"if {n} < 0:",
                f"    {target} = None",
                "else:",
                "    lst = []",
                f"    for _ in range({n}):",
            ]
            lines += ["        " + x for x in inner]
            lines += ["        lst.append(x)", f"    {target} = lst"]
            if not nullable and not self.strict_nulls:
                lines.append(f"if {target} is None: {target} = []")
            return lines
        if t in _PRIMITIVES:
            fmt, size, _ = _PRIMITIVES[t]
            s = self.fresh("_s")
            self.consts[s] = struct.Struct(">" + fmt)
            return [f"{target}, = {s}.unpack_from(buf, pos)", f"pos += {size}"]
        if t == "uuid":
            return [f"{target} = bytes(buf[pos:pos + 16])", "pos += 16"]
        if t in ("string", "bytes", "records"):
            n = self.fresh("n")
            lines = self.read_length(n, flex, "string" if t == "string" else "bytes")
            if not nullable and self.strict_nulls:
                lines += self.refuse_null(n, f)
            if t == "string":
                conv = f"str(buf[pos:pos + {n}], 'utf-8', 'replace')"  # as Java's String: malformed bytes become U+FFFD
            elif t == "bytes":
                conv = f"bytes(buf[pos:pos + {n}])"
            else:
                conv = f"buf[pos:pos + {n}]"
            lines += [
                f"if {n} < 0:",
                f"    {target} = None",
                "else:",
                f"    if pos + {n} > len(buf): raise InvalidRequestError('field runs past the end of the message')",
                f"    {target} = {conv}",
                f"    pos += {n}",
            ]
            return lines
        # a single (non-array) struct
        fn = self.decode_struct(self.fields_of(f))
        if nullable:
            return [
                "flag, = _i8.unpack_from(buf, pos)",
                "pos += 1",
                "if flag < 0:",
                f"    {target} = None",
                "else:",
                f"    {target}, pos = {fn}(buf, pos)",
            ]
        return [f"{target}, pos = {fn}(buf, pos)"]

    @staticmethod
    def refuse_null(n: str, f: dict) -> list[str]:
        """A negative length where the schema allows no null (in this version): Kafka's readers
        refuse the message ("non-nullable field ... was serialized as null")."""
        name = f.get("name", "element")
        name = name[:1].lower() + name[1:]  # Kafka's message names the Java field: groupId
        return [f"if {n} < 0: raise InvalidRequestError('non-nullable field {name} was serialized as null')"]

    def read_length(self, n: str, flex: bool, kind: str) -> list[str]:
        if flex:
            return [f"{n}, pos = read_uvarint(buf, pos)", f"{n} -= 1"]
        if kind == "string":
            return [f"{n}, = _i16.unpack_from(buf, pos)", "pos += 2"]
        return [f"{n}, = _i32.unpack_from(buf, pos)", "pos += 4"]

    # ---- encoding

    def encode_struct(self, fields: list[dict]) -> str:
        name = self.fresh("_e")
        body = [f"def {name}(o, b, chunks):", "    g = o.get"]
        if STRICT:
            known = self.fresh("_known")
            self.consts[known] = frozenset(snake(f["name"]) for f in fields)
            body.append(f"    if not {known}.issuperset(o): _refuse_unknown(o, {known}, {self.message['name']!r})")
        plain, tagged = self.active(fields)
        for f in plain:
            key = snake(f["name"])
            default = self.const(self.default(f))
            body.append(f"    v = g({key!r}, {default})")
            body += ["    " + line for line in self.encode_value(f, "v")]
        if self.flexible:
            if not tagged:
                body.append("    b.append(0)")
            else:
                body.append("    tags = []")
                for f in tagged:
                    key = snake(f["name"])
                    default = self.default(f)
                    body.append(f"    v = g({key!r})")
                    cond = "v is not None" if default is None else f"v is not None and v != {self.const(default)}"
                    body.append(f"    if {cond}:")
                    body.append("        tb = bytearray()")
                    inner = self.encode_value(f, "v", buf="tb", allow_chunks=False)
                    body += ["        " + line for line in inner]
                    body.append(f"        tags.append(({f['tag']}, tb))")
                body += [
                    "    b += uvarint(len(tags))",
                    "    for tag, tb in tags:",
                    "        b += uvarint(tag)",
                    "        b += uvarint(len(tb))",
                    "        b += tb",
                ]
        body.append("    return b")
        self.funcs.append("\n".join(body))
        return name

    def null_check(self, f: dict, var: str) -> list[str]:
        """Strict encoders refuse None where the schema allows no null (Kafka's clients would
        refuse the message)."""
        if not STRICT or _in(f.get("nullableVersions"), self.version):
            return []
        return [f"if {var} is None: _refuse_null({f.get('name', 'element')!r}, {self.message['name']!r})"]

    def encode_value(self, f: dict, var: str, buf: str = "b", allow_chunks: bool = True) -> list[str]:
        t = f["type"]
        flex = self.flexible
        if t.startswith("[]") or t in ("string", "bytes", "records"):
            checks = self.null_check(f, var)
            if checks:
                return checks + self.encode_value_unchecked(f, var, buf, allow_chunks)
        return self.encode_value_unchecked(f, var, buf, allow_chunks)

    def encode_value_unchecked(self, f: dict, var: str, buf: str, allow_chunks: bool) -> list[str]:
        t = f["type"]
        flex = self.flexible
        if t.startswith("[]"):
            elem = t[2:]
            lines = [f"if {var} is None:"]
            lines.append(f"    {buf}.append(0)" if flex else f"    {buf} += _m1_32")
            lines.append("else:")
            if flex:
                lines.append(f"    {buf} += uvarint(len({var}) + 1)")
            else:
                lines.append(f"    {buf} += _i32.pack(len({var}))")
            x = self.fresh("x")
            lines.append(f"    for {x} in {var}:")
            if elem in _PRIMITIVES or elem in ("string", "bytes", "uuid"):
                inner = self.encode_value({"type": elem, "versions": "0+"}, x, buf, allow_chunks)
            else:
                fn = self.encode_struct(self.fields_of(f))
                if buf == "b":
                    inner = [f"b = {fn}({x}, b, chunks)"]
                else:
                    inner = [f"{buf} = {fn}({x}, {buf}, None)"]
            lines += ["        " + line for line in inner]
            return lines
        if t in _PRIMITIVES:
            fmt = _PRIMITIVES[t][0]
            s = self.fresh("_s")
            self.consts[s] = struct.Struct(">" + fmt)
            return [f"{buf} += {s}.pack({var})"]
        if t == "uuid":
            return [f"{buf} += ({var} or _zero_uuid)"]
        if t == "string":
            lines = [f"if {var} is None:"]
            lines.append(f"    {buf}.append(0)" if flex else f"    {buf} += _m1_16")
            lines += ["else:", f"    e = {var}.encode()"]
            lines.append(f"    {buf} += uvarint(len(e) + 1)" if flex else f"    {buf} += _i16.pack(len(e))")
            lines.append(f"    {buf} += e")
            return lines
        if t in ("bytes", "records"):
            lines = [f"if {var} is None:"]
            lines.append(f"    {buf}.append(0)" if flex else f"    {buf} += _m1_32")
            lines.append("else:")
            lines.append(f"    {buf} += uvarint(len({var}) + 1)" if flex else f"    {buf} += _i32.pack(len({var}))")
            if t == "records" and allow_chunks and buf == "b":
                lines.append(f"    b = _records_chunk(b, chunks, {var})")
            else:
                lines.append(f"    {buf} += {var}")
            return lines
        # single struct
        fn = self.encode_struct(self.fields_of(f))
        nullable = _in(f.get("nullableVersions"), self.version)
        call = f"b = {fn}({var}, b, chunks)" if buf == "b" else f"{buf} = {fn}({var}, {buf}, None)"
        if nullable:
            return [
                f"if {var} is None:",
                f"    {buf} += _m1_8",
                "else:",
                f"    {buf} += _one_8",
                "    " + call,
            ]
        return [f"if {var} is None: {var} = {{}}", call]

    def compile(self) -> tuple[Decoder, Encoder]:
        fields = self.message["fields"]
        dec = self.decode_struct(fields)
        enc = self.encode_struct(fields)
        namespace: dict[str, Any] = {
            "read_uvarint": decode_uvarint,
            "uvarint": encode_uvarint,
            "InvalidRequestError": InvalidRequestError,
            "_records_chunk": _records_chunk,
            "_refuse_unknown": _refuse_unknown,
            "_refuse_null": _refuse_null,
            "_i8": struct.Struct(">b"),
            "_i16": struct.Struct(">h"),
            "_i32": struct.Struct(">i"),
            "_m1_8": b"\xff",
            "_one_8": b"\x01",
            "_m1_16": b"\xff\xff",
            "_m1_32": b"\xff\xff\xff\xff",
            "_zero_uuid": ZERO_UUID,
        }
        namespace.update(self.consts)
        source = "\n\n".join(self.funcs)
        code = compile(source, f"<samsa codec {self.message['name']} v{self.version}>", "exec")
        exec(code, namespace)
        return namespace[dec], namespace[enc]


@lru_cache(maxsize=None)
def codec(message_name: str, version: int) -> tuple[Decoder, Encoder]:
    """The compiled (decode, encode) pair of a message at a version."""
    message = schemas()[message_name]
    lo, hi = parse_versions(message.get("validVersions"))
    if not lo <= version <= hi:
        raise ValueError(f"{message_name} has no version {version}")
    return _Gen(message, version).compile()


def decode(message_name: str, version: int, buf, pos: int = 0) -> tuple[dict, int]:
    try:
        return codec(message_name, version)[0](buf, pos)
    except (struct.error, IndexError, ValueError, UnicodeDecodeError, OverflowError) as e:
        raise InvalidRequestError(f"malformed {message_name} v{version}: {e}") from None


def encode(message_name: str, version: int, obj: dict, out: bytearray | None = None) -> list:
    """Encode ``obj``; returns a list of byte chunks (the last one may be ``out``)."""
    chunks: list = []
    b = codec(message_name, version)[1](obj, out if out is not None else bytearray(), chunks)
    chunks.append(b)
    return chunks


def encode_bytes(message_name: str, version: int, obj: dict) -> bytes:
    return b"".join(encode(message_name, version, obj))
