"""DescribeClientQuotas (48) and AlterClientQuotas (49): quotas per user, client id or both,
with ``<default>`` entities, kept as entity configs in the metadata store (ZooKeeper
``/config/users``, ``/config/clients``) where every broker reads them."""

from __future__ import annotations

import math

from samsa.protocol import errors
from samsa.protocol.api_keys import ApiKey
from samsa.security.quotas import (CONTROLLER_MUTATION_RATE, DEFAULT, QUOTA_KEYS, REQUEST_PERCENTAGE, entity_path,
                                   parse_entity_path)
from samsa.server.handlers import handles
from samsa.server.handlers.authz import Op, allowed_cluster

USER, CLIENT = "user", "client-id"
EXACT, DEFAULT_MATCH, ANY = 0, 1, 2
_DOUBLE_KEYS = (REQUEST_PERCENTAGE, CONTROLLER_MUTATION_RATE)
LONG_MAX = 2 ** 63 - 1


def _components(path: str) -> dict[str, str | None]:
    """``users/alice/clients/<default>`` -> {"user": "alice", "client-id": None} (None: the default)."""
    user, client = parse_entity_path(path)
    out: dict[str, str | None] = {}
    if user is not None:
        out[USER] = None if user == DEFAULT else user
    if client is not None:
        out[CLIENT] = None if client == DEFAULT else client
    return out


def _matches(entity: dict[str, str | None], components: list[dict], strict: bool) -> bool:
    for c in components:
        kind = c["entity_type"]
        if kind not in entity:
            return False
        name = entity[kind]
        if c["match_type"] == EXACT and name != c["match"]:
            return False
        if c["match_type"] == DEFAULT_MATCH and name is not None:
            return False
    return not strict or set(entity) == {c["entity_type"] for c in components}


@handles(ApiKey.DESCRIBE_CLIENT_QUOTAS)
def describe_client_quotas(ctx, req: dict) -> dict:
    if not allowed_cluster(ctx, Op.DESCRIBE_CONFIGS):
        return {"throttle_time_ms": 0, "error_code": errors.E_CLUSTER_AUTHORIZATION_FAILED,
                "error_message": "Not authorized to describe client quotas", "entries": None}
    for c in req["components"]:
        if c["entity_type"] not in (USER, CLIENT) or c["match_type"] not in (EXACT, DEFAULT_MATCH, ANY):
            return {"throttle_time_ms": 0, "error_code": errors.E_INVALID_REQUEST,
                    "error_message": f"Unsupported quota filter component {c['entity_type']} / {c['match_type']}",
                    "entries": None}
    entries = []
    for path, configs in sorted(ctx.broker.store.entities().items()):
        quotas = {k: v for k, v in configs.items() if k in QUOTA_KEYS}
        try:
            entity = _components(path)
        except ValueError:
            continue
        if quotas and _matches(entity, req["components"], req["strict"]):
            entries.append({"entity": [{"entity_type": k, "entity_name": n} for k, n in entity.items()],
                            "values": [{"key": k, "value": float(v)} for k, v in sorted(quotas.items())]})
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "entries": entries}


def _path(entity: list[dict]) -> str:
    unknown = next((e["entity_type"] for e in entity if e["entity_type"] not in (USER, CLIENT, "ip")), None)
    if unknown is not None:  # as Kafka words it
        raise errors.InvalidRequestError(f"Unhandled client quota entity type: {unknown}")
    kinds = {e["entity_type"]: e["entity_name"] for e in entity}
    if len(kinds) != len(entity) or not kinds or not set(kinds) <= {USER, CLIENT}:
        raise errors.InvalidRequestError(f"Invalid quota entity {entity}: user and/or client-id, once each")
    name = lambda k: None if k not in kinds else (DEFAULT if kinds[k] is None else kinds[k])  # noqa: E731
    if "" in kinds.values():
        raise errors.InvalidRequestError("An entity name must not be empty (use the default entity instead)")
    return entity_path(name(USER), name(CLIENT))


def _value(key: str, value: float) -> str:
    if key not in QUOTA_KEYS:
        raise errors.InvalidRequestError(f"Invalid configuration key {key}")
    if not math.isfinite(value):  # NaN passes every comparison below; infinity is no rate
        raise errors.InvalidRequestError(f"Quota {key} must be a finite number")
    if value <= 0:
        raise errors.InvalidRequestError(f"Quota {key} must be greater than 0")
    if key in _DOUBLE_KEYS:
        return repr(float(value))
    if value > LONG_MAX:
        raise errors.InvalidRequestError(f"Proposed value for {key} is too large for a LONG.")
    if value != int(value):
        raise errors.InvalidRequestError(f"Quota {key} must be a whole number of bytes per second, got {value}")
    return str(int(value))


@handles(ApiKey.ALTER_CLIENT_QUOTAS)
def alter_client_quotas(ctx, req: dict) -> dict:
    broker = ctx.broker
    authorized = allowed_cluster(ctx, Op.ALTER_CONFIGS)
    out = []
    for e in req["entries"]:
        result = {"error_code": 0, "error_message": None, "entity": e["entity"]}
        try:
            if not authorized:
                raise errors.ClusterAuthorizationFailedError("Not authorized to alter client quotas")
            path = _path(e["entity"])
            configs = broker.store.entity_configs(path)
            for op in e["ops"]:
                if op["remove"]:
                    if op["key"] not in QUOTA_KEYS:
                        raise errors.InvalidRequestError(f"Invalid configuration key {op['key']}")
                    configs.pop(op["key"], None)
                else:
                    configs[op["key"]] = _value(op["key"], op["value"])
            if not req["validate_only"]:
                broker.store.put_entity_configs(path, configs)
        except errors.KafkaError as err:
            result.update(error_code=err.code, error_message=err.message)
        out.append(result)
    if not req["validate_only"]:
        broker.reload_quotas()
    return {"throttle_time_ms": 0, "entries": out}
