"""``samsa configs``: kafka-configs.sh for topics, brokers and groups, with Kafka's flags and output.

    samsa configs --bootstrap-server localhost:9092 --entity-type topics --entity-name test \\
        --alter --add-config retention.ms=1000,cleanup.policy=[compact,delete]
    samsa configs --bootstrap-server localhost:9092 --topic test --describe

Altering uses IncrementalAlterConfigs (deletes first, then sets), as Kafka's tool does.
"""

from __future__ import annotations

import argparse
import re
import sys

from samsa.cli import configs_entities
from samsa.cli.common import Parser, UsageError, admin_config, read_properties, run_tool
from samsa.client.admin import Admin
from samsa.client.types import AlterConfigOp, ConfigEntry, ConfigResource
from samsa.protocol import errors
from samsa.protocol.names import validate_topic_name

DESCRIPTION = "This tool helps to manipulate and describe entity config for a topic, a broker or a group"
SUPPORTED = {"topics": "topic", "brokers": "broker", "groups": "group"}
KAFKA_ONLY = ("broker-loggers", "ips", "client-metrics")
# Which source makes an entry "dynamic" for each kind of entity (what --describe shows).
DYNAMIC_SOURCE = {"topics": "DYNAMIC_TOPIC_CONFIG", "brokers": "DYNAMIC_BROKER_CONFIG",
                  "brokers-default": "DYNAMIC_DEFAULT_BROKER_CONFIG", "groups": "DYNAMIC_GROUP_CONFIG"}
_OUTSIDE_BRACKETS = r"(?=[^\]]*(?:\[|$))"
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")


def error(self, message: str):
        raise UsageError(message)


class _EntityName(argparse.Action):
    """--entity-name / --entity-default in command-line order ("" = the default entity)."""

    def __call__(self, parser, namespace, values, option_string=None):
        names = list(getattr(namespace, "entity_names", None) or [])
        names.append("" if option_string == "--entity-default" else values)
        namespace.entity_names = names


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="samsa configs", description=DESCRIPTION)
    a = p.add_argument
    a("--bootstrap-server", metavar="<String: server to connect to>", help="The Kafka servers to connect to.")
    a("--bootstrap-controller", metavar="<String: controller to connect to>", help=argparse.SUPPRESS)
    a("--zookeeper", help=argparse.SUPPRESS)
    a("--command-config", metavar="<String: command config property file>",
      help="Property file containing configs to be passed to Admin Client.")
    a("--alter", action="store_true", help="Alter the configuration for the entity.")
    a("--describe", action="store_true", help="List configs for the given entity.")
    a("--all", action="store_true", help="List all configs for the given entity, including static configs if available.")
    a("--entity-type", action="append", default=[], metavar="<String>", help="Type of entity (topics/brokers/users/clients)")
    a("--entity-name", action=_EntityName, dest="entity_names", metavar="<String>",
      help="Name of entity (topic name/broker id/user principal name/client id)")
    a("--entity-default", action=_EntityName, dest="entity_names", nargs=0,
      help="Default entity name for brokers (applies to corresponding entity type)")
    a("--add-config", metavar="<String>", help="Key Value pairs of configs to add. Square brackets can be used to "
      "group values which contain commas: 'k1=v1,k2=[v1,v2,v2],k3=v3'.")
    a("--add-config-file", metavar="<String>", help="Path to a properties file with configs to add.")
    a("--delete-config", action="append", metavar="<String>", help="config keys to remove 'k1,k2'")
    a("--topic", metavar="<String>", help="The topic's name.")
    a("--broker", metavar="<String>", help="The broker's ID.")
    a("--broker-defaults", action="store_true", help="The config defaults for all brokers.")
    a("--user", metavar="<String>", help="The user's principal name.")
    a("--client", metavar="<String>", help="The client's ID.")
    a("--user-defaults", action="store_true", help="The config defaults for all users.")
    a("--client-defaults", action="store_true", help="The config defaults for all clients.")
    a("--group", metavar="<String>", help="The group's ID.")
    for flag in ("--ip", "--client-metrics", "--broker-logger"):
        a(flag, help=argparse.SUPPRESS)
    a("--ip-defaults", action="store_true", help=argparse.SUPPRESS)
    return p


# ---------------------------------------------------------------------------- arguments

def entity(opts: argparse.Namespace) -> tuple[str, str | None]:
    """(entity type, entity name or "" for the default or None for all) after Kafka's checks."""
    flags = [("topics", opts.topic), ("brokers", opts.broker), ("brokers", "" if opts.broker_defaults else None),
             ("groups", opts.group)]
    for flag, kind in (("client", "clients"), ("user", "users"), ("ip", "ips"),
                       ("client_metrics", "client-metrics"), ("broker_logger", "broker-loggers"),
                       ("client_defaults", "clients"), ("user_defaults", "users"), ("ip_defaults", "ips")):
        if getattr(opts, flag):
            flags.append((kind, "x"))
    from_flags = [(kind, name) for kind, name in flags if name is not None]
    types = list(opts.entity_type) + [kind for kind, _ in from_flags]
    names = list(opts.entity_names or []) + [name for _, name in from_flags]
    dupes = sorted({t for t in types if types.count(t) > 1})
    if dupes:
        raise UsageError(f"Duplicate entity type(s) specified: {','.join(dupes)}")
    for t in types:
        if t in KAFKA_ONLY:
            raise UsageError(f"Entity type {t} is not supported by Samsa; the entity type must be one of topics, brokers, groups")
        if t not in SUPPORTED:
            raise UsageError(f"Invalid entity type {t}, the entity type must be one of topics, brokers, groups "
                             "with a --bootstrap-server argument")
    if not types:
        raise UsageError("At least one entity type must be specified")
    if len(types) > 1:
        raise UsageError("Only one entity type may be specified")
    if (opts.entity_type or opts.entity_names) and from_flags:
        raise UsageError("--entity-{type,name,default} should not be used in conjunction with specific entity flags")
    if len(names) > 1:
        raise UsageError("An entity name must be specified for every entity type")
    kind = types[0]
    name = names[0] if names else None
    if kind == "brokers" and name:
        try:
            int(name)
        except ValueError:
            raise UsageError(f"The entity name for brokers must be a valid integer broker id, but it is: {name}") from None
    if opts.describe and kind in ("topics", "groups") and name == "":
        raise UsageError(f"--entity-default must not be specified with --describe of {kind}")
    if opts.alter:
        if name is None:
            raise UsageError("An entity-name or default entity must be specified with --alter of users, clients, brokers or ips"
                             if kind == "brokers" else f"An entity name must be specified with --alter of {kind}")
        if kind in ("topics", "groups") and name == "":
            raise UsageError(f"An entity name must be specified with --alter of {kind}")
    return kind, name


def check_args(opts: argparse.Namespace) -> tuple[str, str | None]:
    _check_action(opts)
    kind, name = entity(opts)
    if opts.alter:
        if opts.add_config and opts.add_config_file:
            raise UsageError("Only one of --add-config or --add-config-file must be specified")
        if not (opts.add_config or opts.add_config_file or opts.delete_config):
            raise UsageError("At least one of --add-config, --add-config-file, or --delete-config must be specified with --alter")
    return kind, name


def _check_action(opts: argparse.Namespace) -> None:
    if opts.zookeeper is not None:
        raise UsageError("--zookeeper is not supported: Samsa's tools talk to the brokers, "
                         "use --bootstrap-server HOST:PORT instead")
    if int(opts.alter) + int(opts.describe) != 1:
        raise UsageError("Command must include exactly one action: --describe, --alter")
    if opts.describe:
        for flag in ("add_config", "add_config_file", "delete_config"):
            if getattr(opts, flag):
                raise UsageError(f'Option "[describe]" can\'t be used with option "[{flag.replace("_", "-")}]"')
    if opts.bootstrap_controller and not opts.bootstrap_server:
        raise UsageError("--bootstrap-controller is not supported: Samsa has no separate controllers, "
                         "use --bootstrap-server")
    if not opts.bootstrap_server:
        raise UsageError("Either --bootstrap-server or --bootstrap-controller must be specified.")


def parse_add_config(text: str) -> dict[str, str]:
    """``k1=v1,k2=[a,b]`` -> ``{"k1": "v1", "k2": "a,b"}`` (commas inside brackets kept)."""
    out: dict[str, str] = {}
    for item in re.split("," + _OUTSIDE_BRACKETS, text):
        parts = re.split(r"\s*=\s*" + _OUTSIDE_BRACKETS, item)
        if len(parts) != 2:
            raise UsageError('Invalid entity config: all configs to be added must be in the format "key=val" '
                             'or  "key=[val1,val2]" to group values which contain commas.')
        out[parts[0].strip()] = re.sub(r"[\[\]]", "", parts[1]).strip()
    return out


def configs_to_add(opts: argparse.Namespace) -> dict[str, str]:
    props: dict[str, str] = {}
    if opts.add_config_file:
        props.update(read_properties(opts.add_config_file, ""))
    if opts.add_config:
        props.update(parse_add_config(opts.add_config))
    for key in props:
        if not re.fullmatch(r"[$a-zA-Z0-9._-]*", key):
            raise UsageError(f"Invalid character found for config key: {key}")
    return props


def configs_to_delete(opts: argparse.Namespace) -> list[str]:
    return [k.strip() for item in opts.delete_config or [] for k in item.split(",") if k.strip()]


# ---------------------------------------------------------------------------- actions

def _dynamic_source(kind: str, name: str) -> str:
    return DYNAMIC_SOURCE["brokers-default" if kind == "brokers" and name == "" else kind]


def resource_config(admin: Admin, kind: str, name: str, synonyms: bool, describe_all: bool) -> list[ConfigEntry]:
    """The entity's config entries sorted by name: all of them, or only its dynamic ones."""
    if kind == "topics" and name:
        validate_topic_name(name)
    resource = ConfigResource(SUPPORTED[kind], name)
    entries = admin.describe_configs([resource], include_synonyms=synonyms)[resource].values()
    source = None if describe_all else _dynamic_source(kind, name)
    return sorted((e for e in entries if source is None or e.source == source), key=lambda e: e.name)


def _value(v: str | None) -> str:
    return "null" if v is None else v


def _share_group_ids(admin: Admin) -> set[str]:
    try:
        return {g.group_id for g in admin.list_share_groups()}
    except errors.UnsupportedVersionError:  # a broker without ListGroups v5: no share groups
        return set()


def describe(admin: Admin, kind: str, name: str | None, describe_all: bool) -> None:
    singular = kind[:-1]
    if name is not None and not describe_all:
        if kind == "topics":
            validate_topic_name(name)
            if name not in admin.list_topics(include_internal=True):
                print(f"The {singular} '{name}' doesn't exist and doesn't have dynamic config.")
                return
        elif kind == "brokers" and name != "" and name not in {str(b.id) for b in admin.describe_cluster().brokers}:
            print(f"The {singular} '{name}' doesn't exist and doesn't have dynamic config.")
            return
    if name is not None:
        entities = [name]
    elif kind == "topics":
        entities = list(admin.list_topics(include_internal=True))
    elif kind == "groups":
        # every group with dynamic configs may be of either kind: consumer and share groups (KIP-932)
        entities = sorted({g.group_id for g in admin.list_consumer_groups()} | _share_group_ids(admin))
    else:
        entities = [str(b.id) for b in admin.describe_cluster().brokers] + [""]
    for entity_name in entities:
        if entity_name == "":
            print(f"Default configs for {kind} in the cluster are:")
        else:
            print(f"{'All' if describe_all else 'Dynamic'} configs for {singular} {entity_name} are:")
        for e in resource_config(admin, kind, entity_name, True, describe_all):
            synonyms = ", ".join(f"{s.source}:{s.name}={_value(s.value)}" for s in e.synonyms)
            print(f"  {e.name}={_value(e.value)} sensitive={'true' if e.is_sensitive else 'false'} synonyms={{{synonyms}}}")


def alter(admin: Admin, kind: str, name: str, opts: argparse.Namespace) -> None:
    to_add = configs_to_add(opts)
    to_delete = configs_to_delete(opts)
    current = {e.name for e in resource_config(admin, kind, name, False, False)}
    invalid = [k for k in to_delete if k not in current]
    if invalid:
        raise UsageError(f"Invalid config(s): {','.join(invalid)}")
    ops = [AlterConfigOp(k, "", "delete") for k in to_delete] + [AlterConfigOp(k, v, "set") for k, v in to_add.items()]
    admin.incremental_alter_configs({ConfigResource(SUPPORTED[kind], name): ops})
    if name:
        print(f"Completed updating config for {kind[:-1]} {name}.")
    else:
        print(f"Completed updating default config for {kind} in the cluster.")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv

    def go(opts: argparse.Namespace) -> None:
        if configs_entities.wanted(opts):
            _check_action(opts)
            with Admin(admin_config(opts, "samsa-configs")) as admin:
                configs_entities.run(admin, opts, configs_to_add(opts) if opts.alter else {}, configs_to_delete(opts))
            return
        kind, name = check_args(opts)
        with Admin(admin_config(opts, "samsa-configs")) as admin:
            if opts.alter:
                assert name is not None
                alter(admin, kind, name, opts)
            else:
                describe(admin, kind, name, opts.all)
    args = " ".join(argv).replace("{", "{{").replace("}", "}}")
    return run_tool(argv, build_parser(), go, description=DESCRIPTION, failures=[
        (errors.InvalidTopicError, "{}"),
        ((errors.KafkaError, ValueError), f"Error while executing config command with args '{args}': {{}}")])


if __name__ == "__main__":
    sys.exit(main())
