"""``samsa configs --entity-type users|clients``: client quotas and SCRAM credentials, as
kafka-configs.sh sets and shows them.

    samsa configs --bootstrap-server localhost:9092 --alter --entity-type users --entity-name alice \\
        --add-config 'SCRAM-SHA-256=[iterations=8192,password=alice-secret],producer_byte_rate=1048576'
    samsa configs --bootstrap-server localhost:9092 --alter --entity-type clients --entity-default \\
        --add-config consumer_byte_rate=2097152
    samsa configs --bootstrap-server localhost:9092 --alter --entity-type users --entity-name alice \\
        --delete-config SCRAM-SHA-512
    samsa configs --bootstrap-server localhost:9092 --describe --entity-type users --entity-name alice
"""

from __future__ import annotations

import argparse

from samsa.cli.common import UsageError
from samsa.client.admin import Admin
from samsa.security.quotas import QUOTA_KEYS
from samsa.security.scram import MECHANISMS

USER, CLIENT = "user", "client-id"
_KINDS = {"users": USER, "clients": CLIENT}


def wanted(opts: argparse.Namespace) -> bool:
    """Does the command line name users or clients?"""
    return (any(t in _KINDS for t in opts.entity_type) or bool(opts.user or opts.client)
            or opts.user_defaults or opts.client_defaults)


def entity(opts: argparse.Namespace) -> dict[str, str | None] | None:
    """{"user": "alice"|None (the default), "client-id": ...}; None: every entity (describe)."""
    pairs: list[tuple[str, str | None]] = []
    names = list(opts.entity_names or [])
    for i, t in enumerate(opts.entity_type):
        if t not in _KINDS:
            raise UsageError(f"Only users and clients may be specified together, not {t}")
        if i < len(names):
            pairs.append((_KINDS[t], names[i] or None))
        elif opts.alter:
            raise UsageError(f"An entity-name or default entity must be specified with --alter of {t}")
    for flag, kind, default in (("user", USER, "user_defaults"), ("client", CLIENT, "client_defaults")):
        if getattr(opts, flag) or getattr(opts, default):
            pairs.append((kind, getattr(opts, flag) or None))
    kinds = [k for k, _ in pairs]
    if len(set(kinds)) != len(kinds):
        raise UsageError(f"Duplicate entity type(s) specified: {','.join(sorted(set(k for k in kinds if kinds.count(k) > 1)))}")
    return dict(pairs) if pairs else None


def describe_entity(e: dict[str, str | None]) -> str:
    parts = []
    for kind, label in ((USER, "user-principal"), (CLIENT, "client-id")):
        if kind in e:
            parts.append(f"the default {label}" if e[kind] is None else f"{label} '{e[kind]}'")
    return ", ".join(parts)


def alter(admin: Admin, e: dict[str, str | None], to_add: dict[str, str], to_delete: list[str]) -> None:
    scram = {k: v for k, v in to_add.items() if k in MECHANISMS}
    quotas: dict[str, float | None] = {}
    for k, v in to_add.items():
        if k in MECHANISMS:
            continue
        if k not in QUOTA_KEYS:
            raise UsageError(f"Invalid config(s): {k}")
        try:
            quotas[k] = float(v)
        except ValueError:
            raise UsageError(f"Invalid value {v} for {k}: a number is expected") from None
    deletions = [k for k in to_delete if k in MECHANISMS]
    invalid = [k for k in to_delete if k not in MECHANISMS and k not in QUOTA_KEYS]
    if invalid:
        raise UsageError(f"Invalid config(s): {','.join(invalid)}")
    quotas.update((k, None) for k in to_delete if k in QUOTA_KEYS)
    if scram or deletions:
        if set(e) != {USER} or e[USER] is None:
            raise UsageError("SCRAM credentials may only be altered for a named user (--entity-type users "
                             "--entity-name <user>)")
        upserts = []
        for mech, spec in scram.items():
            fields = dict(item.split("=", 1) for item in spec.split(",") if "=" in item)
            if "password" not in fields:
                raise UsageError(f"{mech} needs password=... (and optionally iterations=...)")
            upserts.append((e[USER], mech, int(fields.get("iterations", 4096)), fields["password"]))
        admin.alter_user_scram_credentials(upserts, [(e[USER], m) for m in deletions])
    if quotas:
        admin.alter_client_quotas([(e, quotas)])
    if len(e) == 1 and next(iter(e.values())) is None:
        kind = "users" if USER in e else "clients"
        print(f"Completed updating default config for {kind} in the cluster.")
    else:
        kind, name = next(iter(e.items()))
        print(f"Completed updating config for {'user' if kind == USER else 'client'} {name}.")


def describe(admin: Admin, e: dict[str, str | None] | None, kinds: set[str]) -> None:
    components = [] if e is None else [(k, v, True) for k, v in e.items()]
    found = admin.describe_client_quotas(components, strict=e is not None)
    if e is None:
        found = [(ent, q) for ent, q in found if set(ent) <= kinds and set(ent) & kinds]
    for ent, values in found:
        shown = ", ".join(f"{k}={v}" for k, v in sorted(values.items()))
        print(f"Quota configs for {describe_entity(ent)} are {shown}")
    if USER in kinds and (e is None or (set(e) == {USER} and e[USER] is not None)):
        users = None if e is None else [e[USER]]
        try:
            creds = admin.describe_user_scram_credentials(users)
        except Exception as err:  # a user without credentials: nothing to show, as Kafka
            if "RESOURCE_NOT_FOUND" in type(err).__name__.upper() or "does not exist" in str(err):
                return
            raise
        for user, infos in sorted(creds.items()):
            if infos:
                shown = ", ".join(f"{m}=iterations={i}" for m, i in infos)
                print(f"SCRAM credential configs for user-principal '{user}' are {shown}")


def run(admin: Admin, opts: argparse.Namespace, to_add: dict[str, str], to_delete: list[str]) -> None:
    e = entity(opts)
    if opts.alter:
        if e is None:
            raise UsageError("An entity-name or default entity must be specified with --alter of users, clients, "
                             "brokers or ips")
        alter(admin, e, to_add, to_delete)
    else:
        kinds = {_KINDS[t] for t in opts.entity_type if t in _KINDS}
        kinds |= {USER} if (opts.user or opts.user_defaults) else set()
        kinds |= {CLIENT} if (opts.client or opts.client_defaults) else set()
        describe(admin, e, kinds)
