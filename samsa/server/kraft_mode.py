"""A KRaft configuration (``process.roles``) at start: what Samsa serves of it today.

Until Samsa's controller quorum exists, a KRaft node is served only when it is a whole
cluster by itself: ``process.roles=broker,controller`` with itself as the only voter, its
directories formatted by ``samsa storage format``. Anything that needs other nodes is
refused with one line, never served alone as an unrelated single broker.
"""

from __future__ import annotations

from pathlib import Path

from samsa.broker_config import BrokerConfig, ConfigError
from samsa.storage.kraft import KRaftStorageError, bootstrap_snapshot, check_formatted, decode_snapshot


def voter_ids(config: BrokerConfig) -> list[int]:
    return [int(v.split("@", 1)[0]) for v in config["controller.quorum.voters"]]


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
    alone = (sorted(roles) == ["broker", "controller"]
             and (voter_ids(config) == [node_id] if config["controller.quorum.voters"]
                  else _snapshot_voters(config) == [node_id]))
    if not alone:
        raise ConfigError(
            "KRaft multi-node quorums are not supported yet: Samsa serves process.roles=broker,controller with "
            f"itself as the only voter (process.roles={','.join(roles)}, "
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
