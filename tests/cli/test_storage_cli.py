"""`samsa storage` (kafka-storage.sh) and a KRaft server.properties at start (issue 34, first step).

Samsa's formatted directories are read by Apache Kafka 4.4.0's own kafka-storage and
kafka-dump-log, and Samsa reads directories Kafka's kafka-storage formatted.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from broker_process import ROOT, BrokerProcess, free_port

SAMSA = [sys.executable, "-m", "samsa.cli.main"]
CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"


def run(*args: str, timeout=60) -> subprocess.CompletedProcess:
    return subprocess.run([*SAMSA, *args], capture_output=True, text=True, cwd=ROOT, timeout=timeout)


def kraft_props(d: Path, node_id: int = 1, *, voters: str | None = "self", bootstrap: bool = False,
                port: int | None = None, controller_port: int | None = None, **extra: str) -> dict[str, str]:
    port, controller_port = port or free_port(), controller_port or free_port()
    props = {"process.roles": "broker,controller", "node.id": str(node_id),
             "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
             "controller.listener.names": "CONTROLLER",
             "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
             "log.dirs": str(d / "logs")}
    if bootstrap:
        props["controller.quorum.bootstrap.servers"] = f"127.0.0.1:{controller_port}"
    elif voters == "self":
        props["controller.quorum.voters"] = f"{node_id}@127.0.0.1:{controller_port}"
    elif voters:
        props["controller.quorum.voters"] = voters
    props.update(extra)
    return props


def write_props(d: Path, props: dict[str, str]) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    path = d / "server.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return path


def meta(d: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in (d / "meta.properties").read_text().splitlines()
                if line and not line.startswith("#"))


# ---------------------------------------------------------------------------- the tool

def test_random_uuid():
    r = run("storage", "random-uuid")
    assert r.returncode == 0
    out = r.stdout.strip()
    assert len(out) == 22 and not out.startswith("-")
    from samsa.storage.kraft import parse_uuid
    assert len(parse_uuid(out)) == 16


def test_format_static_voters_and_info(tmp_path):
    conf = write_props(tmp_path, kraft_props(tmp_path, metadata_log_dir_unused="x"))
    r = run("storage", "format", "-t", CLUSTER_ID, "-c", str(conf))
    assert r.returncode == 0, r.stderr
    logs = tmp_path / "logs"
    assert r.stdout.splitlines()[1:] == [f"Formatting metadata directory {logs} with metadata.version 4.4-IV2."]
    assert r.stdout.startswith("Bootstrap metadata: BootstrapMetadata(records=[ApiMessageAndVersion(FeatureLevelRecord("
                               "name='metadata.version', featureLevel=33) at version 0), ")
    m = meta(logs)
    assert m["version"] == "1" and m["cluster.id"] == CLUSTER_ID and m["node.id"] == "1" and len(m["directory.id"]) == 22
    snapshot = logs / "__cluster_metadata-0" / "00000000000000000000-0000000000.checkpoint"
    from samsa.storage.kraft import decode_snapshot
    snap = decode_snapshot(snapshot.read_bytes())
    assert snap.kraft_version == 0 and snap.voters is None
    assert [(n, d["name"], d["feature_level"]) for n, _, d in snap.records] == [
        ("FeatureLevelRecord", "metadata.version", 33), ("FeatureLevelRecord", "eligible.leader.replicas.version", 1),
        ("FeatureLevelRecord", "group.version", 1), ("FeatureLevelRecord", "share.version", 2),
        ("FeatureLevelRecord", "streams.version", 1), ("FeatureLevelRecord", "transaction.version", 2)]
    r = run("storage", "info", "-c", str(conf))
    assert r.returncode == 0
    shown = ", ".join(f"{k}={v}" for k, v in sorted(m.items()))
    assert r.stdout == f"Found log directory:\n  {logs}\n\nFound metadata: {{{shown}}}\n\n"
    # formatted already: refused, unless --ignore-formatted
    r = run("storage", "format", "-t", CLUSTER_ID, "-c", str(conf))
    assert r.returncode == 1 and r.stderr.strip() == (
        f"Log directory {logs} is already formatted. Use --ignore-formatted to ignore this directory and format "
        "the others.")
    r = run("storage", "format", "-t", CLUSTER_ID, "-c", str(conf), "--ignore-formatted")
    assert r.returncode == 0 and r.stdout.strip() == "All of the log directories are already formatted."


def test_format_standalone_writes_the_voter_and_every_dir(tmp_path):
    props = kraft_props(tmp_path, bootstrap=True, **{"log.dirs": f"{tmp_path / 'a'},{tmp_path / 'b'}",
                                                      "metadata.log.dir": str(tmp_path / "meta")})
    conf = write_props(tmp_path, props)
    r = run("storage", "format", "-t", CLUSTER_ID, "-c", str(conf), "--standalone", "--release-version", "3.9",
            "--add-scram", "SCRAM-SHA-256=[name=alice,password=alice-secret]")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[1:] == [
        f"Formatting dynamic metadata voter directory {tmp_path / 'meta'} with metadata.version 3.9-IV0.",
        f"Formatting data directory {tmp_path / 'a'} with metadata.version 3.9-IV0.",
        f"Formatting data directory {tmp_path / 'b'} with metadata.version 3.9-IV0."]
    ids = {meta(tmp_path / d)["directory.id"] for d in ("a", "b", "meta")}
    assert len(ids) == 3
    assert not (tmp_path / "a" / "__cluster_metadata-0").exists()
    from samsa.storage.kraft import decode_snapshot, uuid_string
    snap = decode_snapshot((tmp_path / "meta" / "__cluster_metadata-0" /
                            "00000000000000000000-0000000000.checkpoint").read_bytes())
    assert snap.kraft_version == 1
    (voter,) = snap.voters
    assert voter["voter_id"] == 1 and uuid_string(voter["voter_directory_id"]) == meta(tmp_path / "meta")["directory.id"]
    assert voter["endpoints"][0]["name"] == "CONTROLLER"
    assert [n for n, _, _ in snap.records] == ["FeatureLevelRecord", "UserScramCredentialRecord"]
    scram = snap.records[1][2]
    from samsa.security.scram import make_credential
    cred = make_credential("SCRAM-SHA-256", "alice-secret", scram["iterations"], scram["salt"])
    assert (scram["name"], scram["mechanism"], scram["stored_key"]) == ("alice", 1, cred.stored_key)


@pytest.mark.parametrize("args, message", [
    ([], "Because controller.quorum.voters is not set on this controller, you must specify one of the following: "
         "--standalone, --initial-controllers, or --no-initial-controllers."),
    (["--release-version", "9.9"], "Unknown metadata.version '9.9'. Supported metadata.version are: 3.3-IV3, "),
    (["--standalone", "--feature", "group.version=7"], "No feature:group.version with feature level 7"),
    (["--initial-controllers", "1@127.0.0.1:9093:bad"], "Failed to parse directory ID in dynamic voter string."),
])
def test_format_refusals(tmp_path, args, message):
    conf = write_props(tmp_path, kraft_props(tmp_path, bootstrap=True))
    r = run("storage", "format", "-t", CLUSTER_ID, "-c", str(conf), *args)
    assert r.returncode == 1 and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith(message)
    assert not (tmp_path / "logs" / "meta.properties").exists()


def test_format_refuses_standalone_with_static_voters_and_zookeeper_configs(tmp_path):
    conf = write_props(tmp_path, kraft_props(tmp_path))
    r = run("storage", "format", "-t", CLUSTER_ID, "-c", str(conf), "--standalone")
    assert r.returncode == 1 and r.stderr.startswith(
        "You cannot specify controller.quorum.voters and format the node with --initial-controllers or --standalone.")
    zk = write_props(tmp_path / "zk", {"broker.id": "0", "zookeeper.connect": "localhost:2181",
                                       "log.dirs": str(tmp_path / "zk" / "logs")})
    r = run("storage", "format", "-t", CLUSTER_ID, "-c", str(zk))
    assert r.returncode == 1 and r.stderr.strip() == (
        'Missing required configuration "process.roles" which has no default value.')


# ---------------------------------------------------------------------------- the broker at start

@pytest.mark.parametrize("props, message", [
    ({"controller.listener.names": ""},
     'Missing required configuration "controller.listener.names" which has no default value.'),
    ({"controller.quorum.voters": ""},
     "If using process.roles, either controller.quorum.bootstrap.servers must contain the set of bootstrap "
     "controllers or controller.quorum.voters must contain a parseable set of controllers."),
    ({"zookeeper.connect": "localhost:2181"}, "zookeeper.connect and process.roles cannot both be set"),
    ({"node.id": "4"}, "requirement failed: If process.roles contains the 'controller' role, the node id 4 must be "
                       "included in the set of voters controller.quorum.voters=Set(1)"),
    ({"process.roles": "broker,zookeeper"}, "Invalid value broker,zookeeper for configuration process.roles: "
                                            "Unknown process role 'zookeeper'"),
    ({}, "No readable meta.properties files found."),
])
def test_start_refuses_a_bad_kraft_config_in_one_line(tmp_path, props, message):
    p = kraft_props(tmp_path, voters="1@127.0.0.1:9093")
    p.update(props)
    conf = write_props(tmp_path, {k: v for k, v in p.items() if v})
    r = run("server", "start", str(conf))
    assert r.returncode == 1
    assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith(f"samsa server: {message}"), r.stderr


def test_dynamic_voters_run_the_quorum_never_alone(tmp_path):
    """Initial controllers of three (dynamic voters, KIP-853) with controller.quorum.bootstrap.servers:
    accepted at start, and the node follows the quorum's metadata log (never Samsa's single-node
    store); without its controller listener it is refused in one line.
    (tests/raft/test_kraft_dynamic_voters.py runs such quorums.)"""
    from samsa.broker_config import BrokerConfig
    from samsa.server import kraft_mode
    dyn = tmp_path / "dyn"
    props = kraft_props(dyn, bootstrap=True)
    conf = write_props(dyn, props)
    ids = [run("storage", "random-uuid").stdout.strip() for _ in range(3)]
    controllers = ",".join(f"{i + 1}@127.0.0.1:{9093 + i}:{ids[i]}" for i in range(3))
    r = run("storage", "format", "-t", CLUSTER_ID, "-c", str(conf), "--initial-controllers", controllers)
    assert r.returncode == 0, r.stderr
    assert meta(dyn / "logs")["directory.id"] == ids[0]
    config = BrokerConfig(props)
    assert kraft_mode.check_start(config) == CLUSTER_ID and kraft_mode.dynamic(config)
    assert kraft_mode.follows_quorum(config)
    bad = write_props(dyn, {**props, "controller.listener.names": "OTHER"})
    for args in ([], ["-daemon"]):
        r = run("server", "start", *args, str(bad))
        assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert r.stderr.startswith("samsa server: requirement failed: The listeners config must contain a listener "
                                   "with the name from controller.listener.names (OTHER)"), r.stderr


def _serve_one_node(d: Path, conf_props: dict[str, str]) -> None:
    port = int(conf_props["listeners"].split(",")[0].rsplit(":", 1)[1])
    broker = BrokerProcess(d, port=port, **{"broker.id": conf_props["node.id"]}, **conf_props)
    broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        md = admin.list_topics(timeout=30)
        assert md.cluster_id == CLUSTER_ID and list(md.brokers) == [int(conf_props["node.id"])]
        p = Producer({"bootstrap.servers": broker.bootstrap})
        p.produce("kraft-one", b"hello")
        assert p.flush(30) == 0
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g", "auto.offset.reset": "earliest"})
        c.subscribe(["kraft-one"])
        got = None
        for _ in range(60):
            m = c.poll(1)
            if m is not None and not m.error():
                got = m.value()
                break
        c.close()
        assert got == b"hello"
    finally:
        broker.stop()


@pytest.mark.parametrize("standalone", [False, True])
def test_a_single_combined_node_serves_as_a_one_node_cluster(tmp_path, standalone):
    props = kraft_props(tmp_path, bootstrap=standalone)
    conf = write_props(tmp_path, props)
    fmt = ["--standalone"] if standalone else []
    assert run("storage", "format", "-t", CLUSTER_ID, "-c", str(conf), *fmt).returncode == 0
    _serve_one_node(tmp_path, props)
    _serve_one_node(tmp_path, props)  # restarted: the same cluster, its file store kept
    # the metadata partition is not taken for a topic's
    assert (tmp_path / "logs" / "__cluster_metadata-0" / "00000000000000000000-0000000000.checkpoint").exists()


# ---------------------------------------------------------------------------- against Apache Kafka 4.4.0's tools

def _kafka():
    if os.environ.get("SAMSA_DIFF_SIDE", "both") == "samsa":
        pytest.skip("SAMSA_DIFF_SIDE=samsa: Kafka's side is not run")
    import kafka_process
    return kafka_process


def test_kafkas_tools_read_samsas_format(tmp_path):
    kp = _kafka()
    props = kraft_props(tmp_path, bootstrap=True)
    conf = write_props(tmp_path, props)
    r = run("storage", "format", "-t", CLUSTER_ID, "-c", str(conf), "--standalone",
            "--add-scram", "SCRAM-SHA-512=[name=bob,password=bob-secret,iterations=8192]")
    assert r.returncode == 0, r.stderr
    theirs = kp.run_tool(kp.TOOLS["kafka-storage"], "info", "-c", str(conf))
    ours = run("storage", "info", "-c", str(conf))
    assert theirs.returncode == 0 and ours.stdout == theirs.stdout
    snapshot = tmp_path / "logs" / "__cluster_metadata-0" / "00000000000000000000-0000000000.checkpoint"
    for flags in (["--cluster-metadata-decoder"], []):
        theirs = kp.run_tool(kp.TOOLS["kafka-dump-log"], *flags, "--files", str(snapshot))
        ours = run("dump-log", *flags, "--files", str(snapshot))
        assert theirs.returncode == 0 and theirs.stderr == ""
        assert ours.stdout == theirs.stdout
    assert '"type":"USER_SCRAM_CREDENTIAL_RECORD"' in ours.stdout or flags == []
    assert "KRaftVoters {" in kp.run_tool(kp.TOOLS["kafka-dump-log"], "--cluster-metadata-decoder",
                                          "--files", str(snapshot)).stdout


@pytest.mark.parametrize("standalone", [False, True])
def test_samsa_reads_and_serves_kafkas_format(tmp_path, standalone):
    kp = _kafka()
    props = kraft_props(tmp_path, bootstrap=standalone)
    conf = write_props(tmp_path, props)
    fmt = ["--standalone"] if standalone else []
    r = kp.run_tool(kp.TOOLS["kafka-storage"], "format", "-t", CLUSTER_ID, "-c", str(conf), *fmt)
    assert r.returncode == 0, r.stderr
    ours = run("storage", "format", "-t", CLUSTER_ID, "-c", str(conf.with_name("other.properties")))
    assert ours.returncode == 1  # (no such file: one line)
    assert len(ours.stderr.strip().splitlines()) == 1
    assert run("storage", "info", "-c", str(conf)).stdout == kp.run_tool(
        kp.TOOLS["kafka-storage"], "info", "-c", str(conf)).stdout
    snapshot = tmp_path / "logs" / "__cluster_metadata-0" / "00000000000000000000-0000000000.checkpoint"
    theirs = kp.run_tool(kp.TOOLS["kafka-dump-log"], "--cluster-metadata-decoder", "--files", str(snapshot))
    assert run("dump-log", "--cluster-metadata-decoder", "--files", str(snapshot)).stdout == theirs.stdout
    _serve_one_node(tmp_path, props)


def _normalized(text: str, root: Path) -> str:
    text = text.replace(str(root), "<root>")
    text = re.sub(r"(CreateTime: |\"lastContainedLogTimestamp\":|crc: )\d+", r"\1<n>", text)
    return re.sub(r"(directory.id=|\"voterDirectoryId\":\")[A-Za-z0-9_-]{22}", r"\1<id>", text)


@pytest.mark.parametrize("flags", [["--no-initial-controllers"], ["--standalone"], [],
                                   ["--standalone", "--release-version", "3.9"],
                                   ["--no-initial-controllers", "--feature", "share.version=1",
                                    "--release-version", "4.1-IV0"],
                                   ["--standalone", "--add-scram",
                                    'SCRAM-SHA-256=[name=alice,password=alice-secret,'
                                    'salt="MWx2NHBkbnc0ZndxN25vdGN4bTB5eTFrN3E=",iterations=8192]',
                                    "--add-scram", 'SCRAM-SHA-512=[name=bob,saltedpassword="bWlzc2lzc2lwcGk=",'
                                    'salt="c2FsdA==",iterations=4096]']])
def test_format_as_kafkas_format(tmp_path, flags):
    """The same format by both tools: the same lines, the same files, the same snapshot records."""
    kp = _kafka()
    outs = {}
    for side in ("kafka", "samsa"):
        root = tmp_path / side
        extra = {"log.dirs": f"{root / 'a'},{root / 'b'}", "metadata.log.dir": str(root / "meta")}
        props = kraft_props(root, port=19092, controller_port=19093, bootstrap=flags != [], **extra)
        conf = write_props(root, props)
        args = ["format", "-t", CLUSTER_ID, "-c", str(conf), *flags]
        r = kp.run_tool(kp.TOOLS["kafka-storage"], *args) if side == "kafka" else run("storage", *args)
        assert r.returncode == 0, r.stderr
        files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
        snapshot = root / "meta" / "__cluster_metadata-0" / "00000000000000000000-0000000000.checkpoint"
        dump = kp.run_tool(kp.TOOLS["kafka-dump-log"], "--cluster-metadata-decoder", "--files", str(snapshot))
        assert dump.returncode == 0 and dump.stderr == ""
        info = run("storage", "info", "-c", str(conf))
        outs[side] = [_normalized(x, root) for x in (r.stdout, "\n".join(files), dump.stdout, info.stdout)]
        assert snapshot.stat().st_mode & 0o777 == 0o400
    ours, theirs = outs["samsa"], outs["kafka"]
    # Kafka formats the directories in the order of a hash set: the same lines, in some order
    assert sorted(ours[0].splitlines()) == sorted(theirs[0].splitlines())
    for mine, kafkas in zip(ours[1:], theirs[1:]):
        assert mine.splitlines() == kafkas.splitlines()


def test_a_file_store_of_another_cluster_is_refused(tmp_path):
    props = kraft_props(tmp_path)
    conf = write_props(tmp_path, props)
    assert run("storage", "format", "-t", CLUSTER_ID, "-c", str(conf)).returncode == 0
    (tmp_path / "logs" / "samsa-cluster-metadata.json").write_text('{"version": 1, "cluster_id": "other"}')
    r = run("server", "start", str(conf))
    assert r.returncode == 1 and r.stderr.strip().splitlines()[-1].startswith("samsa server: ")
    assert f"belongs to cluster other, but meta.properties says cluster.id={CLUSTER_ID}" in r.stderr


def test_info_problems_as_kafkas(tmp_path):
    """Unformatted, missing and mismatched directories: the same report and exit status as Kafka's."""
    kp = _kafka()
    dirs = [tmp_path / x for x in "abcd"]
    props = kraft_props(tmp_path, **{"log.dirs": ",".join(map(str, dirs[:2]))})
    conf = write_props(tmp_path, props)
    assert run("storage", "format", "-t", CLUSTER_ID, "-c", str(conf)).returncode == 0
    (dirs[1] / "meta.properties").unlink()
    dirs[2].mkdir()
    (dirs[2] / "meta.properties").write_text("#\nversion=0\nbroker.id=1\ncluster.id=other\n")
    conf = write_props(tmp_path, dict(props, **{"log.dirs": ",".join(map(str, dirs))}))
    theirs = kp.run_tool(kp.TOOLS["kafka-storage"], "info", "-c", str(conf))
    ours = run("storage", "info", "-c", str(conf))
    assert "Mismatched cluster IDs between storage directories." in theirs.stdout
    assert (ours.returncode, ours.stdout) == (theirs.returncode, theirs.stdout) == (1, theirs.stdout)
