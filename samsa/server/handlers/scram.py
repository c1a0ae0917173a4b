"""DescribeUserScramCredentials (50) and AlterUserScramCredentials (51).

The client sends a salt and the salted password (PBKDF2), never the password; the broker
keeps Kafka's ``salt,stored_key,server_key,iterations`` in ``users/<name>`` of the metadata
store. Describe answers mechanisms and iteration counts only."""

from __future__ import annotations

from samsa.protocol import errors
from samsa.protocol.api_keys import ApiKey
from samsa.security.scram import MECHANISM_TYPES, MECHANISMS, ScramCredential, plan_alterations
from samsa.server.handlers import handles
from samsa.server.handlers.authz import Op, allowed_cluster

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
def alter_user_scram_credentials(ctx, req: dict):
    broker = ctx.broker
    if not allowed_cluster(ctx, Op.ALTER):
        users = dict.fromkeys(x["name"] for x in [*req["deletions"], *req["upsertions"]])
        return {"throttle_time_ms": 0, "results": [
            {"user": u, "error_code": errors.E_CLUSTER_AUTHORIZATION_FAILED, "error_message": None} for u in users]}
    if broker.kraft is not None:   # decided and written by the active controller, as Kafka 4 forwards it
        return broker.kraft.request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, req, 30000)
    results, changes = plan_alterations(req, lambda user, mech: mech in broker.store.entity_configs(f"users/{user}"))
    for user, change in changes.items():
        if user in results:
            continue
        configs = broker.store.entity_configs(f"users/{user}")
        for mech, cred in change.items():
            if cred is None:
                configs.pop(mech, None)
            else:
                configs[mech] = cred.to_text()
        broker.store.put_entity_configs(f"users/{user}", configs)
        results[user] = {"user": user, "error_code": 0, "error_message": None}
    return {"throttle_time_ms": 0, "results": list(results.values())}
