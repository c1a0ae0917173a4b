"""A KRaft configuration (``process.roles``) at start: what Samsa serves of it today.

These KRaft nodes start, their directories formatted by ``samsa storage format``:

* ``process.roles=broker,controller`` with itself as the only voter and no bootstrap servers: a
  whole cluster by itself, its metadata in Samsa's own store;
* a voter of a controller quorum with static voters (``controller.quorum.voters`` naming it):
  ``process.roles=controller`` (``samsa.server.controller_node``) or ``broker,controller``
  (combined: a broker beside its controller);
* ``process.roles=broker`` with static voters not naming it: a broker that registers with the
  quorum and follows its metadata log (``samsa.cluster.kraft_cluster``);
* dynamic voters (KIP-853): ``controller.quorum.bootstrap.servers`` without
  ``controller.quorum.voters``, the voter set being the metadata log's (a controller formatted
  ``--standalone``, ``--initial-controllers`` or ``--no-initial-controllers``, the last an observer
  until ``kafka-metadata-quorum add-controller`` adds it; a broker finds the leader through
  those servers).

Anything else is refused with one line, never served alone as an unrelated single broker.
"""

from __future__ import annotations

from pathlib import Path

from samsa.broker_config import BrokerConfig, ConfigError
from samsa.storage.kraft import KRaftStorageError, bootstrap_snapshot, check_formatted, decode_snapshot


def voter_ids(config: BrokerConfig) -> list[int]:
    return [int(v.split("@", 1)[0]) for v in config["controller.quorum.voters"]]


def voters(config: BrokerConfig) -> list[tuple[int, str, int]]:
    """``controller.quorum.voters`` as (node id, host, port)."""
    out = []
    for v in config["controller.quorum.voters"]:
        node, address = v.split("@", 1)
        host, port = address.rsplit(":", 1)
        out.append((int(node), host.strip("[]"), int(port)))
    return out


def bootstrap_servers(config: BrokerConfig) -> list[tuple[str, int]]:
    """``controller.quorum.bootstrap.servers`` as (host, port)."""
    out = []
    for v in config["controller.quorum.bootstrap.servers"]:
        host, port = v.strip().rsplit(":", 1)
        out.append((host.strip("[]"), int(port)))
    return out


def dynamic(config: BrokerConfig) -> bool:
    """Dynamic voters (KIP-853): bootstrap servers, no static voters."""
    return not config["controller.quorum.voters"] and bool(config["controller.quorum.bootstrap.servers"])


def controller_only(config: BrokerConfig) -> bool:
    return list(config["process.roles"]) == ["controller"]


def follows_quorum(config: BrokerConfig) -> bool:
    """A broker of a KRaft cluster: it learns metadata from the quorum's log (``kraft_cluster``).
    A combined node that is its only static voter (or formatted --standalone without bootstrap
    servers) keeps its metadata in Samsa's own store instead; with dynamic voters it may grow."""
    roles = config["process.roles"]
    return "broker" in roles and (dynamic(config) or bool(config["controller.quorum.voters"]) and
                                  voter_ids(config) != [config["node.id"]])


def check_start(config: BrokerConfig) -> str | None:
    """The cluster id of a KRaft node that may start (None: not KRaft); ConfigError otherwise."""
    roles = config["process.roles"]
    if not roles:
        return None
    node_id = config["node.id"]
    dirs = [Path(d) for d in config.log_dirs]
    if config["metadata.log.dir"]:
        dirs = list(dict.fromkeys([*dirs, Path(config["metadata.log.dir"])]))
    try:
        cluster_id = check_formatted(dirs, node_id)
    except KRaftStorageError as e:
        raise ConfigError(str(e)) from None
    voters_ = config["controller.quorum.voters"]
    if "controller" in roles and (voters_ and node_id in voter_ids(config) or dynamic(config)):
        names = config["controller.listener.names"]
        listeners = {ln.split("://", 1)[0] for ln in config.listeners}
        if not names or names[0] not in listeners:
            raise ConfigError(f"controller.listener.names ({','.join(names) or '(none)'}) must name a listener in "
                              f"listeners ({','.join(config.listeners)})")
        return cluster_id
    if roles == ["broker"] and (voters_ and node_id not in voter_ids(config) or dynamic(config)):
        if not config["controller.listener.names"]:
            raise ConfigError("controller.listener.names must be set on a KRaft broker: it names the listener "
                              "of the controllers it registers with")
        return cluster_id
    alone = (sorted(roles) == ["broker", "controller"] and not voters_ and _snapshot_voters(config) == [node_id])
    if not alone:
        raise ConfigError(
            "KRaft: Samsa cannot serve this node: it serves controllers and brokers with static voters "
            "(controller.quorum.voters, naming this node when process.roles has controller, not naming it when "
            "process.roles=broker), dynamic voters (controller.quorum.bootstrap.servers without "
            "controller.quorum.voters), and process.roles=broker,controller formatted --standalone "
            f"(process.roles={','.join(roles)}, node.id={node_id}, controller.quorum.voters={','.join(voters_) or '(none)'}, "
            f"controller.quorum.bootstrap.servers={','.join(config['controller.quorum.bootstrap.servers']) or '(none)'})")
    return cluster_id


def _snapshot_voters(config: BrokerConfig) -> list[int] | None:
    """The initial voters written by ``samsa storage format --standalone/--initial-controllers``."""
    meta = Path(config["metadata.log.dir"] or config.log_dirs[0])
    path = bootstrap_snapshot(meta)
    if path is None:
        return None
    voters = decode_snapshot(path.read_bytes()).voters
    return None if voters is None else [v["voter_id"] for v in voters]


def formatted_features(config: BrokerConfig) -> dict[str, int] | None:
    """The feature levels ``storage format`` finalized (``metadata.version`` among them), from the
    bootstrap snapshot; None if there is none."""
    path = bootstrap_snapshot(Path(config["metadata.log.dir"] or config.log_dirs[0]))
    if path is None:
        return None
    return {d["name"]: d["feature_level"] for name, _, d in decode_snapshot(path.read_bytes()).records
            if name == "FeatureLevelRecord"}


def supported_features() -> dict[str, tuple[int, int]]:
    """What a Samsa broker declares when it registers with a KRaft controller: the features it
    supports (``cluster.features.SUPPORTED``: every metadata.version of Kafka 4.4 from 3.3-IV3, and
    those ApiVersions advertises) and kraft.version 0-1."""
    from samsa.cluster.features import SUPPORTED
    return {**SUPPORTED, "kraft.version": (0, 1)}


def log_dir_ids(config: BrokerConfig) -> list[bytes]:
    """The directory ids ``format`` wrote in each log dir's meta.properties (sent at registration)."""
    from samsa.storage.kraft import parse_uuid, read_meta_props
    out = []
    for d in config.log_dirs:
        props = read_meta_props(Path(d)) or {}
        if props.get("directory.id"):
            out.append(parse_uuid(props["directory.id"]))
    return out
