"""CreateAcls (30), DescribeAcls (29), DeleteAcls (31): the cluster's ACLs, kept in the
metadata store (ZooKeeper ``/kafka-acl…`` in Kafka's JSON) so every broker enforces them.
Without an authorizer Kafka answers SECURITY_DISABLED, and so does Samsa."""

from __future__ import annotations

from samsa.protocol import errors
from samsa.protocol.acl import AclOperation as Op
from samsa.protocol.acl import ResourceType as RT
from samsa.protocol.api_keys import ApiKey
from samsa.security.acl import (ALLOW, ANY_PATTERN, ANY_PERMISSION, DENY, LITERAL, MATCH, PREFIXED, AclBinding,
                                AclFilter)
from samsa.security.principal import KafkaPrincipal
from samsa.server.handlers import handles
from samsa.server.handlers.authz import allowed_cluster

# Kafka's words: CreateAcls and DeleteAcls say one thing, DescribeAcls another
_DISABLED = "No Authorizer is configured."
_DESCRIBE_DISABLED = "No Authorizer is configured on the broker"


_CONCRETE_OPERATIONS = frozenset(Op) - {Op.ANY, Op.UNKNOWN}
_PERMISSION_NAMES = {ANY_PERMISSION: "ANY", DENY: "DENY", ALLOW: "ALLOW"}
_PATTERN_NAMES = {ANY_PATTERN: "ANY", MATCH: "MATCH", LITERAL: "LITERAL", PREFIXED: "PREFIXED"}


def _op_name(code: int) -> str:
    """Kafka's name for an operation code; a code it does not know reads as UNKNOWN (AclOperation.fromCode)."""
    return Op(code).name if code in Op._value2member_map_ else "UNKNOWN"


def _binding(c: dict) -> AclBinding:
    """A creation, validated as Kafka's controller validates a new ACL (INVALID_REQUEST and its message)."""
    pattern = c.get("resource_pattern_type", LITERAL)
    if c["resource_type"] not in (RT.TOPIC, RT.GROUP, RT.CLUSTER, RT.TRANSACTIONAL_ID, RT.DELEGATION_TOKEN, RT.USER):
        name = RT(c["resource_type"]).name if c["resource_type"] in RT._value2member_map_ else "UNKNOWN"
        raise errors.InvalidRequestError(f"Invalid resourceType {name}")
    if pattern not in (LITERAL, PREFIXED):
        raise errors.InvalidRequestError(f"Invalid patternType {_PATTERN_NAMES.get(pattern, 'UNKNOWN')}")
    if c["operation"] not in _CONCRETE_OPERATIONS:
        raise errors.InvalidRequestError(f"Invalid operation {_op_name(c['operation'])}")
    if c["permission_type"] not in (ALLOW, DENY):
        raise errors.InvalidRequestError(f"Invalid permissionType {_PERMISSION_NAMES.get(c['permission_type'], 'UNKNOWN')}")
    if c["resource_type"] == RT.CLUSTER and c["resource_name"] != "kafka-cluster":
        raise errors.InvalidRequestError("The only valid name for the CLUSTER resource is kafka-cluster")
    try:
        KafkaPrincipal.parse(c["principal"])
    except ValueError as e:
        raise errors.InvalidRequestError(str(e)) from None
    if not c["resource_name"]:
        raise errors.InvalidRequestError("Resource name must not be empty")
    return AclBinding(c["resource_type"], c["resource_name"], pattern, c["principal"], c["host"] or "*",
                      c["operation"], c["permission_type"])


def _has_unknown(items: list[dict], fields: tuple[str, ...]) -> bool:
    """A code 0 (UNKNOWN) in any of ``fields``: Kafka's request parser refuses such a CreateAcls or
    DeleteAcls request and closes the connection."""
    return any(item.get(f, 1) == 0 for item in items for f in fields)


def _unknown_filter(f: AclFilter) -> str | None:
    if f.resource_type not in RT._value2member_map_ or f.pattern_type not in _PATTERN_NAMES:
        return "Unknown patternFilter."
    if f.operation not in Op._value2member_map_ or f.permission not in _PERMISSION_NAMES:
        return "Unknown entryFilter."
    return None


def _filter(f: dict, version: int) -> AclFilter:
    return AclFilter(f["resource_type_filter"], f["resource_name_filter"],
                     f.get("pattern_type_filter", LITERAL) if version >= 1 else LITERAL,
                     f["principal_filter"], f["host_filter"], f["operation"], f["permission_type"])


def _save(broker, changed: set[tuple[str, str, str]]) -> None:
    bindings = broker.authorizer.bindings
    for key in changed:
        entries = [b.entry_json() for b in sorted(bindings, key=lambda b: (b.principal, b.operation, b.host))
                   if b.resource_key == key]
        broker.store.put_acls(key, entries)


@handles(ApiKey.CREATE_ACLS)
def create_acls(ctx, req: dict) -> dict | None:
    broker = ctx.broker
    if _has_unknown(req["creations"], ("resource_type", "resource_pattern_type", "operation", "permission_type")):
        ctx.connection.close("CreatableAcls contain unknown elements")
        return None
    if broker.authorizer is None:
        return {"throttle_time_ms": 0, "results": [{"error_code": errors.E_SECURITY_DISABLED, "error_message": _DISABLED}
                                                   for _ in req["creations"]]}
    if not allowed_cluster(ctx, Op.ALTER):
        return {"throttle_time_ms": 0, "results": [{"error_code": errors.E_CLUSTER_AUTHORIZATION_FAILED,
                                                    "error_message": None} for _ in req["creations"]]}
    results, new = [], []
    for c in req["creations"]:
        try:
            new.append(_binding(c))
            results.append({"error_code": 0, "error_message": None})
        except errors.KafkaError as e:
            results.append({"error_code": e.code, "error_message": e.message})
    if new:
        broker.authorizer.load(list(broker.authorizer.bindings | set(new)))
        _save(broker, {b.resource_key for b in new})
    return {"throttle_time_ms": 0, "results": results}


def _describe_resources(bindings) -> list[dict]:
    by_resource: dict[tuple, list[AclBinding]] = {}
    for b in sorted(bindings, key=lambda b: (b.resource_type, b.name, b.pattern_type, b.principal, b.operation)):
        by_resource.setdefault((b.resource_type, b.name, b.pattern_type), []).append(b)
    return [{"resource_type": t, "resource_name": n, "pattern_type": p,
             "acls": [{"principal": b.principal, "host": b.host, "operation": b.operation,
                       "permission_type": b.permission} for b in acls]}
            for (t, n, p), acls in by_resource.items()]


@handles(ApiKey.DESCRIBE_ACLS)
def describe_acls(ctx, req: dict) -> dict | None:
    broker = ctx.broker
    if _has_unknown([req], ("resource_type_filter", "pattern_type_filter", "operation", "permission_type")):
        ctx.connection.close("DescribeAclsRequest contains UNKNOWN elements")
        return None
    if broker.authorizer is None:
        return {"throttle_time_ms": 0, "error_code": errors.E_SECURITY_DISABLED, "error_message": _DESCRIBE_DISABLED,
                "resources": []}
    if not allowed_cluster(ctx, Op.DESCRIBE):
        return {"throttle_time_ms": 0, "error_code": errors.E_CLUSTER_AUTHORIZATION_FAILED, "error_message": None,
                "resources": []}
    f = AclFilter(req["resource_type_filter"], req["resource_name_filter"],
                  req.get("pattern_type_filter", LITERAL) if ctx.version >= 1 else LITERAL,
                  req["principal_filter"], req["host_filter"], req["operation"], req["permission_type"])
    found = [b for b in broker.authorizer.bindings if f.matches(b)]
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "resources": _describe_resources(found)}


@handles(ApiKey.DELETE_ACLS)
def delete_acls(ctx, req: dict) -> dict | None:
    broker = ctx.broker
    if _has_unknown(req["filters"], ("resource_type_filter", "pattern_type_filter", "operation", "permission_type")):
        ctx.connection.close("Filters contain UNKNOWN elements")
        return None
    if broker.authorizer is None:
        return {"throttle_time_ms": 0, "filter_results": [
            {"error_code": errors.E_SECURITY_DISABLED, "error_message": _DISABLED, "matching_acls": []}
            for _ in req["filters"]]}
    if not allowed_cluster(ctx, Op.ALTER):
        return {"throttle_time_ms": 0, "filter_results": [
            {"error_code": errors.E_CLUSTER_AUTHORIZATION_FAILED, "error_message": None, "matching_acls": []}
            for _ in req["filters"]]}
    results, removed = [], set()
    for raw in req["filters"]:
        f = _filter(raw, ctx.version)
        why = _unknown_filter(f)
        if why:  # a code Kafka does not know reads as UNKNOWN: refused per filter, as its controller does
            results.append({"error_code": errors.E_INVALID_REQUEST, "error_message": why, "matching_acls": []})
            continue
        matched = [b for b in broker.authorizer.bindings if f.matches(b)]
        removed.update(matched)
        results.append({"error_code": 0, "error_message": None, "matching_acls": [
            {"error_code": 0, "error_message": None, "resource_type": b.resource_type, "resource_name": b.name,
             "pattern_type": b.pattern_type, "principal": b.principal, "host": b.host, "operation": b.operation,
             "permission_type": b.permission} for b in matched]})
    if removed:
        broker.authorizer.load(list(broker.authorizer.bindings - removed))
        _save(broker, {b.resource_key for b in removed})
    return {"throttle_time_ms": 0, "filter_results": results}


__all__ = ["ANY_PATTERN", "ANY_PERMISSION"]
