"""PostgreSQL's streaming replication protocol and the ``pgoutput`` logical decoding messages.

A replication connection (``replication=database``) takes simple-query commands
(``CREATE_REPLICATION_SLOT``, ``START_REPLICATION``) and then streams CopyData messages:
``w`` XLogData (start LSN, end LSN, send time, one pgoutput message) and ``k`` keepalives;
the client answers with ``r`` standby status updates whose *flush* position is the slot's
``confirmed_flush_lsn`` (the server never resends a transaction committed before it).
psycopg 3 has no replication API, so this speaks it over psycopg's libpq binding (``psycopg.pq``).
"""

from __future__ import annotations

import select
import struct
import time
from dataclasses import dataclass, field
from typing import Any

# PostgreSQL's epoch (2000-01-01) in microseconds after the Unix epoch
PG_EPOCH_US = 946_684_800_000_000


def lsn_str(lsn: int) -> str:
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def parse_lsn(text: str) -> int:
    hi, _, lo = text.partition("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def now_pg_us() -> int:
    return int(time.time() * 1_000_000) - PG_EPOCH_US


@dataclass
class Column:
    name: str
    type_oid: int
    type_mod: int
    key: bool


@dataclass
class Relation:
    relid: int
    schema: str
    table: str
    replica_identity: str
    columns: list[Column]


# Decoded messages. A tuple is a list of (kind, text) per column: kind 'n' null, 'u' unchanged TOAST, 't' text.
Tuple = list[tuple[str, str | None]]


@dataclass
class Begin:
    final_lsn: int      # the LSN of the transaction's commit record
    commit_ts: int      # microseconds after the Unix epoch
    xid: int


@dataclass
class Commit:
    commit_lsn: int
    end_lsn: int        # the end of the commit record: what the client confirms once it has the transaction
    commit_ts: int


@dataclass
class Change:
    op: str             # "c", "u", "d"
    relid: int
    new: Tuple | None = None
    old: Tuple | None = None
    old_is_key: bool = False


@dataclass
class Other:
    kind: str
    data: bytes = field(default=b"", repr=False)


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def take(self, fmt: str) -> Any:
        values = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return values[0] if len(values) == 1 else values

    def cstring(self) -> str:
        end = self.data.index(b"\0", self.pos)
        s = self.data[self.pos:end].decode()
        self.pos = end + 1
        return s

    def tuple(self) -> Tuple:
        out: Tuple = []
        for _ in range(self.take(">h")):
            kind = chr(self.data[self.pos])
            self.pos += 1
            if kind in ("t", "b"):
                n = self.take(">i")
                out.append(("t", self.data[self.pos:self.pos + n].decode()))
                self.pos += n
            else:
                out.append((kind, None))
        return out


def decode(message: bytes) -> Begin | Commit | Relation | Change | Other:
    """One pgoutput message (protocol version 1)."""
    r = _Reader(message)
    kind = chr(r.take("B"))
    if kind == "B":
        final_lsn, ts, xid = r.take(">QqI")
        return Begin(final_lsn, ts + PG_EPOCH_US, xid)
    if kind == "C":
        _flags, commit_lsn, end_lsn, ts = r.take(">BQQq")
        return Commit(commit_lsn, end_lsn, ts + PG_EPOCH_US)
    if kind == "R":
        relid = r.take(">I")
        schema, table = r.cstring(), r.cstring()
        identity = chr(r.take("B"))
        columns = []
        for _ in range(r.take(">h")):
            flags = r.take("B")
            name = r.cstring()
            oid, mod = r.take(">Ii")
            columns.append(Column(name, oid, mod, bool(flags & 1)))
        return Relation(relid, schema, table, identity, columns)
    if kind == "I":
        relid = r.take(">I")
        r.take("B")  # 'N'
        return Change("c", relid, new=r.tuple())
    if kind == "U":
        relid = r.take(">I")
        marker = chr(r.take("B"))
        old, is_key = None, False
        if marker in ("K", "O"):
            old, is_key = r.tuple(), marker == "K"
            r.take("B")  # 'N'
        return Change("u", relid, new=r.tuple(), old=old, old_is_key=is_key)
    if kind == "D":
        relid = r.take(">I")
        marker = chr(r.take("B"))
        return Change("d", relid, old=r.tuple(), old_is_key=marker == "K")
    return Other(kind, message)


@dataclass
class XLogData:
    start: int
    end: int
    payload: bytes


class ReplicationConnection:
    """A ``replication=database`` connection: slot commands, then the CopyBoth stream."""

    def __init__(self, conninfo: str):
        from psycopg import pq
        self.pq = pq
        self.conn = pq.PGconn.connect(f"{conninfo} replication=database".encode())
        if self.conn.status != pq.ConnStatus.OK:
            raise ConnectionError(f"replication connection failed: {self.conn.error_message.decode(errors='replace')}")
        self.flushed = 0
        self.streaming = False

    def command(self, sql: str) -> list[tuple[str | None, ...]]:
        """A replication command (simple query); its rows as text."""
        res = self.conn.exec_(sql.encode())
        if res.status not in (self.pq.ExecStatus.TUPLES_OK, self.pq.ExecStatus.COMMAND_OK):
            raise RuntimeError(f"{sql}: {res.error_message.decode(errors='replace').strip()}")
        return [tuple(None if (v := res.get_value(i, j)) is None else bytes(v).decode()
                      for j in range(res.nfields)) for i in range(res.ntuples)]

    def start(self, slot: str, publication: str, lsn: int = 0) -> None:
        res = self.conn.exec_(f"START_REPLICATION SLOT \"{slot}\" LOGICAL {lsn_str(lsn)} (proto_version '1', "
                              f"publication_names '{publication}')".encode())
        if res.status != self.pq.ExecStatus.COPY_BOTH:
            raise RuntimeError(f"START_REPLICATION: {res.error_message.decode(errors='replace').strip()}")
        self.conn.nonblocking = 1
        self.streaming = True

    def read(self, timeout: float) -> XLogData | None:
        """The next XLogData, or None after ``timeout`` (keepalives are answered on the way)."""
        deadline = time.monotonic() + timeout
        while True:
            n, data = self.conn.get_copy_data(1)
            if n == 0:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                select.select([self.conn.socket], [], [], left)
                self.conn.consume_input()
                continue
            if n < 0:
                res = self.conn.get_result()
                msg = res.error_message.decode(errors="replace").strip() if res is not None else ""
                raise ConnectionError(f"replication stream ended: {msg or self.conn.error_message.decode()}")
            raw = bytes(data)
            if raw[:1] == b"w":
                start, end, _ts = struct.unpack_from(">QQq", raw, 1)
                return XLogData(start, end, raw[25:])
            if raw[:1] == b"k":
                _end, _ts, reply = struct.unpack_from(">QqB", raw, 1)
                if reply:
                    self.feedback()

    def feedback(self, flushed: int | None = None) -> None:
        """A standby status update: ``flushed`` becomes the slot's confirmed flush LSN."""
        if flushed is not None:
            self.flushed = max(self.flushed, flushed)
        if not self.streaming:
            return
        self.conn.put_copy_data(struct.pack(">cQQQqB", b"r", self.flushed, self.flushed, self.flushed,
                                            now_pg_us(), 0))
        while self.conn.flush() == 1:
            select.select([], [self.conn.socket], [], 1)

    def close(self) -> None:
        try:
            self.conn.finish()
        except Exception:  # noqa: BLE001
            pass
