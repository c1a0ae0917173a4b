"""The handlers' authorization checks (Kafka's KafkaApis ``authorize`` calls).

Without ``authorizer.class.name`` the broker has no authorizer and every check is one
``is None`` test. With it, each check names the principal of the connection, the client's
host, the operation and the resource, and a denial is logged by the authorizer.
"""

from __future__ import annotations

from samsa.protocol.acl import AclOperation as Op
from samsa.protocol.acl import ResourceType as RT

CLUSTER_NAME = "kafka-cluster"

__all__ = ["Op", "RT", "allowed", "allowed_cluster", "host_of", "CLUSTER_NAME"]


def host_of(conn) -> str:
    return conn.peer.rsplit(":", 1)[0].strip("[]")


def allowed(ctx, operation: int, resource_type: int, name: str) -> bool:
    authorizer = ctx.broker.authorizer
    if authorizer is None:
        return True
    conn = ctx.connection
    return authorizer.authorize(conn.principal, host_of(conn), operation, resource_type, name)


def allowed_cluster(ctx, operation: int) -> bool:
    return allowed(ctx, operation, RT.CLUSTER, CLUSTER_NAME)


def quietly_allowed(ctx, operation: int, resource_type: int, name: str) -> bool:
    """A check whose denial is not an error (Metadata of every topic hides the others)."""
    authorizer = ctx.broker.authorizer
    if authorizer is None:
        return True
    conn = ctx.connection
    return authorizer.authorize(conn.principal, host_of(conn), operation, resource_type, name, log_denial=False)


def operations(ctx, resource_type: int, name: str, requested: bool) -> int | None:
    """authorized_operations for a describe answer; None: use the no-authorizer default."""
    authorizer = ctx.broker.authorizer
    if authorizer is None or not requested:
        return None
    from samsa.protocol.acl import SUPPORTED_OPERATIONS
    conn = ctx.connection
    return authorizer.authorized_operations(conn.principal, host_of(conn), resource_type, name,
                                            SUPPORTED_OPERATIONS[RT(resource_type)])


def allowed_by_type(ctx, operation: int, resource_type: int) -> bool:
    """May the principal perform ``operation`` on some resource of this type (KIP-679: WRITE on
    any topic lets a producer be idempotent)?"""
    authorizer = ctx.broker.authorizer
    if authorizer is None:
        return True
    conn = ctx.connection
    return authorizer.authorize_by_type(conn.principal, host_of(conn), operation, resource_type)
