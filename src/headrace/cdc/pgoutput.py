"""PostgreSQL's ``pgoutput`` logical replication messages (protocol version 1), decoded.

Pure: bytes in, frozen dataclasses out. Values stay in PostgreSQL's text format (as
pgoutput sends them); ``values.py`` converts them by type. Unchanged TOAST values are
``UNCHANGED_TOAST``; NULLs are None.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from headrace.cdc.errors import DecodeError


class _Unchanged:
    """An unchanged TOASTed value (pgoutput's 'u'): not sent, not known."""

    def __repr__(self) -> str:
        return "UNCHANGED_TOAST"


UNCHANGED_TOAST = _Unchanged()
Value = str | None | _Unchanged
PG_EPOCH_US = 946_684_800_000_000  # 2000-01-01 in microseconds since 1970


@dataclass(frozen=True)
class Column:
    name: str
    type_oid: int
    type_modifier: int
    is_key: bool


@dataclass(frozen=True)
class Relation:
    oid: int
    namespace: str
    name: str
    replica_identity: str  # d(efault), n(othing), f(ull), i(ndex)
    columns: tuple[Column, ...]


@dataclass(frozen=True)
class Begin:
    final_lsn: int
    commit_ts_us: int  # since 1970
    xid: int


@dataclass(frozen=True)
class Commit:
    commit_lsn: int
    end_lsn: int
    commit_ts_us: int


@dataclass(frozen=True)
class Insert:
    relation_oid: int
    new: tuple[Value, ...]


@dataclass(frozen=True)
class Update:
    relation_oid: int
    old: tuple[Value, ...] | None
    old_is_key_only: bool
    new: tuple[Value, ...]


@dataclass(frozen=True)
class Delete:
    relation_oid: int
    old: tuple[Value, ...]
    old_is_key_only: bool


@dataclass(frozen=True)
class Truncate:
    relation_oids: tuple[int, ...]


@dataclass(frozen=True)
class LogicalMessage:
    transactional: bool
    lsn: int
    prefix: str
    content: bytes


@dataclass(frozen=True)
class Ignored:
    kind: str


Message = (Begin | Commit | Relation | Insert | Update | Delete | Truncate | LogicalMessage
           | Ignored)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise DecodeError(f"pgoutput message truncated at byte {self.pos} (wanted {n})")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def int8(self) -> int:
        return int(self.take(1)[0])

    def int16(self) -> int:
        return int(struct.unpack(">h", self.take(2))[0])

    def int32(self) -> int:
        return int(struct.unpack(">i", self.take(4))[0])

    def uint32(self) -> int:
        return int(struct.unpack(">I", self.take(4))[0])

    def int64(self) -> int:
        return int(struct.unpack(">q", self.take(8))[0])

    def string(self) -> str:
        end = self.data.find(b"\0", self.pos)
        if end < 0:
            raise DecodeError("pgoutput string without its terminator")
        text = self.data[self.pos:end].decode()
        self.pos = end + 1
        return text

    def tuple(self) -> tuple[Value, ...]:
        values: list[Value] = []
        for _ in range(self.int16()):
            kind = chr(self.int8())
            if kind == "n":
                values.append(None)
            elif kind == "u":
                values.append(UNCHANGED_TOAST)
            elif kind == "t":
                values.append(self.take(self.int32()).decode())
            else:
                raise DecodeError(f"unknown tuple value kind {kind!r}")
        return tuple(values)


def decode(payload: bytes) -> Message:
    """One pgoutput message. Raises ``DecodeError`` on anything malformed."""
    if not payload:
        raise DecodeError("empty pgoutput message")
    r = _Reader(payload)
    kind = chr(r.int8())
    try:
        if kind == "B":
            return Begin(r.int64(), r.int64() + PG_EPOCH_US, r.uint32())
        if kind == "C":
            r.int8()
            return Commit(r.int64(), r.int64(), r.int64() + PG_EPOCH_US)
        if kind == "R":
            oid, namespace, name = r.uint32(), r.string(), r.string()
            identity = chr(r.int8())
            columns = []
            for _ in range(r.int16()):
                flags = r.int8()
                columns.append(Column(r.string(), r.uint32(), r.int32(), bool(flags & 1)))
            return Relation(oid, namespace, name, identity, tuple(columns))
        if kind == "I":
            oid = r.uint32()
            if chr(r.int8()) != "N":
                raise DecodeError("insert without a new tuple")
            return Insert(oid, r.tuple())
        if kind == "U":
            oid = r.uint32()
            marker = chr(r.int8())
            old = None
            key_only = False
            if marker in "KO":
                key_only = marker == "K"
                old = r.tuple()
                marker = chr(r.int8())
            if marker != "N":
                raise DecodeError("update without a new tuple")
            return Update(oid, old, key_only, r.tuple())
        if kind == "D":
            oid = r.uint32()
            marker = chr(r.int8())
            if marker not in "KO":
                raise DecodeError("delete without an old tuple")
            return Delete(oid, r.tuple(), marker == "K")
        if kind == "T":
            count = r.int32()
            r.int8()
            return Truncate(tuple(r.uint32() for _ in range(count)))
        if kind == "M":
            flags = r.int8()
            lsn, prefix = r.int64(), r.string()
            return LogicalMessage(bool(flags & 1), lsn, prefix, r.take(r.int32()))
    except (UnicodeDecodeError, ValueError) as e:
        raise DecodeError(f"malformed pgoutput {kind!r} message: {e}") from e
    if kind in "OY":
        return Ignored(kind)
    raise DecodeError(f"unknown pgoutput message kind {kind!r}")


def lsn_text(lsn: int) -> str:
    """An LSN as PostgreSQL prints it (``16/B374D848``)."""
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def parse_lsn(text: str) -> int:
    high, low = text.split("/")
    return (int(high, 16) << 32) | int(low, 16)
