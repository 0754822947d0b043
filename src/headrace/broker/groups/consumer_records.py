"""KIP-848 consumer group state as ``__consumer_offsets`` records, in Kafka's layouts.

Pure codec, no I/O. Keys are Kafka's (an int16 record type, then non-flexible strings);
values are version 0 of Kafka's flexible value schemas (compact strings and arrays,
an empty tagged-field section per struct):

* 3 ConsumerGroupMetadata (group): the group epoch;
* 4 ConsumerGroupPartitionMetadata (group): every subscribed topic's id, name and
  partition count as of the last group epoch bump (racks: none);
* 5 ConsumerGroupMemberMetadata (group, member): instance and rack id, client id and
  host, subscribed topic names and regex, rebalance timeout, server assignor;
* 6 ConsumerGroupTargetAssignmentMetadata (group): the assignment epoch;
* 7 ConsumerGroupTargetAssignmentMember (group, member): the member's target;
* 8 ConsumerGroupCurrentMemberAssignment (group, member): member epoch, previous epoch,
  reconciliation state, assigned partitions and partitions pending revocation.

``encode_group`` gives every record of a group's state; ``decode_group`` rebuilds the
state from the latest value of each key. Deadlines (session, revocation) are not stored:
the coordinator restarts them when it loads a group, as Kafka does. What a member got at
which epoch (KIP-1251) is not stored either: after a load, every owned partition counts as
got at the member's current epoch (a commit with an older epoch is then refused).
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from headrace.broker.groups.assignors import MemberAssignment
from headrace.broker.groups.consumer_group import ConsumerGroup, ConsumerMember, MemberState
from headrace.protocol.request_header import encode_uvarint

GROUP_METADATA, PARTITION_METADATA, MEMBER_METADATA = 3, 4, 5
TARGET_METADATA, TARGET_MEMBER, CURRENT_MEMBER = 6, 7, 8
RECORD_TYPES = frozenset(range(GROUP_METADATA, CURRENT_MEMBER + 1))
_STATES = {MemberState.STABLE: 0, MemberState.UNREVOKED_PARTITIONS: 1,
           MemberState.UNRELEASED_PARTITIONS: 2}
_BY_CODE = {code: state for state, code in _STATES.items()}


class RecordError(ValueError):
    """A record that is not a well-formed KIP-848 group record."""


@dataclass(frozen=True, slots=True)
class Key:
    record_type: int
    group_id: str
    member_id: str | None = None


# --- encoding ----------------------------------------------------------------------------


def _string(s: str) -> bytes:
    raw = s.encode()
    return struct.pack(">h", len(raw)) + raw


def encode_key(key: Key) -> bytes:
    out = struct.pack(">h", key.record_type) + _string(key.group_id)
    return out + (_string(key.member_id) if key.member_id is not None else b"")


def _cstring(s: str | None) -> bytes:
    if s is None:
        return b"\x00"
    raw = s.encode()
    return encode_uvarint(len(raw) + 1) + raw


def _carray(items: list[bytes]) -> bytes:
    return encode_uvarint(len(items) + 1) + b"".join(items)


_TAGS = b"\x00"  # no tagged fields
_VERSION = struct.pack(">h", 0)


def _partitions(assignment: MemberAssignment) -> bytes:
    return _carray([tid.bytes + _carray([struct.pack(">i", p) for p in sorted(ps)]) + _TAGS
                    for tid, ps in sorted(assignment.items())])


def encode_group(group: ConsumerGroup, topic_names: Mapping[uuid.UUID, str],
                 members: Iterable[ConsumerMember] | None = None) -> dict[bytes, bytes]:
    """Key -> value of the group's records: the group-level ones, and those of
    ``members`` (default: every member)."""
    gid = group.group_id
    out = {
        encode_key(Key(GROUP_METADATA, gid)):
            _VERSION + struct.pack(">i", group.group_epoch) + _TAGS,
        encode_key(Key(PARTITION_METADATA, gid)): _VERSION + _carray([
            tid.bytes + _cstring(topic_names.get(tid, "")) + struct.pack(">i", n)
            + _carray([]) + _TAGS for tid, n in sorted(group.subscribed.items())]) + _TAGS,
        encode_key(Key(TARGET_METADATA, gid)):
            _VERSION + struct.pack(">i", group.assignment_epoch) + _TAGS,
    }
    for m in group.members.values() if members is None else members:
        out[encode_key(Key(MEMBER_METADATA, gid, m.member_id))] = (
            _VERSION + _cstring(m.instance_id) + _cstring(m.rack_id) + _cstring(m.client_id)
            + _cstring(m.client_host)
            + _carray([_cstring(t) for t in m.subscribed_topic_names])
            + _cstring(m.subscribed_topic_regex) + struct.pack(">i", m.rebalance_timeout_ms)
            + _cstring(m.server_assignor) + _TAGS)
        out[encode_key(Key(TARGET_MEMBER, gid, m.member_id))] = (
            _VERSION + _partitions(group.target.get(m.member_id, {})) + _TAGS)
        out[encode_key(Key(CURRENT_MEMBER, gid, m.member_id))] = (
            _VERSION + struct.pack(">iib", m.member_epoch, m.previous_member_epoch,
                                   _STATES[m.state])
            + _partitions(m.assigned) + _partitions(m.pending_revocation) + _TAGS)
    return out


# --- decoding ----------------------------------------------------------------------------


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, fmt: str) -> int:
        try:
            (value,) = struct.unpack_from(fmt, self.data, self.pos)
        except struct.error as e:
            raise RecordError(str(e)) from e
        self.pos += struct.calcsize(fmt)
        return int(value)

    def raw(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise RecordError("truncated record")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def string(self) -> str:
        return self._decode(self.raw(self.take(">h")))

    def uvarint(self) -> int:
        shift = result = 0
        while True:
            b = self.take(">B")
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 35:
                raise RecordError("varint too long")

    def cstring(self) -> str | None:
        n = self.uvarint()
        return None if n == 0 else self._decode(self.raw(n - 1))

    def count(self) -> int:
        n = self.uvarint()
        if n == 0:
            raise RecordError("null array")
        return n - 1

    def tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.raw(self.uvarint())

    @staticmethod
    def _decode(raw: bytes) -> str:
        try:
            return raw.decode()
        except UnicodeDecodeError as e:
            raise RecordError(str(e)) from e


def decode_key(data: bytes) -> Key | None:
    """The key of a KIP-848 group record; None for other record types. Raises
    ``RecordError`` for a malformed one."""
    r = _Reader(data)
    record_type = r.take(">h")
    if record_type not in RECORD_TYPES:
        return None
    group_id = r.string()
    member = r.string() if record_type in (MEMBER_METADATA, TARGET_MEMBER, CURRENT_MEMBER) else None
    return Key(record_type, group_id, member)


def _value(data: bytes) -> _Reader:
    r = _Reader(data)
    if r.take(">h") != 0:
        raise RecordError("unknown value version")
    return r


def _read_partitions(r: _Reader) -> MemberAssignment:
    out: dict[uuid.UUID, frozenset[int]] = {}
    for _ in range(r.count()):
        tid = uuid.UUID(bytes=r.raw(16))
        out[tid] = frozenset(r.take(">i") for _ in range(r.count()))
        r.tags()
    return {t: ps for t, ps in out.items() if ps}


def decode_records(group_id: str, records: Mapping[bytes, bytes]) -> ConsumerGroup:
    """``decode_group`` from raw keys (other record types are ignored)."""
    keyed = {}
    for raw, value in records.items():
        key = decode_key(raw)
        if key is not None:
            keyed[key] = value
    return decode_group(group_id, keyed)


def changes(old: Mapping[bytes, bytes], new: Mapping[bytes, bytes],
            complete: bool) -> list[tuple[bytes, bytes | None]]:
    """The records to write to go from ``old`` to ``new``: the keys whose value differs
    and, when ``new`` is the ``complete`` state, tombstones for the keys gone."""
    out: list[tuple[bytes, bytes | None]] = [(k, v) for k, v in new.items() if old.get(k) != v]
    if complete:
        out += [(k, None) for k in old if k not in new]
    return out


def decode_group(group_id: str, records: Mapping[Key, bytes]) -> ConsumerGroup:
    """Rebuild a group from the latest value of each of its keys. Raises ``RecordError``."""
    group = ConsumerGroup(group_id)
    # A member is one with metadata; other member records alone are left over.
    members = {key.member_id: ConsumerMember(key.member_id, None, None, "", "", -1)
               for key in records
               if key.record_type == MEMBER_METADATA and key.member_id is not None}
    for key, value in sorted(records.items(), key=lambda kv: kv[0].record_type):
        r = _value(value)
        if key.record_type == GROUP_METADATA:
            group.group_epoch = r.take(">i")
        elif key.record_type == PARTITION_METADATA:
            for _ in range(r.count()):
                tid = uuid.UUID(bytes=r.raw(16))
                r.cstring()
                group.subscribed[tid] = r.take(">i")
                for _ in range(r.count()):  # racks per partition: not used
                    r.take(">i")
                    for _ in range(r.count()):
                        r.cstring()
                    r.tags()
                r.tags()
        elif key.record_type == TARGET_METADATA:
            group.assignment_epoch = r.take(">i")
        elif key.member_id in members:
            assert key.member_id is not None
            _decode_member(group, members[key.member_id], key.record_type, r)
    for m in members.values():
        group.members[m.member_id] = m
        if m.instance_id is not None:
            group.static_members[m.instance_id] = m.member_id
        got = m.member_epoch if m.member_epoch >= 0 else m.previous_member_epoch
        m.partition_epochs = {(t, p): got for t, ps in m.owned().items() for p in ps}
    return group


def _decode_member(group: ConsumerGroup, m: ConsumerMember, record_type: int,
                   r: _Reader) -> None:
    if record_type == MEMBER_METADATA:
        m.instance_id, m.rack_id = r.cstring(), r.cstring()
        m.client_id, m.client_host = r.cstring() or "", r.cstring() or ""
        m.subscribed_topic_names = tuple(sorted(
            name for name in (r.cstring() for _ in range(r.count())) if name is not None))
        m.subscribed_topic_regex = r.cstring()
        m.rebalance_timeout_ms = r.take(">i")
        m.server_assignor = r.cstring()
    elif record_type == TARGET_MEMBER:
        group.target[m.member_id] = _read_partitions(r)
    elif record_type == CURRENT_MEMBER:
        m.member_epoch, m.previous_member_epoch = r.take(">i"), r.take(">i")
        state = _BY_CODE.get(r.take(">b"))
        if state is None:
            raise RecordError("unknown member state")
        m.state = state
        m.assigned = _read_partitions(r)
        m.pending_revocation = _read_partitions(r)
