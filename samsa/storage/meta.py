"""``meta.properties``: which broker and cluster a log directory belongs to."""

from __future__ import annotations

import time
from pathlib import Path

from samsa.storage.files import META_PROPERTIES, write_atomically


class InconsistentBrokerMetadataError(RuntimeError):
    """A log directory belongs to another broker or cluster: refusing to use it."""


def read_meta(dir: Path) -> dict[str, str] | None:
    """The properties of ``dir``'s meta.properties (Java properties, ``key=value``)."""
    try:
        text = (dir / META_PROPERTIES).read_text()
    except FileNotFoundError:
        return None
    props = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        key, sep, value = line.partition("=")
        if sep:
            props[key.strip()] = value.strip()
    return props


def write_meta(dir: Path, broker_id: int, cluster_id: str | None) -> None:
    lines = ["#", "#" + time.strftime("%a %b %d %H:%M:%S UTC %Y", time.gmtime())]
    if cluster_id:
        lines.append(f"cluster.id={cluster_id}")
    lines += ["version=0", f"broker.id={broker_id}"]
    write_atomically(dir / META_PROPERTIES, ("\n".join(lines) + "\n").encode())


def check_meta(dir: Path, props: dict[str, str], broker_id: int, cluster_id: str | None) -> str | None:
    """Raise if ``props`` names another broker or cluster; return its cluster id."""
    found = props.get("broker.id", props.get("node.id"))
    if found is not None and int(found) != broker_id:
        raise InconsistentBrokerMetadataError(
            f"{dir / META_PROPERTIES} says broker.id={found} but this broker is {broker_id}; "
            "point log.dirs elsewhere or fix broker.id"
        )
    found_cluster = props.get("cluster.id") or None
    if cluster_id and found_cluster and found_cluster != cluster_id:
        raise InconsistentBrokerMetadataError(
            f"{dir / META_PROPERTIES} says cluster.id={found_cluster} but this broker's cluster is {cluster_id}"
        )
    return found_cluster
