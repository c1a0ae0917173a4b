"""Kafka's ACL vocabulary as the protocol codes it: operations, resource types, and which
operations apply to which resource type.

Describe requests may ask for a resource's ``authorized_operations``: a bit field with bit
``n`` set for each operation code ``n`` the caller may perform. Without an authorizer,
Kafka answers every operation the resource type supports; a request that did not ask gets
``OPERATIONS_NOT_REQUESTED`` (INT32_MIN).
"""

from __future__ import annotations

from enum import IntEnum

OPERATIONS_NOT_REQUESTED = -2147483648


class AclOperation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


_O = AclOperation
SUPPORTED_OPERATIONS: dict[ResourceType, frozenset[AclOperation]] = {
    ResourceType.TOPIC: frozenset({_O.READ, _O.WRITE, _O.CREATE, _O.DESCRIBE, _O.DELETE, _O.ALTER,
                                   _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS}),
    ResourceType.GROUP: frozenset({_O.READ, _O.DESCRIBE, _O.DELETE}),
    ResourceType.CLUSTER: frozenset({_O.CREATE, _O.CLUSTER_ACTION, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS,
                                     _O.IDEMPOTENT_WRITE, _O.ALTER, _O.DESCRIBE}),
    ResourceType.TRANSACTIONAL_ID: frozenset({_O.DESCRIBE, _O.WRITE}),
    ResourceType.DELEGATION_TOKEN: frozenset({_O.DESCRIBE}),
    ResourceType.USER: frozenset({_O.CREATE_TOKENS, _O.DESCRIBE_TOKENS}),
}


def authorized_operations(resource: ResourceType, requested: bool) -> int:
    """The ``authorized_operations`` field of a describe answer, as Kafka without an authorizer gives it."""
    if not requested:
        return OPERATIONS_NOT_REQUESTED
    return sum(1 << op for op in SUPPORTED_OPERATIONS[resource])
