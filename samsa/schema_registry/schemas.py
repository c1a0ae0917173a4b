"""The three schema types: parsing (a bad schema is 42201), the form ids are matched by, and
each type's compatibility rules.

AVRO is parsed and checked by Apache Avro's own Python library (``avro``): its parser keeps
the specification's name rules, it has the Parsing Canonical Form, and its
``ReaderWriterCompatibilityChecker`` is the specification's schema resolution. JSON schemas
are checked against their metaschema by ``jsonschema``; PROTOBUF schemas are read either as a
base64 ``FileDescriptorProto`` (what confluent-kafka's serializer sends) with ``protobuf`` or
as ``.proto`` text with ``proto-schema-parser``. The JSON and Protobuf compatibility rules are
written here (no well-kept library has them), from the registry's documented rules.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
from typing import Any, Callable

TYPES = ("AVRO", "JSON", "PROTOBUF")
LEVELS = ("NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE")


class InvalidSchema(Exception):
    """42201: the schema does not parse (or a reference it names does not resolve)."""


@dataclass
class Parsed:
    schema_type: str
    text: str            # what is stored and returned
    canonical: str       # what "the same schema" means for ids and lookups
    model: Any           # what the compatibility rules compare
    references: list[dict] = field(default_factory=list)


# ---------------------------------------------------------------- AVRO

def _avro_parse(text: str, refs: list[str], normalize: bool) -> Parsed:
    import avro.errors
    import avro.name
    import avro.schema
    try:
        names = avro.name.Names()
        for r in refs:
            avro.schema.make_avsc_object(json.loads(r), names)
        data = json.loads(text)
        schema = avro.schema.make_avsc_object(data, names)
    except (ValueError, TypeError, KeyError, AttributeError, avro.errors.AvroException) as e:
        raise InvalidSchema(f"Invalid schema {text}, details: {e}") from None
    compact = json.dumps(data, separators=(",", ":"))
    canonical = schema.canonical_form if normalize else compact
    return Parsed("AVRO", canonical if normalize else compact, canonical, schema)


def _avro_compatible(reader: Parsed, writer: Parsed) -> list[str]:
    from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType
    result = ReaderWriterCompatibilityChecker().get_compatibility(reader.model, writer.model)
    if result.compatibility is SchemaCompatibilityType.compatible:
        return []
    return [f"{t.name}: {m}" for t, m in zip(result.incompatibilities, result.messages)] or ["incompatible"]


# ---------------------------------------------------------------- JSON

def _json_parse(text: str, refs: list[str], normalize: bool) -> Parsed:
    import jsonschema
    try:
        data = json.loads(text)
        if not isinstance(data, (dict, bool)):
            raise ValueError("a JSON schema is an object or a boolean")
        jsonschema.validators.validator_for(data).check_schema(data)
    except (ValueError, jsonschema.exceptions.SchemaError) as e:
        raise InvalidSchema(f"Invalid schema {text}, details: {getattr(e, 'message', e)}") from None
    compact = json.dumps(data, separators=(",", ":"), sort_keys=normalize)
    return Parsed("JSON", compact, compact, data)


_NUMERIC = {"integer": {"integer"}, "number": {"integer", "number"}}


def _json_types(s: Any) -> set[str] | None:
    if s is True or s == {}:
        return None
    t = s.get("type") if isinstance(s, dict) else None
    if t is None:
        return None
    return set(t) if isinstance(t, list) else {t}


def _json_check(reader: Any, writer: Any, path: str, out: list[str]) -> None:
    """Is all data valid under ``writer`` valid under ``reader``? (the registry's rules, the common part)"""
    if reader is True or reader == {}:
        return
    if writer is True or writer == {}:
        out.append(f"{path}: TYPE_CHANGED (the reader is narrower than any)")
        return
    if reader is False or writer is False or not isinstance(reader, dict) or not isinstance(writer, dict):
        if reader != writer:
            out.append(f"{path}: TYPE_CHANGED")
        return
    rt, wt = _json_types(reader), _json_types(writer)
    if rt is not None:
        if wt is None:
            out.append(f"{path}: TYPE_EXTENDED")
        else:
            allowed = set().union(*(_NUMERIC.get(t, {t}) for t in rt))
            if not wt <= allowed:
                out.append(f"{path}: TYPE_CHANGED {sorted(wt)} -> {sorted(rt)}")
                return
    if "enum" in reader:
        if "enum" not in writer or not set(map(json.dumps, writer["enum"])) <= set(map(json.dumps, reader["enum"])):
            out.append(f"{path}: ENUM_ARRAY_NARROWED")
    if "const" in reader and reader.get("const") != writer.get("const"):
        out.append(f"{path}: CONST_CHANGED")
    for key, op in (("maxLength", "<"), ("maximum", "<"), ("maxItems", "<"), ("maxProperties", "<"),
                    ("minLength", ">"), ("minimum", ">"), ("minItems", ">"), ("minProperties", ">")):
        if key in reader:
            w = writer.get(key)
            narrower = w is None or (reader[key] < w if op == "<" else reader[key] > w)
            if narrower:
                out.append(f"{path}: {key.upper()}_{'DECREASED' if op == '<' else 'INCREASED'}")
    if "pattern" in reader and reader["pattern"] != writer.get("pattern"):
        out.append(f"{path}: PATTERN_CHANGED")
    # objects
    rprops, wprops = reader.get("properties", {}), writer.get("properties", {})
    r_open = reader.get("additionalProperties", True)
    w_open = writer.get("additionalProperties", True)
    for name, ws in wprops.items():
        if name in rprops:
            _json_check(rprops[name], ws, f"{path}/properties/{name}", out)
        elif r_open is False:
            out.append(f"{path}/properties/{name}: PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL")
        elif isinstance(r_open, dict):
            _json_check(r_open, ws, f"{path}/properties/{name}", out)
    for name, rs in rprops.items():
        if name not in wprops:
            if w_open is not False and not (rs is True or rs == {}):
                if isinstance(w_open, dict):
                    _json_check(rs, w_open, f"{path}/properties/{name}", out)
                else:
                    out.append(f"{path}/properties/{name}: PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL")
    if r_open is False and w_open is not False:
        out.append(f"{path}: ADDITIONAL_PROPERTIES_REMOVED")
    for name in set(reader.get("required", [])) - set(writer.get("required", [])):
        if not (name in rprops and isinstance(rprops[name], dict) and "default" in rprops[name]):
            out.append(f"{path}/required/{name}: REQUIRED_ATTRIBUTE_ADDED")
    # arrays
    if isinstance(reader.get("items"), (dict, bool)):
        _json_check(reader["items"], writer.get("items", True), f"{path}/items", out)
    # combined
    for key in ("oneOf", "anyOf"):
        if key in reader or key in writer:
            rs = reader.get(key, [reader]) if key in reader else [reader]
            for i, w in enumerate(writer.get(key, [])):
                if all(_json_errors(r, w) for r in rs):
                    out.append(f"{path}/{key}/{i}: COMBINED_TYPE_SUBSCHEMAS_CHANGED")


def _json_errors(reader: Any, writer: Any) -> list[str]:
    out: list[str] = []
    _json_check(reader, writer, "#", out)
    return out


def _json_compatible(reader: Parsed, writer: Parsed) -> list[str]:
    return _json_errors(reader.model, writer.model)


# ---------------------------------------------------------------- PROTOBUF

_SCALARS = {1: "double", 2: "float", 3: "int64", 4: "uint64", 5: "int32", 6: "fixed64", 7: "fixed32", 8: "bool",
            9: "string", 12: "bytes", 13: "uint32", 15: "sfixed32", 16: "sfixed64", 17: "sint32", 18: "sint64"}
# wire-compatible groups: a change within one is compatible, as protobuf's own rules say
_PB_GROUPS = [{"int32", "uint32", "int64", "uint64", "bool"}, {"sint32", "sint64"}, {"fixed32", "sfixed32"},
              {"fixed64", "sfixed64"}, {"string", "bytes"}]


def _pb_short(name: str) -> str:
    return name.lstrip(".").rsplit(".", 1)[-1]


def _pb_from_descriptor(fdp: Any) -> dict:
    messages: dict[str, dict[int, tuple[str, str, bool]]] = {}

    def walk(prefix: str, msgs: Any) -> None:
        for m in msgs:
            full = f"{prefix}{m.name}"
            fields = {}
            for f in m.field:
                kind = _SCALARS.get(f.type) or _pb_short(f.type_name)
                fields[f.number] = (f.name, kind, f.label == 3)
            messages[full] = fields
            walk(full + ".", m.nested_type)

    walk("", fdp.message_type)
    return {"package": fdp.package, "messages": messages, "first": fdp.message_type[0].name if fdp.message_type
            else None}


def _pb_from_ast(ast: Any) -> dict:
    from proto_schema_parser import ast as pa
    messages: dict[str, dict[int, tuple[str, str, bool]]] = {}
    package, first = "", None

    def walk(prefix: str, m: Any) -> None:
        full = f"{prefix}{m.name}"
        fields = {}
        for el in m.elements:
            els = el.elements if isinstance(el, pa.OneOf) else [el]
            for f in els:
                if isinstance(f, pa.Field):
                    rep = str(getattr(f.cardinality, "value", "")) == "REPEATED"
                    fields[f.number] = (f.name, _pb_short(f.type), rep)
                elif isinstance(f, pa.MapField):
                    fields[f.number] = (f.name, f"map<{f.key_type},{_pb_short(f.value_type)}>", True)
                elif isinstance(f, pa.Message):
                    walk(full + ".", f)
        messages[full] = fields

    for el in ast.file_elements:
        if isinstance(el, pa.Package):
            package = el.name
        elif isinstance(el, pa.Message):
            first = first or el.name
            walk("", el)
    return {"package": package, "messages": messages, "first": first}


class _Raise:
    """An ANTLR error listener that stops at the first syntax error (the parser would recover)."""

    def syntaxError(self, recognizer, offending, line, column, msg, e):  # noqa: N802 - ANTLR's name
        raise InvalidSchema(f"line {line}:{column} {msg}")

    def reportAmbiguity(self, *args):  # noqa: N802
        pass

    def reportAttemptingFullContext(self, *args):  # noqa: N802
        pass

    def reportContextSensitivity(self, *args):  # noqa: N802
        pass


def _strict(recognizer) -> None:
    recognizer.removeErrorListeners()
    recognizer.addErrorListener(_Raise())


def _protobuf_parse(text: str, refs: list[str], normalize: bool) -> Parsed:
    from google.protobuf import descriptor_pb2
    stripped = text.strip()
    model = None
    if stripped and not any(c in stripped for c in " ;{\n"):
        try:
            fdp = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(stripped, validate=True))
            model = _pb_from_descriptor(fdp)
        except (binascii.Error, ValueError, Exception) as e:  # noqa: BLE001 - protobuf's DecodeError
            raise InvalidSchema(f"Invalid schema {text}, details: not a serialized FileDescriptorProto: {e}") from None
    else:
        from proto_schema_parser.parser import Parser
        try:
            model = _pb_from_ast(Parser(setup_lexer=_strict, setup_parser=_strict).parse(text))
        except Exception as e:  # noqa: BLE001 - the parser raises its own and ANTLR's errors
            raise InvalidSchema(f"Invalid schema {text}, details: {e}") from None
        if not model["messages"] or any(not name.rsplit(".", 1)[-1] for name in model["messages"]):
            raise InvalidSchema(f"Invalid schema {text}, details: no message type")
    return Parsed("PROTOBUF", text, stripped, model)


def _pb_compatible(reader: Parsed, writer: Parsed) -> list[str]:
    out = []
    r, w = reader.model, writer.model
    if w["first"] and w["first"] not in r["messages"]:
        out.append(f"MESSAGE_REMOVED: {w['first']}")
    for name, wf in w["messages"].items():
        rf = r["messages"].get(name)
        if rf is None:
            continue
        for num, (fname, kind, rep) in wf.items():
            if num not in rf:
                continue
            _, rkind, rrep = rf[num]
            same = rkind == kind or any(kind in g and rkind in g for g in _PB_GROUPS)
            if not same:
                out.append(f"FIELD_KIND_CHANGED: {name}.{fname} ({num}) {kind} -> {rkind}")
            elif rep != rrep and not (kind in ("string", "bytes") or kind[0].isupper()):
                out.append(f"FIELD_LABEL_CHANGED: {name}.{fname} ({num})")
    return out


_PARSE: dict[str, Callable[[str, list[str], bool], Parsed]] = {
    "AVRO": _avro_parse, "JSON": _json_parse, "PROTOBUF": _protobuf_parse}
_COMPAT: dict[str, Callable[[Parsed, Parsed], list[str]]] = {
    "AVRO": _avro_compatible, "JSON": _json_compatible, "PROTOBUF": _pb_compatible}


def parse(schema_type: str, text: str, referenced: list[str], normalize: bool = False) -> Parsed:
    """``referenced``: the texts of the schemas the references name, dependencies first."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidSchema("Empty schema")
    return _PARSE[schema_type](text, referenced, normalize)


def check(level: str, new: Parsed, previous: list[tuple[int, Parsed]]) -> list[str]:
    """The messages of incompatibility of ``new`` with the subject's live (version, schema)s, oldest first."""
    level = level.upper()
    if level == "NONE" or not previous:
        return []
    against = previous if level.endswith("_TRANSITIVE") else previous[-1:]
    compat = _COMPAT[new.schema_type]
    out: list[str] = []
    for version, old in reversed(against):
        if old.schema_type != new.schema_type:
            out.append(f"Incompatible schema type {new.schema_type} after {old.schema_type}")
            continue
        if level.startswith(("BACKWARD", "FULL")):
            out += [f"{m} (new schema reading data of version {version})" for m in compat(new, old)]
        if level.startswith(("FORWARD", "FULL")):
            out += [f"{m} (old schema version {version} reading new data)" for m in compat(old, new)]
    return out

