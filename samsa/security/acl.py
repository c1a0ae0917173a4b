"""ACLs as Kafka evaluates them (AclAuthorizer / StandardAuthorizer).

A binding is a resource pattern (type, name, LITERAL or PREFIXED; the literal name ``*``
matches every name) and an entry (principal or ``User:*``, host or ``*``, operation,
ALLOW or DENY). A request is authorized when no matching DENY exists and a matching ALLOW
does — where ALLOW of READ, WRITE, DELETE or ALTER implies DESCRIBE, and ALTER_CONFIGS
implies DESCRIBE_CONFIGS; ``ALL`` matches every operation. A resource with no ACL at all
is open to everyone only with ``allow.everyone.if.no.acl.found``; ``super.users`` pass
every check.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass

from samsa.protocol.acl import AclOperation as Op
from samsa.protocol.acl import ResourceType as RT
from samsa.security.principal import KafkaPrincipal

log = logging.getLogger("kafka.authorizer.logger")

LITERAL, PREFIXED, MATCH, ANY_PATTERN = 3, 4, 2, 1  # PatternType codes
ALLOW, DENY, ANY_PERMISSION = 3, 2, 1  # AclPermissionType codes
WILDCARD = "*"

_IMPLIED = {Op.DESCRIBE: (Op.DESCRIBE, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER),
            Op.DESCRIBE_CONFIGS: (Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS)}

# Kafka's names in ZooKeeper's JSON and in kafka-acls.sh output.
RESOURCE_NAMES = {RT.TOPIC: "Topic", RT.GROUP: "Group", RT.CLUSTER: "Cluster", RT.TRANSACTIONAL_ID: "TransactionalId",
                  RT.DELEGATION_TOKEN: "DelegationToken", RT.USER: "User"}
OPERATION_NAMES = {Op.ALL: "All", Op.READ: "Read", Op.WRITE: "Write", Op.CREATE: "Create", Op.DELETE: "Delete",
                   Op.ALTER: "Alter", Op.DESCRIBE: "Describe", Op.CLUSTER_ACTION: "ClusterAction",
                   Op.DESCRIBE_CONFIGS: "DescribeConfigs", Op.ALTER_CONFIGS: "AlterConfigs",
                   Op.IDEMPOTENT_WRITE: "IdempotentWrite", Op.CREATE_TOKENS: "CreateTokens",
                   Op.DESCRIBE_TOKENS: "DescribeTokens"}
PATTERN_NAMES = {LITERAL: "LITERAL", PREFIXED: "PREFIXED"}
PERMISSION_NAMES = {ALLOW: "Allow", DENY: "Deny"}


@dataclass(frozen=True)
class AclBinding:
    resource_type: int
    name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission: int

    def entry_json(self) -> dict:
        """One entry of ``/kafka-acl/<Type>/<name>`` as Kafka writes it."""
        return {"principal": self.principal, "permissionType": PERMISSION_NAMES[self.permission],
                "operation": OPERATION_NAMES[Op(self.operation)], "host": self.host}

    @classmethod
    def from_entry(cls, resource_type: str, pattern_type: str, name: str, e: dict) -> "AclBinding":
        rt = {v: k for k, v in RESOURCE_NAMES.items()}[resource_type]
        op = {v: k for k, v in OPERATION_NAMES.items()}[e["operation"]]
        perm = {v: k for k, v in PERMISSION_NAMES.items()}[e["permissionType"]]
        pt = {v: k for k, v in PATTERN_NAMES.items()}[pattern_type]
        return cls(int(rt), name, pt, e["principal"], e["host"], int(op), perm)

    @property
    def resource_key(self) -> tuple[str, str, str]:
        return RESOURCE_NAMES[RT(self.resource_type)], PATTERN_NAMES[self.pattern_type], self.name

    def describe(self) -> str:
        return (f"(principal={self.principal}, host={self.host}, operation={OPERATION_NAMES[Op(self.operation)].upper()}, "
                f"permissionType={PERMISSION_NAMES[self.permission].upper()})")


@dataclass(frozen=True)
class AclFilter:
    resource_type: int = RT.ANY
    name: str | None = None
    pattern_type: int = ANY_PATTERN
    principal: str | None = None
    host: str | None = None
    operation: int = Op.ANY
    permission: int = ANY_PERMISSION

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type not in (RT.ANY, b.resource_type):
            return False
        if self.pattern_type == MATCH:
            if self.name is not None and not (b.name == WILDCARD and b.pattern_type == LITERAL
                                              or b.pattern_type == LITERAL and b.name == self.name
                                              or b.pattern_type == PREFIXED and self.name.startswith(b.name)):
                return False
        else:
            if self.pattern_type not in (ANY_PATTERN, b.pattern_type):
                return False
            if self.name is not None and self.name != b.name:
                return False
        return ((self.principal is None or self.principal == b.principal)
                and (self.host is None or self.host == b.host)
                and self.operation in (Op.ANY, b.operation)
                and self.permission in (ANY_PERMISSION, b.permission))


class Authorizer:
    """The ACLs of a cluster, indexed by resource type, and Kafka's decision for a request."""

    def __init__(self, super_users: str = "", allow_if_no_acl: bool = False):
        self.super_users = {s.strip() for s in super_users.split(";") if s.strip()}
        self.allow_if_no_acl = allow_if_no_acl
        self.bindings: set[AclBinding] = set()
        self._by_type: dict[int, list[AclBinding]] = defaultdict(list)

    def load(self, bindings: list[AclBinding]) -> None:
        self.bindings = set(bindings)
        by_type: dict[int, list[AclBinding]] = defaultdict(list)
        for b in self.bindings:
            by_type[b.resource_type].append(b)
        self._by_type = by_type

    def _matching(self, resource_type: int, name: str) -> list[AclBinding]:
        return [b for b in self._by_type.get(resource_type, ())
                if (b.pattern_type == LITERAL and (b.name == name or b.name == WILDCARD))
                or (b.pattern_type == PREFIXED and name.startswith(b.name))]

    def authorize(self, principal: KafkaPrincipal, host: str, operation: int, resource_type: int, name: str,
                  log_denial: bool = True) -> bool:
        p = str(principal)
        if p in self.super_users:
            return True
        acls = self._matching(resource_type, name)
        principals = (p, "User:*")
        hosts = (host, WILDCARD)

        def found(permission: int, ops: tuple) -> bool:
            return any(b.permission == permission and b.principal in principals and b.host in hosts
                       and (b.operation == Op.ALL or b.operation in ops) for b in acls)

        if found(DENY, (operation,)):
            allowed = False
        elif not acls:
            allowed = self.allow_if_no_acl
        else:
            allowed = found(ALLOW, _IMPLIED.get(Op(operation), (operation,)))
        if not allowed and log_denial:
            log.info("Principal = %s is Denied operation = %s from host = %s on resource = %s:LITERAL:%s for request",
                     p, Op(operation).name, host,
                     RESOURCE_NAMES.get(RT(resource_type), resource_type), name)
        return allowed

    def authorize_by_type(self, principal: KafkaPrincipal, host: str, operation: int, resource_type: int) -> bool:
        """Some resource of the type allows the operation (a DENY on the ``*`` literal forbids all)."""
        p = str(principal)
        if p in self.super_users:
            return True
        principals, hosts = (p, "User:*"), (host, WILDCARD)
        acls = [b for b in self._by_type.get(resource_type, ())
                if b.principal in principals and b.host in hosts and b.operation in (Op.ALL, operation)]
        if any(b.permission == DENY and b.pattern_type == LITERAL and b.name == WILDCARD for b in acls):
            return False
        return any(b.permission == ALLOW for b in acls) or (self.allow_if_no_acl and not self._by_type.get(resource_type))

    def authorized_operations(self, principal: KafkaPrincipal, host: str, resource_type: int, name: str,
                              supported) -> int:
        return sum(1 << op for op in supported
                   if self.authorize(principal, host, op, resource_type, name, log_denial=False))
