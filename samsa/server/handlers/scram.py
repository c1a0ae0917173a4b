"""DescribeUserScramCredentials (50) and AlterUserScramCredentials (51).

The client sends a salt and the salted password (PBKDF2), never the password; the broker
keeps Kafka's ``salt,stored_key,server_key,iterations`` in ``users/<name>`` of the metadata
store. Describe answers mechanisms and iteration counts only."""

from __future__ import annotations

from samsa.protocol import errors
from samsa.protocol.api_keys import ApiKey
from samsa.security.scram import (MAX_ITERATIONS, MECHANISM_TYPES, MECHANISMS, MIN_ITERATIONS, ScramCredential,
                                  credential_from_salted)
from samsa.server.handlers import handles
from samsa.server.handlers.authz import Op, allowed_cluster

_BY_TYPE = {v: k for k, v in MECHANISM_TYPES.items()}


def _credentials(broker, user: str) -> dict[str, ScramCredential]:
    configs = broker.store.entity_configs(f"users/{user}")
    return {m: ScramCredential.from_text(configs[m]) for m in MECHANISMS if m in configs}


@handles(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS)
def describe_user_scram_credentials(ctx, req: dict) -> dict:
    broker = ctx.broker
    if not allowed_cluster(ctx, Op.DESCRIBE):
        return {"throttle_time_ms": 0, "error_code": errors.E_CLUSTER_AUTHORIZATION_FAILED,
                "error_message": "Not authorized to describe SCRAM credentials", "results": []}
    if req["users"] is None or not req["users"]:
        users = sorted({e.split("/")[1] for e, c in broker.store.entities().items()
                        if e.startswith("users/") and e.count("/") == 1 and any(m in c for m in MECHANISMS)})
        wanted, strict = users, False
    else:
        wanted, strict = [u["name"] for u in req["users"]], True
    results = []
    for user in dict.fromkeys(wanted):
        creds = _credentials(broker, user)
        if not creds and strict:
            results.append({"user": user, "error_code": errors.E_RESOURCE_NOT_FOUND,
                            "error_message": f"Attempt to describe a user credential that does not exist: {user}",
                            "credential_infos": []})
            continue
        results.append({"user": user, "error_code": 0, "error_message": None,
                        "credential_infos": [{"mechanism": MECHANISM_TYPES[m], "iterations": c.iterations}
                                             for m, c in sorted(creds.items())]})
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "results": results}


@handles(ApiKey.ALTER_USER_SCRAM_CREDENTIALS)
def alter_user_scram_credentials(ctx, req: dict) -> dict:
    broker = ctx.broker
    if not allowed_cluster(ctx, Op.ALTER):
        users = dict.fromkeys(x["name"] for x in [*req["deletions"], *req["upsertions"]])
        return {"throttle_time_ms": 0, "results": [
            {"user": u, "error_code": errors.E_CLUSTER_AUTHORIZATION_FAILED, "error_message": None} for u in users]}
    results: dict[str, dict] = {}
    changes: dict[str, dict[str, str | None]] = {}

    def fail(user: str, code: int, message: str) -> None:
        results[user] = {"user": user, "error_code": code, "error_message": message}

    for d in req["deletions"]:
        mech = _BY_TYPE.get(d["mechanism"])
        if not d["name"]:
            fail(d["name"], errors.E_UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
        elif mech is None:
            fail(d["name"], errors.E_UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
        elif mech not in broker.store.entity_configs(f"users/{d['name']}"):
            fail(d["name"], errors.E_RESOURCE_NOT_FOUND,
                 f"Attempt to delete a user credential that does not exist: {d['name']} {mech}")
        else:
            changes.setdefault(d["name"], {})[mech] = None
    for u in req["upsertions"]:
        mech = _BY_TYPE.get(u["mechanism"])
        if not u["name"]:
            fail(u["name"], errors.E_UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
        elif mech is None:
            fail(u["name"], errors.E_UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
        elif u["iterations"] < MIN_ITERATIONS:  # Kafka's words, without the bounds
            fail(u["name"], errors.E_UNACCEPTABLE_CREDENTIAL, "Too few iterations")
        elif u["iterations"] > MAX_ITERATIONS:
            fail(u["name"], errors.E_UNACCEPTABLE_CREDENTIAL, "Too many iterations")
        elif not u["salt"] or not u["salted_password"]:
            fail(u["name"], errors.E_UNACCEPTABLE_CREDENTIAL, "Salt and salted password must not be empty")
        else:
            cred = credential_from_salted(MECHANISMS[mech], u["salt"], u["salted_password"], u["iterations"])
            changes.setdefault(u["name"], {})[mech] = cred.to_text()
    for user, change in changes.items():
        if user in results:
            continue
        configs = broker.store.entity_configs(f"users/{user}")
        for mech, text in change.items():
            if text is None:
                configs.pop(mech, None)
            else:
                configs[mech] = text
        broker.store.put_entity_configs(f"users/{user}", configs)
        results[user] = {"user": user, "error_code": 0, "error_message": None}
    return {"throttle_time_ms": 0, "results": list(results.values())}
