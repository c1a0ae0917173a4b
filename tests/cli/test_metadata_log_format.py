"""The metadata log ``__cluster_metadata`` in Kafka's format, both ways (issue 34).

Every metadata record type and KRaft control record Samsa writes is decoded by Apache Kafka
4.4.0's kafka-dump-log --cluster-metadata-decoder exactly as ``samsa dump-log`` prints it,
and Kafka's own metadata log (written by a Kafka 4.4.0 node) decodes in Samsa and encodes
back to the same bytes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from broker_process import ROOT
from samsa.protocol import codec
from samsa.protocol import metadata_records as mr
from samsa.storage import kraft

SAMSA = [sys.executable, "-m", "samsa.cli.main"]
ISSUE_RECORDS = ["TopicRecord", "PartitionRecord", "PartitionChangeRecord", "RemoveTopicRecord", "ConfigRecord",
                 "RegisterBrokerRecord", "BrokerRegistrationChangeRecord", "FenceBrokerRecord", "UnfenceBrokerRecord",
                 "FeatureLevelRecord", "ProducerIdsRecord", "ClientQuotaRecord", "UserScramCredentialRecord",
                 "AccessControlEntryRecord"]


def sample(fields: list, version: int, structs: dict, seed: int) -> dict:
    """A value for every field present at ``version`` (tagged ones too), varied by ``seed``."""
    out = {}
    for i, f in enumerate(fields):
        if not codec._in(f.get("versions"), version):
            continue
        out[codec.snake(f["name"])] = _value(f["type"], f, version, structs, seed + i)
    return out


def _value(t: str, f: dict, version: int, structs: dict, n: int):
    if t.startswith("[]"):
        return [_value(t[2:], f, version, structs, n + k) for k in range(2)]
    if t in ("int8", "int16", "int32", "int64", "uint16", "uint32"):
        return n % 100 + 1
    if t == "bool":
        return n % 2 == 0
    if t == "float64":
        return n + 0.5
    if t == "string":
        return f"s{n}"
    if t == "uuid":
        return uuid.UUID(int=(n + 1) * 0x1234567890ABCDEF).bytes
    if t in ("bytes", "records"):
        return bytes([n % 256, 1, 2])
    sub = f.get("fields") or structs[t]["fields"]
    return sample(sub, version, structs, n * 7)


def all_samples() -> list[tuple[str, int, dict]]:
    out = []
    for name in sorted(mr.by_api_key().values()):
        schema = codec.schemas()[name]
        structs = {c["name"]: c for c in schema.get("commonStructs", [])}
        lo, hi = codec.parse_versions(schema["validVersions"])
        for version in range(lo, hi + 1):
            out.append((name, version, sample(schema["fields"], version, structs, version * 3)))
    return out


def test_the_issues_records_are_all_there():
    names = set(mr.by_api_key().values())
    assert set(ISSUE_RECORDS) <= names
    assert {s for _, s in mr.CONTROL_RECORDS.values()} == {
        "LeaderChangeMessage", "SnapshotHeaderRecord", "SnapshotFooterRecord", "KRaftVersionRecord", "VotersRecord"}


@pytest.mark.parametrize("name, version, data", all_samples(), ids=lambda x: str(x)[:40])
def test_every_record_at_every_version_round_trips(name, version, data):
    value = mr.encode(name, version, data)
    decoded = mr.decode(value)
    assert decoded[:2] == (name, version)
    assert mr.encode(name, version, decoded[2]) == value


def test_unknown_metadata_records_are_refused():
    with pytest.raises(mr.MetadataRecordError, match="Unknown metadata id 999"):
        mr.decode(b"\x01\xe7\x07\x00")
    with pytest.raises(mr.MetadataRecordError, match="unknown frame version 7"):
        mr.decode(b"\x07\x00\x00")


def _write_sample_log(d: Path) -> Path:
    w = kraft.MetadataLogWriter(d / "__cluster_metadata-0")
    w.append_control(mr.LEADER_CHANGE, {"leader_id": 1, "voters": [{"voter_id": 1}, {"voter_id": 2}],
                                        "granting_voters": [{"voter_id": 1}]}, epoch=1, timestamp_ms=1000)
    w.append_control(mr.KRAFT_VERSION, {"k_raft_version": 1}, epoch=1, timestamp_ms=1000)
    w.append_control(mr.KRAFT_VOTERS, {"voters": [kraft.Voter(1, bytes(range(16)), [("CONTROLLER", "h", 9093)]).record()]},
                     epoch=1, timestamp_ms=1000)
    samples = all_samples()
    for i in range(0, len(samples), 5):
        w.append(samples[i:i + 5], epoch=2, timestamp_ms=2000 + i)
    return w.path


def test_writer_and_reader(tmp_path):
    path = _write_sample_log(tmp_path)
    read = list(kraft.read_metadata_log(path.read_bytes()))
    assert [r[0] for r in read] == list(range(len(read)))
    assert read[0][1:4] == (1, mr.LEADER_CHANGE, "LeaderChangeMessage")
    assert [(n, v, d) for _, _, kind, n, v, d in read if kind is None] == all_samples()
    again = kraft.MetadataLogWriter(tmp_path / "__cluster_metadata-0")
    assert again.next_offset == len(read)


def _kafka():
    if os.environ.get("SAMSA_DIFF_SIDE", "both") == "samsa":
        pytest.skip("SAMSA_DIFF_SIDE=samsa: Kafka's side is not run")
    import kafka_process
    return kafka_process


def _dumps(kp, path: Path) -> tuple[str, str]:
    theirs = kp.run_tool(kp.TOOLS["kafka-dump-log"], "--cluster-metadata-decoder", "--files", str(path))
    assert theirs.returncode == 0 and theirs.stderr == "", theirs.stderr
    ours = subprocess.run([*SAMSA, "dump-log", "--cluster-metadata-decoder", "--files", str(path)],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert ours.returncode == 0, ours.stderr
    return ours.stdout, theirs.stdout


def test_kafka_decodes_samsas_metadata_log(tmp_path):
    kp = _kafka()
    path = _write_sample_log(tmp_path)
    ours, theirs = _dumps(kp, path)
    assert theirs.count(" payload: ") == len(all_samples())
    assert "LeaderChange: {" in theirs and "KRaftVersion {" in theirs and "KRaftVoters {" in theirs
    assert ours.splitlines() == theirs.splitlines()


def test_samsa_decodes_kafkas_metadata_log(kafka, tmp_path):
    """A Kafka 4.4.0 node's own __cluster_metadata-0, after topics, configs and quotas were made."""
    kp = _kafka()
    b = kafka.bootstrap
    for args in (("kafka-topics", "--create", "--topic", "meta-log-t", "--partitions", "2"),
                 ("kafka-configs", "--alter", "--entity-type", "topics", "--entity-name", "meta-log-t",
                  "--add-config", "retention.ms=100000"),
                 ("kafka-configs", "--alter", "--entity-type", "users", "--entity-name", "meta-log-u",
                  "--add-config", "SCRAM-SHA-256=[password=x]"),
                 ("kafka-configs", "--alter", "--entity-type", "clients", "--entity-name", "meta-log-c",
                  "--add-config", "producer_byte_rate=1024"),
                 ("kafka-topics", "--delete", "--topic", "meta-log-t")):
        r = kp.run_tool(kp.TOOLS[args[0]], "--bootstrap-server", b, *args[1:])
        assert r.returncode == 0, r.stderr
    source = kafka.log_dir / "__cluster_metadata-0" / "00000000000000000000.log"
    copy = tmp_path / "__cluster_metadata-0" / "00000000000000000000.log"
    copy.parent.mkdir()
    shutil.copyfile(source, copy)  # a still picture: the node keeps appending to its own
    data = copy.read_bytes()
    kinds = set()
    for header, records in kraft.iter_batches(data):
        for r in records:
            if header.is_control:
                kind, body = mr.decode_control(r.key, r.value)
                assert codec.encode_bytes(mr.CONTROL_RECORDS[kind][1], 0, body) == bytes(r.value)
            else:
                name, version, body = mr.decode(bytes(r.value))
                kinds.add(name)
                assert mr.encode(name, version, body) == bytes(r.value), name
    assert {"TopicRecord", "PartitionRecord", "ConfigRecord", "RemoveTopicRecord", "RegisterBrokerRecord",
            "FeatureLevelRecord", "UserScramCredentialRecord", "ClientQuotaRecord"} <= kinds
    ours, theirs = _dumps(kp, copy)
    assert ours.splitlines() == theirs.splitlines()
