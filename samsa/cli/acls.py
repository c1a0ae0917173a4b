"""``samsa acls``: kafka-acls.sh with its flags and output.

    samsa acls --bootstrap-server localhost:9092 --command-config admin.properties \\
        --add --allow-principal User:alice --operation Write --topic payments
    samsa acls --bootstrap-server localhost:9092 --add --producer --allow-principal User:alice --topic payments
    samsa acls --bootstrap-server localhost:9092 --list --topic payments
    samsa acls --bootstrap-server localhost:9092 --remove --force --topic payments
"""

from __future__ import annotations

import argparse
import sys

from samsa.cli.common import Parser, UsageError, admin_config, run_tool
from samsa.client.admin import Admin
from samsa.protocol import errors
from samsa.protocol.acl import AclOperation as Op
from samsa.protocol.acl import ResourceType as RT
from samsa.security.acl import (ALLOW, ANY_PATTERN, ANY_PERMISSION, DENY, LITERAL, MATCH, PREFIXED, AclBinding,
                                AclFilter)

DESCRIPTION = "This tool helps to manage acls on kafka."
PATTERNS = {"LITERAL": LITERAL, "PREFIXED": PREFIXED, "ANY": ANY_PATTERN, "MATCH": MATCH}
CLUSTER = "kafka-cluster"


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="samsa acls", description=DESCRIPTION)
    a = p.add_argument
    a("--bootstrap-server", metavar="<String: server to connect to>", help="A list of host/port pairs to use.")
    a("--bootstrap-controller", help=argparse.SUPPRESS)
    a("--command-config", metavar="<String: command-config>", help="A property file containing configs to be "
      "passed to Admin Client.")
    a("--add", action="store_true", help="Indicates you are trying to add ACLs.")
    a("--remove", action="store_true", help="Indicates you are trying to remove ACLs.")
    a("--list", action="store_true", help="List ACLs for the specified resource, use --topic <topic> or --group "
      "<group> or --cluster to specify a resource.")
    a("--topic", action="append", default=[], metavar="<String: topic>", help="topic to which ACLs should be added "
      "or removed. A value of '*' indicates ACL should apply to all topics.")
    a("--group", action="append", default=[], metavar="<String: group>", help="Consumer Group to which the ACLs "
      "should be added or removed. A value of '*' indicates the ACLs should apply to all groups.")
    a("--cluster", action="store_true", help="Add/Remove cluster ACLs.")
    a("--transactional-id", action="append", default=[], metavar="<String: transactional-id>",
      help="The transactionalId to which ACLs should be added or removed.")
    a("--delegation-token", action="append", default=[], metavar="<String: delegation-token>",
      help="Delegation token to which ACLs should be added or removed.")
    a("--resource-pattern-type", default=None, metavar="<ANY|MATCH|LITERAL|PREFIXED>",
      help="The type of the resource pattern or pattern filter (default: LITERAL).")
    a("--allow-principal", action="append", default=[], metavar="<String: allow-principal>",
      help="principal is in principalType:name format.")
    a("--deny-principal", action="append", default=[], metavar="<String: deny-principal>",
      help="principal is in principalType:name format.")
    a("--principal", action="append", default=[], metavar="<String: principal>",
      help="List ACLs for the specified principal.")
    a("--allow-host", action="append", default=[], metavar="<String: allow-host>",
      help="Host from which principals listed in --allow-principal will have access (default: *).")
    a("--deny-host", action="append", default=[], metavar="<String: deny-host>",
      help="Host from which principals listed in --deny-principal will be denied access (default: *).")
    a("--operation", action="append", default=[], metavar="<String>",
      help="Operation that is being allowed or denied: All, Alter, AlterConfigs, ClusterAction, Create, Delete, "
           "Describe, DescribeConfigs, IdempotentWrite, Read, Write (default: All).")
    a("--producer", action="store_true", help="Convenience option to add/remove ACLs for producer role.")
    a("--consumer", action="store_true", help="Convenience option to add/remove ACLs for consumer role.")
    a("--idempotent", action="store_true", help="Enable idempotence for the producer (with --producer).")
    a("--force", action="store_true", help="Assume Yes to all queries and do not prompt.")
    return p


def operation(text: str) -> int:
    """``IdempotentWrite``, ``idempotent_write`` and ``IDEMPOTENT-WRITE`` alike."""
    wanted = text.replace("_", "").replace("-", "").upper()
    for op in Op:
        if op.name.replace("_", "") == wanted and op not in (Op.ANY, Op.UNKNOWN):
            return int(op)
    raise UsageError(f"Invalid operation {text}")


def resources(opts: argparse.Namespace) -> list[tuple[int, str]]:
    out = [(int(RT.TOPIC), t) for t in opts.topic] + [(int(RT.GROUP), g) for g in opts.group]
    out += [(int(RT.TRANSACTIONAL_ID), t) for t in opts.transactional_id]
    out += [(int(RT.DELEGATION_TOKEN), t) for t in opts.delegation_token]
    if opts.cluster or (opts.producer and opts.idempotent):
        out.append((int(RT.CLUSTER), CLUSTER))
    return out


def _role_operations(opts: argparse.Namespace, rtype: int) -> list[int]:
    """The --producer / --consumer shortcuts, as kafka-acls.sh expands them."""
    ops: list[int] = []
    if opts.producer:
        ops += {RT.TOPIC: [Op.WRITE, Op.DESCRIBE, Op.CREATE], RT.TRANSACTIONAL_ID: [Op.WRITE, Op.DESCRIBE],
                RT.CLUSTER: [Op.IDEMPOTENT_WRITE]}.get(RT(rtype), [])
    if opts.consumer:
        ops += {RT.TOPIC: [Op.READ, Op.DESCRIBE], RT.GROUP: [Op.READ]}.get(RT(rtype), [])
    return [int(o) for o in dict.fromkeys(ops)]


def bindings(opts: argparse.Namespace, pattern: int) -> list[AclBinding]:
    out = []
    for rtype, name in resources(opts):
        ops = _role_operations(opts, rtype) if (opts.producer or opts.consumer) else \
            [operation(o) for o in opts.operation] or [int(Op.ALL)]
        for permission, principals, hosts in ((ALLOW, opts.allow_principal, opts.allow_host),
                                              (DENY, opts.deny_principal, opts.deny_host)):
            for principal in principals:
                for host in hosts or ["*"]:
                    for op in ops:
                        out.append(AclBinding(rtype, name, pattern, principal, host, op, permission))
    return out


def pattern_str(rtype: int, name: str, pattern: int) -> str:
    kind = "TOPIC" if rtype == RT.TOPIC else RT(rtype).name
    return f"ResourcePattern(resourceType={kind}, name={name}, patternType={_pattern_name(pattern)})"


def _pattern_name(pattern: int) -> str:
    return {v: k for k, v in PATTERNS.items()}.get(pattern, str(pattern))


def _entry(b: AclBinding) -> str:
    return (f"(principal={b.principal}, host={b.host}, operation={Op(b.operation).name}, "
            f"permissionType={'ALLOW' if b.permission == ALLOW else 'DENY'})")


def print_acls(found: list[AclBinding], header: str = "Current ACLs for resource") -> None:
    by_resource: dict[tuple[int, str, int], list[AclBinding]] = {}
    for b in sorted(found, key=lambda b: (b.resource_type, b.name, b.pattern_type, b.principal, b.operation)):
        by_resource.setdefault((b.resource_type, b.name, b.pattern_type), []).append(b)
    for (rtype, name, pattern), acls in by_resource.items():
        print(f"{header} `{pattern_str(rtype, name, pattern)}`: ")
        print("".join(f" \t{_entry(b)} \n" for b in acls))


def _check(opts: argparse.Namespace) -> None:
    actions = [x for x in ("add", "remove", "list") if getattr(opts, x)]
    if len(actions) != 1:
        raise UsageError("Command must include exactly one action: --list, --add, --remove. ")
    if not opts.bootstrap_server:
        raise UsageError("Missing required argument \"[bootstrap-server]\"")
    if opts.producer and opts.consumer and not opts.add and not opts.remove:
        raise UsageError("With --producer or --consumer you must specify one of --add or --remove")
    if (opts.producer or opts.consumer) and opts.operation:
        raise UsageError("Option \"[producer]\" / \"[consumer]\" can't be used with option \"[operation]\"")
    if opts.consumer and not opts.group and (opts.add or opts.remove):
        raise UsageError("With --consumer you must specify a --group")
    if opts.producer and not opts.topic and not opts.transactional_id and (opts.add or opts.remove):
        raise UsageError("With --producer you must specify a --topic")
    if opts.add and not resources(opts):
        raise UsageError("You must provide at least one resource: --topic <topic> or --cluster or --group <group> "
                         "or --transactional-id <id>")
    if opts.add and not (opts.allow_principal or opts.deny_principal):
        raise UsageError("You must specify one of: --allow-principal, --deny-principal when trying to add ACLs.")
    pattern = (opts.resource_pattern_type or "LITERAL").upper()
    if pattern not in PATTERNS:
        raise UsageError(f"Invalid resource pattern type {opts.resource_pattern_type}")
    if opts.add and pattern in ("ANY", "MATCH"):
        raise UsageError(f"A '--resource-pattern-type' value of '{pattern}' is not valid when adding acls.")


def run(admin: Admin, opts: argparse.Namespace) -> None:
    pattern_name = (opts.resource_pattern_type or "LITERAL").upper()
    pattern = PATTERNS[pattern_name]
    if opts.add:
        new = bindings(opts, pattern)
        for rtype, name in dict.fromkeys((b.resource_type, b.name) for b in new):
            print_acls([b for b in new if (b.resource_type, b.name) == (rtype, name)], "Adding ACLs for resource")
        admin.create_acls(new)
        for rtype, name in dict.fromkeys((b.resource_type, b.name) for b in new):
            print_acls(admin.describe_acls(AclFilter(rtype, name, pattern)))
        return
    if opts.remove:
        specific = bindings(opts, pattern)
        filters = [AclFilter(b.resource_type, b.name, pattern, b.principal, b.host, b.operation, b.permission)
                   for b in specific] or [AclFilter(rtype, name, pattern) for rtype, name in resources(opts)]
        if not filters:
            raise UsageError("You must provide at least one resource to remove ACLs from")
        if not opts.force:
            what = ", ".join(pattern_str(f.resource_type, f.name or "", pattern) for f in filters)
            answer = input(f"Are you sure you want to remove ACLs: {what} ? (y/n)")
            if not answer.strip().lower().startswith("y"):
                return
        admin.delete_acls(filters)
        for rtype, name in dict.fromkeys((f.resource_type, f.name) for f in filters):
            print_acls(admin.describe_acls(AclFilter(rtype, name, pattern)))
        return
    list_pattern = pattern if opts.resource_pattern_type else ANY_PATTERN
    filters = [AclFilter(rtype, name, list_pattern) for rtype, name in resources(opts)] or [AclFilter()]
    found: list[AclBinding] = []
    for f in filters:
        found += admin.describe_acls(f)
    if opts.principal:
        for principal in opts.principal:
            mine = [b for b in found if b.principal == principal]
            print(f"ACLs for principal `{principal}`")
            print_acls(mine)
        return
    print_acls(found)


def main(argv: list[str] | None = None) -> int:
    def go(opts: argparse.Namespace) -> None:
        _check(opts)
        with Admin(admin_config(opts, "samsa-acls")) as admin:
            run(admin, opts)
    return run_tool(argv, build_parser(), go, description=DESCRIPTION,
                    failures=[((errors.KafkaError, ValueError), "Error while executing ACL command: {}")])


__all__ = ["ANY_PERMISSION", "main"]

if __name__ == "__main__":
    sys.exit(main())
