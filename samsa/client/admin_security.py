"""The Admin's security calls: ACLs (Create/Describe/DeleteAcls), SCRAM credentials
(Describe/AlterUserScramCredentials: the password is salted and hashed here, never sent) and
client quotas (Describe/AlterClientQuotas). The base of :class:`samsa.client.admin.AsyncAdmin`."""

from __future__ import annotations

import os
from typing import Any, Iterable, Mapping

from samsa.client.admin_driver import ANY, RequestDriver
from samsa.protocol import errors
from samsa.protocol.api_keys import ApiKey
from samsa.security.acl import LITERAL, AclBinding, AclFilter
from samsa.security.scram import MECHANISM_TYPES, MECHANISMS, salted_password

_MECHANISM_NAMES = {v: k for k, v in MECHANISM_TYPES.items()}
QuotaEntity = Mapping[str, "str | None"]  # {"user": "alice", "client-id": None}: None is the default entity


def _raise(code: int, message: str | None, context: str) -> None:
    if code:
        raise errors.error_for(code, message or f"{context}: {errors.error_name(code)}")


class SecurityAdmin(RequestDriver):
    """Each call is one request to any broker, sent through the Admin's request driver
    (:meth:`~samsa.client.admin_driver.RequestDriver._request`: its retry policy included)."""

    async def _any_request(self, api_key: int, body: dict[str, Any]) -> dict[str, Any]:
        return await self._request(ANY, api_key, body)

    # ---------------------------------------------------------------- ACLs

    async def create_acls(self, bindings: Iterable[AclBinding]) -> None:
        bindings = list(bindings)
        resp = await self._any_request(ApiKey.CREATE_ACLS, {"creations": [
            {"resource_type": b.resource_type, "resource_name": b.name, "resource_pattern_type": b.pattern_type,
             "principal": b.principal, "host": b.host, "operation": b.operation, "permission_type": b.permission}
            for b in bindings]})
        for r in resp["results"]:
            _raise(r["error_code"], r.get("error_message"), "CreateAcls")

    async def describe_acls(self, flt: AclFilter = AclFilter()) -> list[AclBinding]:
        resp = await self._any_request(ApiKey.DESCRIBE_ACLS, {
            "resource_type_filter": flt.resource_type, "resource_name_filter": flt.name,
            "pattern_type_filter": flt.pattern_type, "principal_filter": flt.principal, "host_filter": flt.host,
            "operation": flt.operation, "permission_type": flt.permission})
        _raise(resp["error_code"], resp.get("error_message"), "DescribeAcls")
        return [AclBinding(r["resource_type"], r["resource_name"], r.get("pattern_type", LITERAL), a["principal"],
                           a["host"], a["operation"], a["permission_type"])
                for r in resp["resources"] for a in r["acls"]]

    async def delete_acls(self, filters: Iterable[AclFilter]) -> list[list[AclBinding]]:
        """The bindings each filter deleted."""
        filters = list(filters)
        resp = await self._any_request(ApiKey.DELETE_ACLS, {"filters": [
            {"resource_type_filter": f.resource_type, "resource_name_filter": f.name,
             "pattern_type_filter": f.pattern_type, "principal_filter": f.principal, "host_filter": f.host,
             "operation": f.operation, "permission_type": f.permission} for f in filters]})
        out = []
        for r in resp["filter_results"]:
            _raise(r["error_code"], r.get("error_message"), "DeleteAcls")
            out.append([AclBinding(m["resource_type"], m["resource_name"], m["pattern_type"], m["principal"],
                                   m["host"], m["operation"], m["permission_type"]) for m in r["matching_acls"]])
        return out

    # ---------------------------------------------------------------- SCRAM

    async def describe_user_scram_credentials(self, users: Iterable[str] | None = None
                                              ) -> dict[str, list[tuple[str, int]]]:
        """user -> [(mechanism, iterations)] (every user with credentials when ``users`` is None)."""
        body = {"users": None if users is None else [{"name": u} for u in users]}
        resp = await self._any_request(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, body)
        _raise(resp["error_code"], resp.get("error_message"), "DescribeUserScramCredentials")
        out = {}
        for r in resp["results"]:
            _raise(r["error_code"], r.get("error_message"), f"Describing {r['user']}")
            out[r["user"]] = [(_MECHANISM_NAMES.get(i["mechanism"], "UNKNOWN"), i["iterations"])
                              for i in r["credential_infos"]]
        return out

    async def alter_user_scram_credentials(self, upsertions: Iterable[tuple[str, str, int, str]] = (),
                                           deletions: Iterable[tuple[str, str]] = ()) -> None:
        """Upsert (user, mechanism, iterations, password) — salted and hashed before it leaves — and
        delete (user, mechanism)."""
        ups = []
        for user, mechanism, iterations, password in upsertions:
            if mechanism not in MECHANISMS:
                raise ValueError(f"Unknown SCRAM mechanism {mechanism} (one of {', '.join(MECHANISMS)})")
            salt = os.urandom(32)
            ups.append({"name": user, "mechanism": MECHANISM_TYPES[mechanism], "iterations": iterations,
                        "salt": salt, "salted_password": salted_password(MECHANISMS[mechanism], password, salt,
                                                                         iterations)})
        dels = []
        for user, mechanism in deletions:
            if mechanism not in MECHANISMS:
                raise ValueError(f"Unknown SCRAM mechanism {mechanism} (one of {', '.join(MECHANISMS)})")
            dels.append({"name": user, "mechanism": MECHANISM_TYPES[mechanism]})
        resp = await self._any_request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, {"deletions": dels, "upsertions": ups})
        for r in resp["results"]:
            _raise(r["error_code"], r.get("error_message"), f"Altering {r['user']}'s credentials")

    # ---------------------------------------------------------------- client quotas

    async def describe_client_quotas(self, components: Iterable[tuple[str, str | None, bool]] = (),
                                     strict: bool = False) -> list[tuple[dict[str, str | None], dict[str, float]]]:
        """Components (entity type, name or None for the default entity, exact?); no component
        matches every entity. Each match: (entity, {quota key: value})."""
        body = {"components": [{"entity_type": t, "match_type": 0 if exact and name is not None
                                else (1 if exact else 2), "match": name if exact else None}
                               for t, name, exact in components], "strict": strict}
        resp = await self._any_request(ApiKey.DESCRIBE_CLIENT_QUOTAS, body)
        _raise(resp["error_code"], resp.get("error_message"), "DescribeClientQuotas")
        return [({e["entity_type"]: e["entity_name"] for e in r["entity"]},
                 {v["key"]: v["value"] for v in r["values"]}) for r in resp["entries"] or []]

    async def alter_client_quotas(self, changes: Iterable[tuple[QuotaEntity, Mapping[str, float | None]]],
                                  validate_only: bool = False) -> None:
        """(entity, {key: value, or None to remove}) for each entity."""
        entries = [{"entity": [{"entity_type": t, "entity_name": n} for t, n in entity.items()],
                    "ops": [{"key": k, "value": 0.0 if v is None else float(v), "remove": v is None}
                            for k, v in ops.items()]} for entity, ops in changes]
        resp = await self._any_request(ApiKey.ALTER_CLIENT_QUOTAS, {"entries": entries, "validate_only": validate_only})
        for r in resp["entries"]:
            _raise(r["error_code"], r.get("error_message"), "AlterClientQuotas")
