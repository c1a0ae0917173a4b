"""What the REST API asks of the registry: subjects, versions, ids, references, compatibility,
config and modes, with the registry's error codes. Reads answer from the store's memory;
writes (``leader`` only: the REST layer forwards them otherwise) append to the store.
"""

from __future__ import annotations

import threading
from typing import Any

from samsa.schema_registry import schemas
from samsa.schema_registry.store import (KafkaStore, Version, config_key, delete_subject_key, mode_key,
                                         schema_key)

MODES = ("READWRITE", "READONLY", "READONLY_OVERRIDE", "IMPORT")
MAX_VERSION = (1 << 31) - 1


class RestError(Exception):
    """An HTTP status and the registry's ``error_code`` and message."""

    def __init__(self, status: int, code: int, message: str):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def subject_not_found(subject: str) -> RestError:
    return RestError(404, 40401, f"Subject '{subject}' not found.")


def version_not_found(subject: str, version: Any) -> RestError:
    return RestError(404, 40402, f"Version {version} not found.")


def schema_not_found(schema_id: Any = None) -> RestError:
    return RestError(404, 40403, "Schema not found" if schema_id is None else f"Schema {schema_id} not found")


def parse_version(text: str | int) -> int | str:
    """``latest`` / -1, or 1..2^31-1; anything else is 42202."""
    if isinstance(text, str) and text.lower() == "latest":
        return "latest"
    try:
        v = int(text)
    except (TypeError, ValueError):
        v = 0
    if v == -1:
        return "latest"
    if not 1 <= v <= MAX_VERSION:
        raise RestError(422, 42202, f"The specified version '{text}' is not a valid version id. Allowed values are"
                                    f" between [1, 2^31-1] and the string \"latest\"")
    return v


class Registry:
    def __init__(self, store: KafkaStore, default_level: str = "BACKWARD", default_mode: str = "READWRITE"):
        self.store = store
        self.default_level, self.default_mode = default_level.upper(), default_mode.upper()
        self.write_lock = threading.Lock()   # the leader's writes, one at a time (ids are max + 1)
        self._parsed: dict[tuple, schemas.Parsed] = {}

    @property
    def state(self):
        return self.store.state

    # ------------------------------------------------------------ reading

    def _live(self, subject: str, deleted: bool = False) -> dict[int, Version]:
        versions = self.state.subjects.get(subject, {})
        return {n: v for n, v in sorted(versions.items()) if deleted or not v.deleted}

    def subjects(self, prefix: str = "", deleted: bool = False, deleted_only: bool = False) -> list[str]:
        with self.store.lock:
            out = []
            for s, versions in self.state.subjects.items():
                if not s.startswith(prefix) or not versions:
                    continue
                any_live = any(not v.deleted for v in versions.values())
                any_deleted = any(v.deleted for v in versions.values())
                if (deleted_only and any_deleted) or (not deleted_only and (any_live or deleted)):
                    out.append(s)
            return sorted(out)

    def versions(self, subject: str, deleted: bool = False, deleted_only: bool = False) -> list[int]:
        with self.store.lock:
            all_versions = self._live(subject, True)
            if not all_versions or (not deleted and not deleted_only and
                                    all(v.deleted for v in all_versions.values())):
                raise subject_not_found(subject)
            if deleted_only:
                return [n for n, v in all_versions.items() if v.deleted]
            return [n for n, v in all_versions.items() if deleted or not v.deleted]

    def version(self, subject: str, version: str | int, deleted: bool = False) -> Version:
        v = parse_version(version)
        with self.store.lock:
            live = self._live(subject, deleted)
            if not self.state.subjects.get(subject) or (not live and v == "latest"):
                raise subject_not_found(subject)
            if v == "latest":
                return live[max(live)]
            found = live.get(v)
            if found is None:
                raise version_not_found(subject, v)
            return found

    def schema_by_id(self, schema_id: int, subject: str | None = None) -> Version:
        with self.store.lock:
            found = self.state.by_id(schema_id)
            if not found:
                raise schema_not_found(schema_id)
            if subject:
                found = [v for v in found if v.subject == subject] or found
            return found[0]

    def id_usages(self, schema_id: int, deleted: bool = False) -> list[Version]:
        with self.store.lock:
            found = self.state.by_id(schema_id)
            if not found:
                raise schema_not_found(schema_id)
            return sorted((v for v in found if deleted or not v.deleted), key=lambda v: (v.subject, v.version))

    def all_schemas(self, prefix: str = "", deleted: bool = False, latest_only: bool = False) -> list[Version]:
        with self.store.lock:
            out = []
            for s in sorted(self.state.subjects):
                if not s.startswith(prefix):
                    continue
                live = self._live(s, deleted)
                if live:
                    out += [live[max(live)]] if latest_only else list(live.values())
            return out

    def referenced_by(self, subject: str, version: str | int) -> list[int]:
        v = self.version(subject, version)
        with self.store.lock:
            return sorted({x.id for vs in self.state.subjects.values() for x in vs.values() if not x.deleted
                           and any(r.get("subject") == subject and r.get("version") == v.version
                                   for r in x.references)})

    def level(self, subject: str | None, default_to_global: bool = True) -> str | None:
        return self._setting(self.state.configs, subject, default_to_global, self.default_level)

    def mode(self, subject: str | None, default_to_global: bool = True) -> str | None:
        return self._setting(self.state.modes, subject, default_to_global, self.default_mode)

    def _setting(self, table: dict, subject: str | None, default_to_global: bool, default: str) -> str | None:
        """A subject's own setting, else (if asked) the global one (key None), else the default."""
        with self.store.lock:
            if subject is not None and subject in table:
                return table[subject]
            if subject is not None and not default_to_global:
                return None
            return table.get(None, default)

    # ------------------------------------------------------------ parsing

    def _resolve_refs(self, references: list[dict], seen: set | None = None) -> list[str]:
        """The referenced schemas' texts, dependencies first (42201 if one does not resolve)."""
        seen = set() if seen is None else seen
        out: list[str] = []
        for r in references or []:
            if not isinstance(r, dict) or not {"name", "subject", "version"} <= set(r):
                raise RestError(422, 42201, f"Invalid reference {r!r}: name, subject and version are required")
            key = (r["subject"], r["version"])
            if key in seen:
                continue
            seen.add(key)
            try:
                v = self.version(r["subject"], r["version"], deleted=True)
            except RestError:
                raise RestError(422, 42201, f"Invalid schema: the reference {r['name']} to subject "
                                            f"'{r['subject']}' version {r['version']} does not exist") from None
            out += self._resolve_refs(v.references, seen) + [v.schema]
        return out

    def parse(self, schema_type: str, text: Any, references: list[dict], normalize: bool = False) -> schemas.Parsed:
        schema_type = (schema_type or "AVRO").upper()
        if schema_type not in schemas.TYPES:
            raise RestError(422, 42201, f"Invalid schema type {schema_type}")
        if not isinstance(text, str):
            raise RestError(422, 42201, "Invalid schema: the schema must be a string")
        key = (schema_type, text, repr(references), normalize)
        parsed = self._parsed.get(key)
        if parsed is None:
            try:
                parsed = schemas.parse(schema_type, text, self._resolve_refs(references), normalize)
            except schemas.InvalidSchema as e:
                raise RestError(422, 42201, str(e)) from None
            parsed.references = list(references or [])
            if len(self._parsed) > 10000:
                self._parsed.clear()
            self._parsed[key] = parsed
        return parsed

    def _parsed_version(self, v: Version) -> schemas.Parsed:
        return self.parse(v.schema_type, v.schema, v.references)

    def _same(self, v: Version, parsed: schemas.Parsed) -> bool:
        if v.schema_type != parsed.schema_type or (v.references or []) != (parsed.references or []):
            return False
        if v.schema == parsed.text:
            return True
        try:
            return self._parsed_version(v).canonical == parsed.canonical
        except RestError:
            return False

    def lookup(self, subject: str, body: dict, normalize: bool = False, deleted: bool = False) -> Version:
        parsed = self.parse(body.get("schemaType"), body.get("schema"), body.get("references") or [], normalize)
        with self.store.lock:
            versions = self._live(subject, deleted)
            if not self.state.subjects.get(subject):
                raise subject_not_found(subject)
            for v in sorted(versions.values(), key=lambda v: -v.version):
                if self._same(v, parsed):
                    return v
        raise schema_not_found()

    def compatibility(self, subject: str, version: str | None, body: dict, normalize: bool = False) -> list[str]:
        parsed = self.parse(body.get("schemaType"), body.get("schema"), body.get("references") or [], normalize)
        level = self.level(subject) or "BACKWARD"
        with self.store.lock:
            live = self._live(subject)
            if version is None:
                against = list(live.items()) if level.endswith("TRANSITIVE") else list(live.items())[-1:]
                level_used = level
            else:
                if not live and not self.state.subjects.get(subject):
                    raise subject_not_found(subject)
                target = self.version(subject, version)
                against, level_used = [(target.version, target)], level.replace("_TRANSITIVE", "")
            previous = [(n, self._parsed_version(v)) for n, v in against]
        return schemas.check(level_used, parsed, previous)

    # ------------------------------------------------------------ writing (the leader)

    def _writable(self, subject: str | None, importing: bool = False) -> None:
        mode = self.mode(subject)
        if mode in ("READONLY", "READONLY_OVERRIDE"):
            raise RestError(422, 42205, f"Subject {subject} is in read-only mode")
        if importing and mode != "IMPORT":
            raise RestError(422, 42205, f"Subject {subject} is not in import mode")

    def register(self, subject: str, body: dict, normalize: bool = False) -> Version:
        schema_id, version = body.get("id"), body.get("version")
        importing = schema_id is not None   # ids are given only in IMPORT mode
        parsed = self.parse(body.get("schemaType"), body.get("schema"), body.get("references") or [], normalize)
        with self.write_lock:
            self._writable(subject, importing)
            with self.store.lock:
                all_versions = self._live(subject, True)
                live = {n: v for n, v in all_versions.items() if not v.deleted}
                for v in sorted(live.values(), key=lambda v: -v.version):
                    if self._same(v, parsed) and (schema_id is None or schema_id == v.id):
                        return v
                level = self.level(subject) or "BACKWARD"
                previous = [(n, self._parsed_version(v)) for n, v in live.items()]
                if importing:
                    if not isinstance(schema_id, int) or schema_id < 1:
                        raise RestError(422, 42201, f"Invalid schema id {schema_id}")
                    holder = self.state.by_id(schema_id)
                    if holder and not self._same(holder[0], parsed):
                        raise RestError(422, 42205, f"Overwrite new schema with id {schema_id} is not permitted.")
                    new_id = schema_id
                    new_version = version if isinstance(version, int) and version > 0 else \
                        (max(all_versions) + 1 if all_versions else 1)
                    if new_version in all_versions:
                        raise RestError(422, 42205, f"Version {new_version} of subject {subject} already exists")
                else:
                    if self.mode(subject) != "IMPORT":
                        problems = schemas.check(level, parsed, previous)
                        if problems:
                            raise RestError(409, 409, "Schema being registered is incompatible with an earlier "
                                                      f"schema for subject \"{subject}\", details: {problems}")
                    new_id = self._existing_id(parsed) or self.state.max_id + 1
                    new_version = max(all_versions) + 1 if all_versions else 1
            record = Version(subject, new_version, new_id, parsed.schema_type, parsed.text, parsed.references)
            self.store.write([(schema_key(subject, new_version), {**record.to_json(), "deleted": False})])
            return record

    def _existing_id(self, parsed: schemas.Parsed) -> int | None:
        for vs in self.state.subjects.values():
            for v in vs.values():
                if self._same(v, parsed):
                    return v.id
        return None

    def _referenced(self, subject: str, versions: list[int]) -> bool:
        return any(not x.deleted and any(r.get("subject") == subject and r.get("version") in versions
                                         for r in x.references)
                   for vs in self.state.subjects.values() for x in vs.values())

    def delete_version(self, subject: str, version: str | int, permanent: bool = False) -> int:
        v = parse_version(version)
        with self.write_lock:
            self._writable(subject)
            with self.store.lock:
                all_versions = self._live(subject, True)
                if not all_versions:
                    raise subject_not_found(subject)
                if v == "latest":
                    live = [n for n, x in all_versions.items() if not x.deleted]
                    if not live:
                        raise subject_not_found(subject)
                    v = max(live)
                found = all_versions.get(v)
                if found is None:
                    raise version_not_found(subject, v)
                if self._referenced(subject, [v]):
                    raise RestError(422, 42206, f"One or more references exist to the schema {{subject={subject},"
                                                f" version={v}}}.")
                if permanent and not found.deleted:
                    raise RestError(404, 40407, f"Subject '{subject}' Version {v} was not deleted first before "
                                                "being permanently deleted")
                if not permanent and found.deleted:
                    raise RestError(404, 40406, f"Subject '{subject}' Version {v} was soft deleted. Set "
                                                "permanent=true to delete permanently")
            if permanent:
                self.store.write([(schema_key(subject, v), None)])
            else:
                self.store.write([(schema_key(subject, v), {**found.to_json(), "deleted": True})])
            return v

    def delete_subject(self, subject: str, permanent: bool = False) -> list[int]:
        with self.write_lock:
            self._writable(subject)
            with self.store.lock:
                all_versions = self._live(subject, True)
                if not all_versions:
                    raise subject_not_found(subject)
                live = [n for n, v in all_versions.items() if not v.deleted]
                if self._referenced(subject, list(all_versions)):
                    raise RestError(422, 42206, f"One or more references exist to the schema {{subject={subject}}}.")
                if permanent and live:
                    raise RestError(404, 40405, f"Subject '{subject}' was not deleted first before being "
                                                "permanently deleted")
                if not permanent and not live:
                    raise RestError(404, 40404, f"Subject '{subject}' was soft deleted.Set permanent=true to "
                                                "delete permanently")
            if permanent:
                self.store.write([(schema_key(subject, n), None) for n in all_versions]
                                 + [(config_key(subject), None), (mode_key(subject), None)])
                return list(all_versions)
            self.store.write([(delete_subject_key(subject), {"subject": subject, "version": max(live)})])
            return live

    def set_level(self, subject: str | None, level: Any) -> str:
        if not isinstance(level, str) or level.upper() not in schemas.LEVELS:
            raise RestError(422, 42203, "Invalid compatibility level. Valid values are none, backward, forward, "
                                        "full, backward_transitive, forward_transitive, and full_transitive")
        with self.write_lock:
            self.store.write([(config_key(subject), {"compatibilityLevel": level.upper()})])
        return level.upper()

    def delete_level(self, subject: str | None) -> str:
        with self.write_lock:
            previous = self.level(subject, default_to_global=subject is None)
            if subject is not None and previous is None:
                if not self.state.subjects.get(subject):
                    raise subject_not_found(subject)
                raise RestError(404, 40408, f"Subject '{subject}' does not have subject-level compatibility "
                                            "configured")
            self.store.write([(config_key(subject), None)])
            return previous or self.default_level

    def set_mode(self, subject: str | None, mode: Any, force: bool = False) -> str:
        if not isinstance(mode, str) or mode.upper() not in MODES:
            raise RestError(422, 42204, "Invalid mode. Valid values are READWRITE, READONLY, READONLY_OVERRIDE "
                                        "and IMPORT.")
        mode = mode.upper()
        with self.write_lock:
            if mode == "IMPORT" and not force:
                with self.store.lock:
                    has = self._live(subject) if subject is not None else self.all_schemas()
                if has:
                    raise RestError(422, 42205, "Cannot import since found existing subjects")
            self.store.write([(mode_key(subject), {"mode": mode})])
        return mode

    def delete_mode(self, subject: str) -> str:
        with self.write_lock:
            previous = self.mode(subject, default_to_global=False)
            if previous is None:
                raise RestError(404, 40409, f"Subject '{subject}' does not have subject-level mode configured")
            self.store.write([(mode_key(subject), None)])
            return previous
