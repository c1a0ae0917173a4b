"""``samsa dump-log``: kafka-dump-log.sh, reading segment files directly (no broker).

    samsa dump-log --files /tmp/kafka-logs/test-0/00000000000000000000.log --print-data-log

Understands ``.log`` (record batches), ``.index`` (offset index), ``.timeindex`` (time
index), ``.txnindex`` (aborted transactions) and Samsa's ``.snapshot`` producer-state
files, and prints them as Kafka's tool does. With ``--offsets-decoder`` the keys and
values of ``__consumer_offsets`` records print as JSON, as Kafka's do; group members'
``subscription`` and ``assignment`` stay base64 (Kafka decodes the consumer protocol).
``--share-group-state-decoder`` prints ``__share_group_state`` records (KIP-932) so.
"""

from __future__ import annotations

import argparse
import base64
import json
import struct
import sys
from pathlib import Path
from typing import Any, Callable

from samsa.cli.common import Parser, UsageError, run_tool
from samsa.protocol import codec, group_records, metadata_records, share_records, txn_records
from samsa.protocol.batch import DELETE_HORIZON_BIT, BatchHeader, compute_crc, iter_headers
from samsa.protocol.errors import CorruptRecordError, KafkaError
from samsa.protocol.records import Record, decode_batch

DESCRIPTION = ("This tool helps to parse a log file and dump its contents to the console, "
               "useful for debugging a seemingly corrupt log segment.")
INT_MAX = 2**31 - 1
CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")
_TXN_ENTRY = struct.Struct(">hqqqq")
_I16 = struct.Struct(">h")
_CONTROL_VALUE = struct.Struct(">hi")

PayloadDecoder = Callable[[Record], tuple[str | None, str | None]]


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="samsa dump-log", description=DESCRIPTION)
    a = p.add_argument
    a("--files", metavar="<String: file1, file2, ...>",
      help="REQUIRED: The comma separated list of data and index log files to be dumped.")
    a("--print-data-log", action="store_true", help="If set, printing the messages content when dumping data logs. "
      "Automatically set if any decoder option is specified.")
    a("--deep-iteration", action="store_true", help="If set, uses deep instead of shallow iteration. "
      "Automatically set if print-data-log is enabled.")
    a("--verify-index-only", action="store_true", help="If set, just verify the index log without printing its content.")
    a("--index-sanity-check", action="store_true",
      help="If set, just checks the index sanity without printing its content.")
    a("--max-message-size", type=int, default=5 * 1024 * 1024, metavar="<Integer: size>",
      help="Size of largest message. (default: 5242880)")
    a("--max-bytes", type=int, default=INT_MAX, metavar="<Integer: size>",
      help="Limit the amount of total batches read in bytes avoiding reading the whole .log file(s).")
    a("--key-decoder-class", nargs="?", const="StringDecoder", metavar="[String]",
      help="Decoder for the keys: StringDecoder (default), IntegerDecoder or LongDecoder.")
    a("--value-decoder-class", nargs="?", const="StringDecoder", metavar="[String]",
      help="Decoder for the values: StringDecoder (default), IntegerDecoder or LongDecoder.")
    a("--offsets-decoder", action="store_true",
      help="If set, log data will be parsed as offset data from the __consumer_offsets topic.")
    a("--transaction-log-decoder", action="store_true",
      help="If set, log data will be parsed as transaction metadata from the __transaction_state topic.")
    a("--share-group-state-decoder", action="store_true",
      help="If set, log data will be parsed as share group state data from the __share_group_state topic.")
    a("--cluster-metadata-decoder", action="store_true",
      help="If set, log data will be parsed as cluster metadata records.")
    a("--remote-log-metadata-decoder", action="store_true", help=argparse.SUPPRESS)
    a("--skip-record-metadata", action="store_true", help="Whether to skip printing metadata for each record.")
    return p


# ---------------------------------------------------------------------------- decoders

def _decoder(name: str | None) -> Callable[[bytes], str]:
    short = (name or "StringDecoder").rsplit(".", 1)[-1]
    if short == "StringDecoder":
        return lambda b: bytes(b).decode("utf-8", "replace")
    if short == "IntegerDecoder":
        return lambda b: str(struct.unpack(">i", bytes(b))[0])
    if short == "LongDecoder":
        return lambda b: str(struct.unpack(">q", bytes(b))[0])
    raise UsageError(f"Unsupported decoder class {name}: use StringDecoder, IntegerDecoder or LongDecoder")


def plain_parser(key_decoder: str | None, value_decoder: str | None) -> PayloadDecoder:
    decode_key, decode_value = _decoder(key_decoder), _decoder(value_decoder)
    return lambda r: (None if r.key is None else decode_key(r.key), None if r.value is None else decode_value(r.value))


def _json(obj: object) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def offsets_parser(record: Record) -> tuple[str | None, str | None]:
    """__consumer_offsets records as Kafka's OffsetsMessageParser shows them."""
    if record.key is None:
        raise CorruptRecordError(f"Failed to decode message at offset {record.offset} using offset topic decoder "
                                 "(message had a missing key)")
    try:
        key_version = _I16.unpack_from(record.key)[0]
        if (key_version in group_records.CONSUMER_RECORDS or key_version in group_records.SHARE_RECORDS
                or key_version in group_records.STREAMS_RECORDS):
            return _consumer_group_record(record)
        kind, group, topic, partition = group_records.parse_key(bytes(record.key))
        data = {"group": group, "topic": topic, "partition": partition} if kind == "offset" else {"group": group}
        key = _json({"type": str(key_version), "data": data})
        if record.value is None:
            return key, "<DELETE>"
        value = bytes(record.value)
        version = _I16.unpack_from(value)[0]
        if kind == "offset":
            o = group_records.parse_offset_value(value)
            body: dict = {"offset": o.offset}
            if version >= 3:
                body["leaderEpoch"] = o.leader_epoch
            body.update(metadata=o.metadata, commitTimestamp=o.commit_timestamp)
        else:
            g = group_records.parse_group_value(value)
            body = {"protocolType": g.protocol_type, "generation": g.generation, "protocol": g.protocol,
                    "leader": g.leader}
            if version >= 2:
                body["currentStateTimestamp"] = g.state_timestamp
            body["members"] = [_member(m, version) for m in g.members]
        return key, _json({"version": str(version), "data": body})
    except (ValueError, struct.error, UnicodeDecodeError, KafkaError) as e:
        return f"Error at offset {record.offset}, skipping. {e}", None


def _camel(obj):
    """A decoded record as Kafka's generated JSON converters print it: camelCase names,
    topic ids as Kafka's base64 Uuid strings."""
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            head, *rest = k.split("_")
            out[head + "".join(w.capitalize() for w in rest)] = _camel(v)
        return out
    if isinstance(obj, list):
        return [_camel(v) for v in obj]
    if isinstance(obj, (bytes, bytearray, memoryview)):
        raw = bytes(obj)
        return base64.urlsafe_b64encode(raw).decode().rstrip("=") if len(raw) == 16 else base64.b64encode(raw).decode()
    return obj


def _consumer_group_record(record: Record) -> tuple[str | None, str | None]:
    """A consumer (key versions 3 to 8) or share (10 to 15) group record of the new protocols."""
    kind, group, member = group_records.parse_consumer_key(bytes(record.key))
    data = {"groupId": group} if member is None else {"groupId": group, "memberId": member}
    key = _json({"type": str(_I16.unpack_from(record.key)[0]), "data": data})
    if record.value is None:
        return key, "<DELETE>"
    body = group_records.parse_consumer_value(kind, bytes(record.value))
    return key, _json({"version": "0", "data": _camel(_without_default_tags(kind + "Value", body))})


def _without_default_tags(message: str, body: dict) -> dict:
    """``body`` less its tagged fields that hold their default, which Kafka's JSON leaves out."""
    schema = codec.schemas()[message]
    structs = {c["name"]: c["fields"] for c in schema.get("commonStructs", [])}

    def walk(fields: list[dict], value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        out = {}
        for f in fields:
            name = codec.snake(f["name"])
            if name not in value:
                continue
            v = value[name]
            if "tag" in f:
                d = f.get("default")
                if v is None or v == [] or (d is not None and str(v).lower() == str(d).lower()):
                    continue
            inner = f.get("fields") or structs.get(f["type"].removeprefix("[]"))
            if inner is not None:
                v = [walk(inner, x) for x in v] if isinstance(v, list) else walk(inner, v)
            out[name] = v
        return out
    return walk(schema["fields"], body)


def share_state_parser(record: Record) -> tuple[str | None, str | None]:
    """__share_group_state records (ShareSnapshot, ShareUpdate) as Kafka's parser shows them."""
    if record.key is None:
        raise CorruptRecordError(f"Failed to decode message at offset {record.offset} using share group state "
                                 "decoder (message had a missing key)")
    try:
        parsed = share_records.parse_key(bytes(record.key))
        if parsed is None:
            return f"Unknown record type {_I16.unpack_from(record.key)[0]} at offset {record.offset}, skipping.", None
        kind, group, topic_id, partition = parsed
        key = _json({"type": str(kind), "data": {"groupId": group, "topicId": _camel(topic_id.bytes),
                                                 "partition": partition}})
        if record.value is None:
            return key, "<DELETE>"
        return key, _json({"version": "0", "data": _camel(share_records.parse_value(kind, bytes(record.value)))})
    except (ValueError, struct.error, UnicodeDecodeError, KafkaError) as e:
        return f"Error at offset {record.offset}, skipping. {e}", None


def transaction_log_parser(record: Record) -> tuple[str | None, str | None]:
    """__transaction_state records as Kafka's TransactionLogMessageParser shows them (JSON)."""
    if record.key is None:
        raise CorruptRecordError(f"Failed to decode message at offset {record.offset} using the transaction log "
                                 "decoder (message had a missing key)")
    try:
        key = _json({"type": str(_I16.unpack_from(record.key)[0]),
                     "data": {"transactionalId": txn_records.parse_txn_key(bytes(record.key))}})
        if record.value is None:
            return key, "<DELETE>"
        v = txn_records.parse_txn_value(bytes(record.value))
        body: dict = {"producerId": v.producer_id}
        if v.previous_producer_id != -1:  # version 1's tagged fields, where Kafka prints them: when set
            body["previousProducerId"] = v.previous_producer_id
        if v.next_producer_id != -1:
            body["nextProducerId"] = v.next_producer_id
        body.update({"producerEpoch": v.producer_epoch, "transactionTimeoutMs": v.timeout_ms,
                     "transactionStatus": v.status,
                     "transactionPartitions": [{"topic": t, "partitionIds": ps} for t, ps in v.partitions.items()],
                     "transactionLastUpdateTimestampMs": v.last_update_ms, "transactionStartTimestampMs": v.start_ms})
        if v.client_version:
            body["clientTransactionVersion"] = v.client_version
        return key, _json({"version": str(v.version), "data": body})
    except (ValueError, struct.error, UnicodeDecodeError) as e:
        return f"Error at offset {record.offset}, skipping. {e}", None


def _member(m: dict, version: int) -> dict:
    out = {"memberId": m["member_id"]}
    if version >= 3:
        out["groupInstanceId"] = m["group_instance_id"]
    out.update(clientId=m["client_id"], clientHost=m["client_host"])
    if version >= 1:
        out["rebalanceTimeout"] = m["rebalance_timeout"]
    out.update(sessionTimeout=m["session_timeout"],
               subscription=base64.b64encode(m["subscription"]).decode(),
               assignment=base64.b64encode(m["assignment"]).decode())
    return out


# ---------------------------------------------------------------------------- .log

def _sequence(base: int, delta: int) -> int:
    return -1 if base == -1 else (base + delta) & 0x7FFFFFFF


def batch_line(h: BatchHeader, position: int, valid: bool) -> str:
    horizon = f"OptionalLong[{h.base_timestamp}]" if h.attributes & DELETE_HORIZON_BIT else "OptionalLong.empty"
    ts_type = "LogAppendTime" if h.log_append_time else "CreateTime"
    return (f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.record_count} "
            f"baseSequence: {h.base_sequence} lastSequence: {h.last_sequence} producerId: {h.producer_id} "
            f"producerEpoch: {h.producer_epoch} partitionLeaderEpoch: {h.partition_leader_epoch} "
            f"isTransactional: {str(h.is_transactional).lower()} isControl: {str(h.is_control).lower()} "
            f"deleteHorizonMs: {horizon} position: {position} {ts_type}: {h.max_timestamp} size: {h.size} "
            f"magic: {h.magic} compresscodec: {CODECS.get(h.compression, 'unknown')} crc: {h.crc} "
            f"isvalid: {str(valid).lower()}")


def _control(record: Record) -> str:
    key = bytes(record.key or b"")
    kind = _I16.unpack_from(key, 2)[0] if len(key) >= 4 else -1
    if kind in (0, 1) and record.value is not None and len(record.value) >= _CONTROL_VALUE.size:
        _, epoch = _CONTROL_VALUE.unpack_from(bytes(record.value))
        return f" endTxnMarker: {'ABORT' if kind == 0 else 'COMMIT'} coordinatorEpoch: {epoch}"
    names = {0: "ABORT", 1: "COMMIT", 2: "LEADER_CHANGE", 3: "SNAPSHOT_HEADER", 4: "SNAPSHOT_FOOTER",
             5: "KRAFT_VERSION", 6: "KRAFT_VOTERS"}
    return f" controlType: {names.get(kind, 'UNKNOWN')}({kind})"


def _kraft_control(record: Record) -> bool:
    key = bytes(record.key or b"")
    return len(key) >= 4 and _I16.unpack_from(key, 2)[0] in metadata_records.CONTROL_RECORDS


def cluster_metadata_parser(record: Record) -> tuple[str | None, str | None]:
    """--cluster-metadata-decoder: a record of __cluster_metadata as Kafka's JSON."""
    if record.value is None:
        return None, None
    try:
        return None, metadata_records.payload_json(bytes(record.value))
    except (ValueError, KafkaError) as e:
        raise CorruptRecordError(f"Failed to decode message at offset {record.offset} using cluster metadata "
                                 f"decoder: {e}") from None


def record_line(h: BatchHeader, r: Record, opts: argparse.Namespace, parser: PayloadDecoder, print_data: bool) -> str:
    out = ""
    prefix = "| "
    if not opts.skip_record_metadata:
        ts_type = "LogAppendTime" if h.log_append_time else "CreateTime"
        key_size = -1 if r.key is None else len(r.key)
        value_size = -1 if r.value is None else len(r.value)
        out += (f"{prefix}offset: {r.offset} {ts_type}: {r.timestamp} keySize: {key_size} valueSize: {value_size}"
                f" sequence: {_sequence(h.base_sequence, r.offset - h.base_offset)}"
                f" headerKeys: [{','.join(k for k, _ in r.headers)}]")
        prefix = " "
        if h.is_control and opts.cluster_metadata_decoder and _kraft_control(r):
            out += f" {metadata_records.control_json(bytes(r.key), bytes(r.value or b''))}"
        elif h.is_control:
            out += _control(r)
    if print_data and not h.is_control:
        key, payload = parser(r)
        if key is not None:
            out += f"{prefix}key: {key}"
        if payload is not None:
            out += f" payload: {payload}"
    return out


def dump_log(path: Path, opts: argparse.Namespace, parser: PayloadDecoder, print_data: bool,
             non_consecutive: dict[str, list[tuple[int, int]]], snapshot: bool = False) -> None:
    if snapshot:  # a KRaft snapshot (KIP-630): <end offset>-<epoch>.checkpoint
        end_offset, epoch = path.name.split(".")[0].split("-")
        print(f"Snapshot end offset: {int(end_offset)}, epoch: {int(epoch)}")
    else:
        print(f"Log starting offset: {int(path.name.split('.')[0])}")
    data = path.read_bytes()
    end = min(len(data), opts.max_bytes)
    deep = opts.deep_iteration or print_data
    valid_bytes = 0
    last_offset = -1
    for pos, h in iter_headers(data, 0, end):
        valid = compute_crc(data, pos, h.size) == h.crc
        print(batch_line(h, pos, valid))
        if deep:
            try:
                _, records = decode_batch(data, pos)
            except CorruptRecordError as e:
                print(f"Cannot read the records of the batch at position {pos}: {e}", file=sys.stderr)
                records = []
            for r in records:
                if last_offset != -1 and r.offset != last_offset + 1:
                    non_consecutive.setdefault(str(path.resolve()), []).append((last_offset, r.offset))
                last_offset = r.offset
                print(record_line(h, r, opts, parser, print_data))
        valid_bytes += h.size
    trailing = len(data) - valid_bytes
    if trailing > 0 and opts.max_bytes == INT_MAX:
        print(f"Found {trailing} invalid bytes at the end of {path.name}")


# ---------------------------------------------------------------------------- indexes

def _base_offset(path: Path) -> int:
    return int(path.name.split(".")[0])


def _read_entries(path: Path, entry: struct.Struct) -> list[tuple[int, int]]:
    data = path.read_bytes()
    return [entry.unpack_from(data, i) for i in range(0, len(data) - len(data) % entry.size, entry.size)]


def _first_batch_at(log: bytes, position: int) -> BatchHeader | None:
    for _, h in iter_headers(log, position):
        return h
    return None


def _sanity_check_offset_index(path: Path, entries: list[tuple[int, int]]) -> None:
    size = path.stat().st_size
    if size % _OFFSET_ENTRY.size:
        raise CorruptRecordError(f"Index file {path.name} is corrupt, found {size} bytes which is neither "
                                 f"positive nor a multiple of {_OFFSET_ENTRY.size}.")
    base = _base_offset(path)
    if entries and base + entries[-1][0] < base:
        raise CorruptRecordError(f"Corrupt index found, index file ({path}) has non-zero size but the last offset "
                                 f"is {base + entries[-1][0]} which is less than the base offset {base}.")


def dump_index(path: Path, name: str, opts: argparse.Namespace, mismatches: dict[str, list[tuple[int, int]]]) -> None:
    base = _base_offset(path)
    entries = _read_entries(path, _OFFSET_ENTRY)
    if not entries:
        print(f"{name} is empty.")
        return
    if opts.index_sanity_check:
        _sanity_check_offset_index(path, entries)
        print(f"{name} passed sanity check.")
        return
    log_path = path.with_name(path.name.split(".")[0] + ".log")
    log = log_path.read_bytes() if log_path.exists() else None
    for i, (relative, position) in enumerate(entries):
        offset = base + relative
        if offset == base and i > 0:
            return  # the zero-filled tail of a preallocated index
        if log is not None:
            h = _first_batch_at(log, position)
            if h is not None and h.last_offset != offset:
                mismatches.setdefault(str(path.resolve()), []).append((offset, h.last_offset))
        if not opts.verify_index_only:
            print(f"offset: {offset} position: {position}")


class TimeIndexErrors:
    def __init__(self) -> None:
        self.mismatch: dict[str, list[tuple[int, int]]] = {}
        self.out_of_order: dict[str, list[tuple[int, int]]] = {}
        self.not_found: dict[str, list[tuple[int, int]]] = {}

    def print(self) -> None:
        for name, items in self.mismatch.items():
            print(f"Found timestamp mismatch in :{name}", file=sys.stderr)
            for a, b in items:
                print(f"  Index timestamp: {a}, log timestamp: {b}", file=sys.stderr)
        for name, items in self.out_of_order.items():
            print(f"Found out of order timestamp in :{name}", file=sys.stderr)
            for a, b in items:
                print(f"  Index timestamp: {a}, Previously indexed timestamp: {b}", file=sys.stderr)
        for items in self.not_found.values():
            print("The following indexed offsets are not found in the log.", file=sys.stderr)
            for a, b in items:
                print(f"Indexed offset: {a}, found log offset: {b}", file=sys.stderr)


def dump_time_index(path: Path, name: str, opts: argparse.Namespace, errs: TimeIndexErrors) -> None:
    base = _base_offset(path)
    entries = _read_entries(path, _TIME_ENTRY)
    if opts.index_sanity_check:
        size = path.stat().st_size
        if size % _TIME_ENTRY.size:
            raise CorruptRecordError(f"Time index file {path.name} is corrupt, found {size} bytes which is neither "
                                     f"positive nor a multiple of {_TIME_ENTRY.size}.")
        print(f"{name} passed sanity check.")
        return
    stem = path.name.split(".")[0]
    log_path = path.with_name(stem + ".log")
    log = log_path.read_bytes() if log_path.exists() else None
    index_path = path.with_name(stem + ".index")
    offset_entries = [(base + r, p) for r, p in _read_entries(index_path, _OFFSET_ENTRY)] if index_path.exists() else []
    key = str(path.resolve())
    prev_ts = -1
    for i, (timestamp, relative) in enumerate(entries):
        offset = base + relative
        if offset == base and i > 0:
            return
        if log is not None:
            _check_time_entry(log, offset_entries, timestamp, offset, prev_ts, key, errs)
        if not opts.verify_index_only:
            print(f"timestamp: {timestamp} offset: {offset}")
        prev_ts = timestamp


def _check_time_entry(log: bytes, offset_entries: list[tuple[int, int]], timestamp: int, offset: int,
                      prev_ts: int, key: str, errs: TimeIndexErrors) -> None:
    position = 0
    for o, p in offset_entries:
        if o > offset:
            break
        position = p
    for pos, h in iter_headers(log, position):
        if h.last_offset < offset:
            continue
        if h.last_offset != offset:
            errs.not_found.setdefault(key, []).append((offset, h.last_offset))
            return
        try:
            _, records = decode_batch(log, pos)
            max_ts = max((r.timestamp for r in records), default=-1)
        except CorruptRecordError:
            max_ts = h.max_timestamp
        if max_ts != timestamp:
            errs.mismatch.setdefault(key, []).append((timestamp, max_ts))
        if prev_ts >= timestamp:
            errs.out_of_order.setdefault(key, []).append((timestamp, prev_ts))
        return
    errs.not_found.setdefault(key, []).append((offset, -1))


def dump_txn_index(path: Path) -> None:
    data = path.read_bytes()
    for i in range(0, len(data) - len(data) % _TXN_ENTRY.size, _TXN_ENTRY.size):
        version, pid, first, last, lso = _TXN_ENTRY.unpack_from(data, i)
        print(f"version: {version} producerId: {pid} firstOffset: {first} lastOffset: {last} lastStableOffset: {lso}")


def dump_producer_snapshot(path: Path) -> None:
    from samsa.storage.producer_state import ProducerStateManager, SnapshotError
    try:
        producers = ProducerStateManager.decode(path.read_bytes())
    except SnapshotError as e:
        print(f"{path}: {e}", file=sys.stderr)
        return
    for pid, entry in producers.items():
        line = (f"producerId: {pid} producerEpoch: {entry.epoch} coordinatorEpoch: -1 currentTxnFirstOffset: OptionalLong.empty "
                f"lastTimestamp: {entry.last_timestamp} ")
        if entry.batches:
            b = entry.batches[-1]
            line += (f"firstSequence: {b.first_seq} lastSequence: {b.last_seq} lastOffset: {b.last_offset} "
                     f"offsetDelta: {b.last_offset - b.first_offset} timestamp: {b.timestamp}")
        print(line)


# ---------------------------------------------------------------------------- main

def main(argv: list[str] | None = None) -> int:
    return run_tool(argv, build_parser(), _tool, description=DESCRIPTION)


def _tool(opts: argparse.Namespace) -> int:
    if not opts.files:
        raise UsageError('Missing required argument "[files]"')
    if opts.remote_log_metadata_decoder:
        raise UsageError("--remote-log-metadata-decoder is not supported by Samsa")
    if opts.cluster_metadata_decoder:
        record_parser: PayloadDecoder = cluster_metadata_parser
    elif opts.offsets_decoder:
        record_parser: PayloadDecoder = offsets_parser
    elif opts.transaction_log_decoder:
        record_parser = transaction_log_parser
    elif opts.share_group_state_decoder:
        record_parser = share_state_parser
    else:
        record_parser = plain_parser(opts.key_decoder_class, opts.value_decoder_class)
    print_data = bool(opts.print_data_log or opts.offsets_decoder or opts.transaction_log_decoder
                      or opts.cluster_metadata_decoder
                      or opts.share_group_state_decoder
                      or opts.key_decoder_class
                      or opts.value_decoder_class)
    mismatches: dict[str, list[tuple[int, int]]] = {}
    non_consecutive: dict[str, list[tuple[int, int]]] = {}
    time_errors = TimeIndexErrors()
    status = 0
    for name in opts.files.split(","):
        path = Path(name)
        print(f"Dumping {name}")
        suffix = path.suffix
        try:
            if suffix == ".log":
                dump_log(path, opts, record_parser, print_data, non_consecutive)
            elif suffix == ".index":
                dump_index(path, name, opts, mismatches)
            elif suffix == ".timeindex":
                dump_time_index(path, name, opts, time_errors)
            elif suffix == ".txnindex":
                dump_txn_index(path)
            elif suffix == ".checkpoint":
                dump_log(path, opts, record_parser, print_data, non_consecutive, snapshot=True)
            elif suffix == ".snapshot":
                dump_producer_snapshot(path)
            else:
                print(f"Ignoring unknown file {name}", file=sys.stderr)
        except OSError as e:
            print(f"Cannot read {name}: {e.strerror or e}", file=sys.stderr)
            status = 1
        except (ValueError, KafkaError) as e:  # a file name without an offset, a corrupt index
            print(f"Cannot dump {name}: {e}", file=sys.stderr)
            status = 1
    for file, items in mismatches.items():
        print(f"Mismatches in :{file}", file=sys.stderr)
        for index_offset, log_offset in items:
            print(f"  Index offset: {index_offset}, log offset: {log_offset}", file=sys.stderr)
    time_errors.print()
    for file, pairs in non_consecutive.items():
        print(f"Non-consecutive offsets in {file}", file=sys.stderr)
        for first, second in pairs:
            print(f"  {first} is followed by {second}", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
