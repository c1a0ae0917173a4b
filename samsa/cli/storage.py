"""``samsa storage``: kafka-storage.sh, formatting and inspecting KRaft directories (no broker).

    samsa storage random-uuid
    samsa storage format -t <cluster id> -c server.properties [--standalone | --initial-controllers ... |
                         --no-initial-controllers] [--add-scram ...] [--release-version 4.4] [--feature f=n]
    samsa storage info -c server.properties

Writes ``meta.properties`` v1 in every log directory and the metadata log directory, and the
bootstrap snapshot ``__cluster_metadata-0/00000000000000000000-0000000000.checkpoint`` as
Kafka 4.4's tool does; prints Kafka's lines.
"""

from __future__ import annotations

import argparse
import base64
import re
import sys
from pathlib import Path

from samsa.broker_config import BrokerConfig, parse_listener
from samsa.cli.common import Parser, UsageError
from samsa.configdef import ConfigError, parse_properties
from samsa.security import scram
from samsa.storage import kraft

DESCRIPTION = "The Kafka storage tool."


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="samsa storage", description=DESCRIPTION)
    sub = p.add_subparsers(dest="command", metavar="{info,format,version-mapping,feature-dependencies,random-uuid}",
                           parser_class=Parser)
    info = sub.add_parser("info", help="Get information about the Kafka log directories on this node.")
    info.add_argument("--config", "-c", required=True, help="The Kafka configuration file to use.")
    f = sub.add_parser("format", help="Format the Kafka log directories on this node.")
    f.add_argument("--config", "-c", required=True, help="The Kafka configuration file to use.")
    f.add_argument("--cluster-id", "-t", required=True, help="The cluster ID to use.")
    f.add_argument("--add-scram", "-S", action="append", default=[],
                   help="A SCRAM_CREDENTIAL to add to the __cluster_metadata log e.g. "
                        "'SCRAM-SHA-256=[name=alice,password=alice-secret]'")
    f.add_argument("--ignore-formatted", "-g", action="store_true",
                   help="When this option is passed, the format command will skip over already formatted "
                        "directories rather than failing.")
    f.add_argument("--release-version", "-r", help="The release version to use for the initial feature settings.")
    f.add_argument("--feature", "-f", action="append", default=[],
                   help="The setting to use for a specific feature, in feature=level format.")
    g = f.add_mutually_exclusive_group()
    g.add_argument("--standalone", "-s", action="store_true",
                   help="Used to initialize a controller as a single-node dynamic quorum.")
    g.add_argument("--no-initial-controllers", "-N", action="store_true",
                   help="Used to initialize a server without a dynamic quorum topology.")
    g.add_argument("--initial-controllers", "-I",
                   help="Used to initialize a server with a specific dynamic quorum topology.")
    vm = sub.add_parser("version-mapping", help="Look up the corresponding features for a given metadata version.")
    vm.add_argument("--release-version", "-r", default=kraft.LATEST_PRODUCTION)
    sub.add_parser("random-uuid", help="Print a random UUID.")
    return p


def _config(path: str) -> BrokerConfig:
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise ConfigError(f"{path}: {e.strerror}") from None
    props = parse_properties(text)
    if "process.roles" not in props:
        raise ConfigError('Missing required configuration "process.roles" which has no default value.')
    return BrokerConfig(props, warn_unknown=False)


def _dirs(config: BrokerConfig) -> tuple[list[Path], Path]:
    logs = [Path(d) for d in config.log_dirs]
    meta = Path(config["metadata.log.dir"]) if config["metadata.log.dir"] else logs[0]
    return logs, meta


_SCRAM = re.compile(r"(SCRAM-SHA-256|SCRAM-SHA-512)=\[(.*)\]")


def _scram(spec: str) -> kraft.ScramSpec:
    """Kafka's --add-scram: ``MECHANISM=[name=...,password=...|salted_password=...,salt=...,iterations=...]``."""
    m = _SCRAM.fullmatch(spec.strip())
    if m is None:
        mech = spec.split("=", 1)[0]
        if "=" in spec and mech not in scram.MECHANISMS:
            raise kraft.FormatError(f"The add-scram mechanism {mech} is not supported.")
        raise kraft.FormatError(f"The add-scram argument {spec} is not of the form "
                                "'SCRAM-SHA-256=[name=alice,password=alice-secret]'")
    mechanism = m.group(1)
    fields = {}
    for part in re.findall(r'(\w+)=("[^"]*"|[^,]*)', m.group(2)):
        fields[part[0]] = part[1].strip('"')
    if "name" not in fields:
        raise kraft.FormatError(f"You must supply 'name' to add-scram")
    iterations = int(fields.get("iterations", scram.MIN_ITERATIONS))
    if not scram.MIN_ITERATIONS <= iterations <= scram.MAX_ITERATIONS:
        raise kraft.FormatError(f"The 'iterations' value must be >= {scram.MIN_ITERATIONS} and "
                                f"<= {scram.MAX_ITERATIONS} for add-scram using {mechanism}")
    digest = scram.MECHANISMS[mechanism]
    salt = base64.b64decode(fields["salt"]) if "salt" in fields else None
    if "password" in fields:
        cred = scram.make_credential(mechanism, fields["password"], iterations, salt)
    elif "saltedpassword" in fields:
        if salt is None:
            raise kraft.FormatError("You must supply 'salt' with 'saltedpassword' to add-scram")
        cred = scram.credential_from_salted(digest, salt, base64.b64decode(fields["saltedpassword"]), iterations)
    else:
        raise kraft.FormatError("You must supply one of 'password' or 'saltedpassword' to add-scram")
    return kraft.ScramSpec(mechanism, fields["name"], cred.salt, cred.stored_key, cred.server_key, iterations)


def _standalone_voter(config: BrokerConfig, directory_id: bytes) -> kraft.Voter:
    names = config["controller.listener.names"]
    for listener in config.listeners:
        name, host, port = parse_listener(listener)
        if name == names[0]:
            return kraft.Voter(config["node.id"], directory_id, [(name, host or "localhost", port)])
    raise kraft.FormatError(f"The controller listener {names[0]} is not in listeners")


def format_(opts: argparse.Namespace) -> int:
    config = _config(opts.config)
    roles = config["process.roles"]
    logs, meta = _dirs(config)
    mv_level = kraft.metadata_version_level(opts.release_version or kraft.LATEST_PRODUCTION)
    overrides = {}
    for item in opts.feature:
        name, sep, level = item.partition("=")
        if not sep or not level.strip().lstrip("-").isdigit():
            raise kraft.FormatError(f"Can't parse feature={item}. The correct format is feature=level")
        if name.strip() == "metadata.version":
            mv_level = int(level)
            continue
        overrides[name.strip()] = int(level)
    levels = kraft.feature_levels(mv_level, overrides)
    static_voters = bool(config["controller.quorum.voters"])
    voters = None
    if "controller" in roles:
        if static_voters and (opts.standalone or opts.initial_controllers):
            raise kraft.FormatError(
                "You cannot specify controller.quorum.voters and format the node with --initial-controllers or "
                "--standalone. If you want to use dynamic quorum, please remove controller.quorum.voters and "
                "specify controller.quorum.bootstrap.servers instead.")
        if not static_voters and not (opts.standalone or opts.initial_controllers or opts.no_initial_controllers):
            raise kraft.FormatError(
                "Because controller.quorum.voters is not set on this controller, you must specify one of the "
                "following: --standalone, --initial-controllers, or --no-initial-controllers.")
        if opts.standalone:
            voters = [_standalone_voter(config, kraft.parse_uuid(kraft.random_uuid()))]
        elif opts.initial_controllers:
            voters = kraft.parse_initial_controllers(opts.initial_controllers)
            name = config["controller.listener.names"][0]
            for v in voters:
                v.endpoints = [(name, h, p) for _, h, p in v.endpoints]
            if not any(v.node_id == config["node.id"] for v in voters):
                raise kraft.FormatError(f"The node id {config['node.id']} is not among the initial controllers "
                                        f"{opts.initial_controllers}")
    elif opts.standalone or opts.initial_controllers:
        raise kraft.FormatError("You can only use --standalone or --initial-controllers on a controller.")
    if voters is not None or opts.no_initial_controllers:
        if "kraft.version" not in overrides:
            levels["kraft.version"] = max(levels["kraft.version"], 1)
        elif levels["kraft.version"] < 1:
            raise kraft.FormatError("Cannot set kraft.version to 0 if KIP-853 configuration is present. "
                                    "Try removing the --feature flag for kraft.version.")
    elif static_voters:
        levels["kraft.version"] = overrides.get("kraft.version", 0)
    records = [("FeatureLevelRecord", 0, {"name": "metadata.version", "feature_level": mv_level})]
    records += [("FeatureLevelRecord", 0, {"name": n, "feature_level": lvl}) for n, lvl in sorted(levels.items())
                if n != "kraft.version" and lvl > 0]
    if opts.add_scram:
        if mv_level < kraft.SCRAM_MIN_LEVEL:
            raise kraft.FormatError(f"SCRAM is only supported in metadata.version 3.5-IV2 or later.")
        for spec in opts.add_scram:
            s = _scram(spec)
            records.append(s.record(scram.MECHANISM_TYPES[s.mechanism]))
    plan = kraft.FormatPlan(opts.cluster_id, config["node.id"], logs, meta, mv_level, records,
                            levels["kraft.version"], voters, opts.ignore_formatted)
    plan.run(sys.stdout)
    return 0


def info(opts: argparse.Namespace) -> int:
    config = _config(opts.config)
    logs, meta = _dirs(config)
    lines, bad = kraft.info_lines(list(dict.fromkeys([*logs, meta])))
    print("\n".join(lines))
    return 1 if bad else 0


def version_mapping(opts: argparse.Namespace) -> int:
    level = kraft.metadata_version_level(opts.release_version)
    print(f"metadata.version={level} ({opts.release_version})")
    levels = kraft.feature_levels(level, {})
    for name in ("kraft.version", "transaction.version", "group.version", "eligible.leader.replicas.version",
                 "share.version", "streams.version"):
        print(f"{name}={levels[name]}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    try:
        opts = parser.parse_args(argv)
        if opts.command is None:
            raise UsageError("too few arguments")
        if opts.command == "random-uuid":
            print(kraft.random_uuid())
            return 0
        run = {"format": format_, "info": info, "version-mapping": version_mapping}[opts.command]
        return run(opts)
    except UsageError as e:
        print(f"samsa storage: {e}", file=sys.stderr)
        return 1
    except (kraft.FormatError, ConfigError) as e:
        print(str(e), file=sys.stderr)
        return 1
