"""A KRaft configuration (``process.roles``) at start: what Samsa serves of it today.

Two kinds of KRaft node start, their directories formatted by ``samsa storage format``:

* ``process.roles=broker,controller`` with itself as the only voter: a whole cluster by itself;
* ``process.roles=controller`` with static voters (``controller.quorum.voters``) naming it: one
  voter of a controller quorum (``samsa.server.controller_node``), which elects a leader and
  replicates the metadata log with the other voters.

Anything else needs brokers that follow the metadata log (not yet) or dynamic voters, and is
refused with one line, never served alone as an unrelated single broker.
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


def controller_only(config: BrokerConfig) -> bool:
    return list(config["process.roles"]) == ["controller"]


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
    if roles == ["controller"] and config["controller.quorum.voters"] and node_id in voter_ids(config):
        names = config["controller.listener.names"]
        listeners = {ln.split("://", 1)[0] for ln in config.listeners}
        if not names or names[0] not in listeners:
            raise ConfigError(f"controller.listener.names ({','.join(names) or '(none)'}) must name a listener in "
                              f"listeners ({','.join(config.listeners)})")
        return cluster_id
    alone = (sorted(roles) == ["broker", "controller"]
             and (voter_ids(config) == [node_id] if config["controller.quorum.voters"]
                  else _snapshot_voters(config) == [node_id]))
    if not alone:
        raise ConfigError(
            "KRaft: Samsa cannot serve this node yet: it serves process.roles=broker,controller with itself as the "
            "only voter, and process.roles=controller voters named in controller.quorum.voters (a controller quorum; "
            f"brokers that follow it and dynamic voters are not supported yet) (process.roles={','.join(roles)}, "
            f"controller.quorum.voters={','.join(config['controller.quorum.voters']) or '(none)'}, "
            f"controller.quorum.bootstrap.servers={','.join(config['controller.quorum.bootstrap.servers']) or '(none)'}); "
            "use zookeeper.connect for a cluster of several brokers")
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
