"""KRaft's on-disk state, as Kafka 4.4 lays it out: ``meta.properties`` v1 in every log
directory and the metadata log directory, and KIP-630 snapshot files (``.checkpoint``) of
the metadata partition ``__cluster_metadata-0``.

``samsa storage format`` writes them (:func:`format_dirs`), ``samsa storage info`` reads
them, the broker refuses a KRaft configuration whose directories are not formatted. Kafka
4.4's format writes its bootstrap records (FeatureLevelRecords, SCRAM credentials) as the
first snapshot of the metadata partition, ``00000000000000000000-0000000000.checkpoint``:
a control batch (SnapshotHeader, and with kraft.version 1 KRaftVersion and KRaftVoters), a
batch of the records, a control batch (SnapshotFooter).
"""

from __future__ import annotations

import base64
import os
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from samsa.protocol import metadata_records as mr
from samsa.protocol.records import build_batch, iter_batches  # noqa: F401 (iter_batches: readers of the log)
from samsa.storage.files import META_PROPERTIES, write_atomically

METADATA_PARTITION_DIR = "__cluster_metadata-0"
SNAPSHOT_SUFFIX = ".checkpoint"


# ---------------------------------------------------------------------------- ids

def uuid_string(raw: bytes) -> str:
    """Kafka's Uuid.toString: URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def parse_uuid(text: str) -> bytes:
    """Kafka's Uuid.fromString: 22 characters of URL-safe base64."""
    if len(text) != 22:
        raise ValueError(f"Input string with prefix `{text[:22]}` is too long to be decoded as a base64 UUID")
    try:
        raw = base64.urlsafe_b64decode(text + "==")
    except ValueError:
        raise ValueError(f"Input string `{text}` decoded as {len(text)} bytes, which is not equal to the expected "
                         "16 bytes of a base64-encoded UUID") from None
    if len(raw) != 16:
        raise ValueError(f"Input string `{text}` decoded as {len(raw)} bytes, which is not equal to the expected "
                         "16 bytes of a base64-encoded UUID")
    return raw


def random_uuid() -> str:
    """Kafka's Uuid.randomUuid: never one of the reserved ids (the first 100), never starting with '-'."""
    while True:
        raw = uuid.uuid4().bytes
        s = uuid_string(raw)
        if int.from_bytes(raw[:8], "big") == 0 and int.from_bytes(raw[8:], "big") < 100:
            continue
        if not s.startswith("-"):
            return s


# ---------------------------------------------------------------------------- meta.properties v1

def write_meta_v1(dir: Path, cluster_id: str, node_id: int, directory_id: str) -> None:
    lines = ["#", "#" + time.strftime("%a %b %d %H:%M:%S UTC %Y", time.gmtime()),
             f"node.id={node_id}", f"directory.id={directory_id}", "version=1", f"cluster.id={cluster_id}"]
    write_atomically(dir / META_PROPERTIES, ("\n".join(lines) + "\n").encode())


# ---------------------------------------------------------------------------- snapshots (KIP-630)

def snapshot_name(end_offset: int, epoch: int) -> str:
    return f"{end_offset:020d}-{epoch:010d}{SNAPSHOT_SUFFIX}"


@dataclass
class Voter:
    node_id: int
    directory_id: bytes
    endpoints: list[tuple[str, str, int]]  # (listener name, host, port)

    def record(self) -> dict:
        return {"voter_id": self.node_id, "voter_directory_id": self.directory_id,
                "endpoints": [{"name": n, "host": h, "port": p} for n, h, p in self.endpoints],
                "k_raft_version_feature": {"min_supported_version": 0, "max_supported_version": 1}}


@dataclass
class Snapshot:
    """The records of a snapshot file: ``records`` are (schema name, version, data)."""
    records: list[tuple[str, int, dict]] = field(default_factory=list)
    kraft_version: int = 0
    voters: list[dict] | None = None
    last_contained_log_timestamp: int = 0


def encode_snapshot(snap: Snapshot, epoch: int = 0, now_ms: int | None = None) -> bytes:
    now = int(time.time() * 1000) if now_ms is None else now_ms
    control = [mr.encode_control(mr.SNAPSHOT_HEADER, {"last_contained_log_timestamp": snap.last_contained_log_timestamp})]
    if snap.kraft_version > 0:
        control.append(mr.encode_control(mr.KRAFT_VERSION, {"k_raft_version": snap.kraft_version}))
    if snap.kraft_version > 0 and snap.voters is not None:  # --no-initial-controllers: no voter set
        control.append(mr.encode_control(mr.KRAFT_VOTERS, {"voters": snap.voters}))
    out = bytearray(build_batch([(k, v, now) for k, v in control], base_offset=0, is_control=True,
                                partition_leader_epoch=epoch))
    offset = len(control)
    if snap.records:
        out += build_batch([(None, mr.encode(n, v, d), now) for n, v, d in snap.records], base_offset=offset,
                           partition_leader_epoch=epoch)
        offset += len(snap.records)
    out += build_batch([(*mr.encode_control(mr.SNAPSHOT_FOOTER, {}), now)], base_offset=offset, is_control=True,
                       partition_leader_epoch=epoch)
    return bytes(out)


def decode_snapshot(buf: bytes) -> Snapshot:
    snap = Snapshot()
    for header, records in iter_batches(buf):
        for r in records:
            if header.is_control:
                kind, data = mr.decode_control(r.key, r.value)
                if kind == mr.SNAPSHOT_HEADER:
                    snap.last_contained_log_timestamp = data["last_contained_log_timestamp"]
                elif kind == mr.KRAFT_VERSION:
                    snap.kraft_version = data["k_raft_version"]
                elif kind == mr.KRAFT_VOTERS:
                    snap.voters = data["voters"]
            else:
                snap.records.append(mr.decode(r.value))
    return snap


def write_snapshot(partition_dir: Path, snap: Snapshot, end_offset: int = 0, epoch: int = 0) -> Path:
    partition_dir.mkdir(parents=True, exist_ok=True)
    path = partition_dir / snapshot_name(end_offset, epoch)
    write_atomically(path, encode_snapshot(snap, epoch))
    os.chmod(path, 0o400)  # a snapshot is immutable, as Kafka leaves it
    return path


def bootstrap_snapshot(metadata_dir: Path) -> Path | None:
    path = metadata_dir / METADATA_PARTITION_DIR / snapshot_name(0, 0)
    return path if path.exists() else None


# ---------------------------------------------------------------------------- features and format

# Kafka 4.4's metadata.version levels: 3.3-IV3 is level 7, each later one the next level.
METADATA_VERSIONS = ["3.3-IV3", "3.4-IV0", "3.5-IV0", "3.5-IV1", "3.5-IV2", "3.6-IV0", "3.6-IV1", "3.6-IV2",
                     "3.7-IV0", "3.7-IV1", "3.7-IV2", "3.7-IV3", "3.7-IV4", "3.8-IV0", "3.9-IV0", "4.0-IV0",
                     "4.0-IV1", "4.0-IV2", "4.0-IV3", "4.1-IV0", "4.1-IV1", "4.2-IV0", "4.2-IV1", "4.3-IV0",
                     "4.4-IV0", "4.4-IV1", "4.4-IV2"]
FIRST_LEVEL = 7
LATEST_PRODUCTION = "4.4-IV2"
SCRAM_MIN_LEVEL = METADATA_VERSIONS.index("3.5-IV2") + FIRST_LEVEL
# The other features' levels by the metadata.version a release defaults to (kafka-storage version-mapping).
FEATURE_DEFAULTS = {  # feature -> [(lowest metadata.version level, feature level)], highest first
    "kraft.version": [(21, 1)],
    "transaction.version": [(22, 2)],
    "group.version": [(22, 1)],
    "eligible.leader.replicas.version": [(26, 1)],
    "share.version": [(31, 2), (28, 1)],
    "streams.version": [(28, 1)],
}
FEATURE_MAX = {"kraft.version": 1, "transaction.version": 2, "group.version": 1,
               "eligible.leader.replicas.version": 1, "share.version": 2, "streams.version": 1}


class FormatError(Exception):
    """The format was refused: one line, as Kafka's storage tool prints it."""


def metadata_version_level(release: str) -> int:
    """A release (``4.4``) or a metadata.version (``4.4-IV2``) to its level."""
    if release in METADATA_VERSIONS:
        return METADATA_VERSIONS.index(release) + FIRST_LEVEL
    named = [i for i, v in enumerate(METADATA_VERSIONS) if v.split("-")[0] == release]
    if not named:
        raise FormatError(f"Unknown metadata.version '{release}'. Supported metadata.version are: "
                          + ", ".join(METADATA_VERSIONS))
    return named[-1] + FIRST_LEVEL


def metadata_version_name(level: int) -> str:
    return METADATA_VERSIONS[level - FIRST_LEVEL]


def feature_levels(mv_level: int, overrides: dict[str, int]) -> dict[str, int]:
    levels = {}
    for name, steps in FEATURE_DEFAULTS.items():
        levels[name] = next((lvl for at, lvl in steps if mv_level >= at), 0)
    for name, lvl in overrides.items():
        if name not in FEATURE_MAX:
            raise FormatError(f"Unsupported feature: {name}. Supported features are: "
                              + ", ".join(sorted(FEATURE_MAX)))
        if not 0 <= lvl <= FEATURE_MAX[name]:
            raise FormatError(f"No feature:{name} with feature level {lvl}")
        levels[name] = lvl
    return levels


@dataclass
class ScramSpec:
    mechanism: str
    name: str
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def record(self, mechanism_type: int) -> tuple[str, int, dict]:
        return ("UserScramCredentialRecord", 0, {"name": self.name, "mechanism": mechanism_type, "salt": self.salt,
                                                 "stored_key": self.stored_key, "server_key": self.server_key,
                                                 "iterations": self.iterations})


def java_bytes(b: bytes) -> str:
    return "[" + ", ".join(str(x - 256 if x > 127 else x) for x in b) + "]"


def describe_records(records: list[tuple[str, int, dict]], mv_level: int) -> str:
    """Kafka's ``Bootstrap metadata: BootstrapMetadata(...)`` line."""
    parts = []
    for name, version, d in records:
        if name == "FeatureLevelRecord":
            body = f"FeatureLevelRecord(name='{d['name']}', featureLevel={d['feature_level']})"
        else:
            body = (f"UserScramCredentialRecord(name='{d['name']}', mechanism={d['mechanism']}, "
                    f"salt={java_bytes(d['salt'])}, storedKey={java_bytes(d['stored_key'])}, "
                    f"serverKey={java_bytes(d['server_key'])}, iterations={d['iterations']})")
        parts.append(f"ApiMessageAndVersion({body} at version {version})")
    return (f"Bootstrap metadata: BootstrapMetadata(records=[{', '.join(parts)}], "
            f"metadataVersionLevel={mv_level}, source=format command)")


@dataclass
class FormatPlan:
    """What ``samsa storage format`` writes: its inputs, checked."""
    cluster_id: str
    node_id: int
    log_dirs: list[Path]
    metadata_dir: Path
    mv_level: int
    records: list[tuple[str, int, dict]]
    kraft_version: int
    voters: list[Voter] | None  # the initial voters (--standalone, --initial-controllers), else None
    ignore_formatted: bool = False

    def run(self, out) -> None:
        dirs = list(dict.fromkeys([self.metadata_dir, *self.log_dirs]))  # the metadata directory first, as Kafka
        todo = []
        for d in dirs:
            if (d / META_PROPERTIES).exists():
                if not self.ignore_formatted:
                    raise FormatError(f"Log directory {d} is already formatted. Use --ignore-formatted to ignore "
                                      "this directory and format the others.")
                continue
            todo.append(d)
        if not todo:
            print("All of the log directories are already formatted.", file=out)
            return
        print(describe_records(self.records, self.mv_level), file=out)
        own = next((v for v in self.voters or [] if v.node_id == self.node_id), None)
        mv_name = metadata_version_name(self.mv_level)
        for d in todo:
            try:
                d.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise FormatError(f"Error while writing meta.properties file {d / META_PROPERTIES}: {e}") from None
            is_meta = d == self.metadata_dir
            directory_id = uuid_string(own.directory_id) if is_meta and own else random_uuid()
            if is_meta:
                snap = Snapshot(records=self.records, kraft_version=self.kraft_version,
                                voters=[v.record() for v in self.voters] if self.voters else None,
                                last_contained_log_timestamp=int(time.time() * 1000))
                write_snapshot(d / METADATA_PARTITION_DIR, snap)
            write_meta_v1(d, self.cluster_id, self.node_id, directory_id)
            kind = ("dynamic metadata voter directory" if is_meta and self.voters
                    else "metadata directory" if is_meta else "data directory")
            print(f"Formatting {kind} {d} with metadata.version {mv_name}.", file=out)


def parse_initial_controllers(text: str) -> list[Voter]:
    """``--initial-controllers``: ``id@host:port:directory-id`` separated by commas (KIP-853)."""
    voters = []
    for item in text.split(","):
        node, sep, rest = item.partition("@")
        if not sep or not node.isdigit():
            raise FormatError(f"Unable to parse node id in dynamic voter string {item}.")
        host_port, _, dir_id = rest.rpartition(":")
        host, _, port = host_port.rpartition(":")
        if not host or not port.isdigit():
            raise FormatError(f"Unable to parse host and port in dynamic voter string {item}.")
        try:
            raw = parse_uuid(dir_id)
        except ValueError:
            raise FormatError("Failed to parse directory ID in dynamic voter string.") from None
        voters.append(Voter(int(node), raw, [("", host.strip("[]"), int(port))]))
    return voters


# ---------------------------------------------------------------------------- info and start checks

def read_meta_props(dir: Path) -> dict[str, str] | None:
    from samsa.storage.meta import read_meta
    return read_meta(dir)


def info_lines(dirs: list[Path]) -> tuple[list[str], bool]:
    """``samsa storage info``: Kafka's report of the directories and their meta.properties;
    and whether something is wrong (exit 1)."""
    found, missing, problems, metas = [], [], [], {}
    for d in dirs:
        if not d.is_dir():
            missing.append(d)
            continue
        found.append(d)
        try:
            props = read_meta_props(d)
        except OSError as e:
            problems.append(f"Error reading {d / META_PROPERTIES}: {e}")
            continue
        if props is None:
            problems.append(f"{d} is not formatted.")
        else:
            metas[d] = props
    if len({p.get("cluster.id") for p in metas.values()}) > 1:
        problems.append("Mismatched cluster IDs between storage directories.")
    problems += [f"{d} does not exist" for d in missing]
    lines = []
    if found:
        lines.append("Found log director" + ("y:" if len(found) == 1 else "ies:"))
        lines += [f"  {d}" for d in found]
        lines.append("")
    for props in list(metas.values())[:1]:
        shown = ", ".join(f"{k}={v}" for k, v in sorted(props.items()))
        lines.append(f"Found metadata: {{{shown}}}")
        lines.append("")
    if problems:
        lines.append(f"Found problem{'s' if len(problems) > 1 else ''}:")
        lines += [f"  {p}" for p in problems]
        lines.append("")
    return lines, bool(problems)


class KRaftStorageError(RuntimeError):
    """The directories of a KRaft node are not usable (not formatted, or another node's)."""


def check_formatted(dirs: list[Path], node_id: int) -> str:
    """At start, as Kafka checks it: every directory formatted (meta.properties v1), for this
    node, of one cluster. Returns the cluster id."""
    metas = {}
    for d in dirs:
        try:
            props = read_meta_props(d)
        except OSError:
            continue
        if props is not None:
            metas[d] = props
    if not metas:
        raise KRaftStorageError("No readable meta.properties files found.")
    unformatted = [str(d) for d in dirs if d not in metas]
    if unformatted:
        raise KRaftStorageError(f"No readable meta.properties files found in {', '.join(unformatted)}: "
                                "format it with samsa storage format --ignore-formatted")
    clusters = {p.get("cluster.id") for p in metas.values()}
    if len(clusters) > 1:
        raise KRaftStorageError(f"Invalid cluster.id in meta.properties: the directories name {sorted(map(str, clusters))}")
    for d, p in metas.items():
        if p.get("version") != "1":
            raise KRaftStorageError(f"{d / META_PROPERTIES} is version {p.get('version')}: a KRaft node needs "
                                    "version 1 (samsa storage format)")
        if p.get("node.id") != str(node_id):
            raise KRaftStorageError(f"Stored node id {p.get('node.id')} doesn't match previous node id {node_id} "
                                    f"in {d / META_PROPERTIES}")
    return clusters.pop()


# ---------------------------------------------------------------------------- the metadata log's segments

class MetadataLogWriter:
    """Appends batches to a segment of ``__cluster_metadata-0`` in Kafka's log format: one batch
    per call, its records numbered from the log's next offset, stamped with the leader's epoch.
    (The format only: replication and the high watermark are the Raft layer's.)"""

    def __init__(self, partition_dir: Path, base_offset: int = 0):
        partition_dir.mkdir(parents=True, exist_ok=True)
        self.path = partition_dir / f"{base_offset:020d}.log"
        self.next_offset = base_offset
        if self.path.exists():
            for header, _ in iter_batches(self.path.read_bytes()):
                self.next_offset = header.base_offset + header.last_offset_delta + 1

    def _write(self, batch: bytes, count: int) -> int:
        base = self.next_offset
        with open(self.path, "ab") as f:
            f.write(batch)
            f.flush()
            os.fsync(f.fileno())
        self.next_offset += count
        return base

    def append(self, records: list[tuple[str, int, dict]], epoch: int, timestamp_ms: int | None = None) -> int:
        """Metadata records ``(schema name, version, data)`` as one batch; returns its base offset."""
        now = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
        batch = build_batch([(None, mr.encode(n, v, d), now) for n, v, d in records], base_offset=self.next_offset,
                            partition_leader_epoch=epoch)
        return self._write(batch, len(records))

    def append_control(self, kind: int, data: dict, epoch: int, timestamp_ms: int | None = None) -> int:
        """A KRaft control record (LeaderChange, KRaftVersion, KRaftVoters) in a control batch of its own."""
        now = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
        batch = build_batch([(*mr.encode_control(kind, data), now)], base_offset=self.next_offset, is_control=True,
                            partition_leader_epoch=epoch)
        return self._write(batch, 1)


def read_metadata_log(buf: bytes):
    """``(offset, epoch, control kind or None, schema name, version, data)`` of each record of a
    metadata log segment or snapshot."""
    for header, records in iter_batches(buf):
        for r in records:
            if header.is_control:
                kind, data = mr.decode_control(r.key, r.value)
                yield r.offset, header.partition_leader_epoch, kind, mr.CONTROL_RECORDS[kind][1], 0, data
            else:
                name, version, data = mr.decode(r.value)
                yield r.offset, header.partition_leader_epoch, None, name, version, data
