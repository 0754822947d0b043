"""What the compat tests produce, and the one assertion that checks what came back.

Every client adapter (``tests/compat/clients.py``) produces ``Record``s and returns what
it consumed as ``Consumed``; ``assert_read_back`` then checks, per partition, the exact
keys, values, headers and timestamps, the production order, and offsets contiguous from
0. Records are unique, so each consumed record maps back to the one produced.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")

ONE_MB = 1_000_000
# Client-side limits raised above the 1 MB record (librdkafka message.max.bytes,
# kafka-python / aiokafka max_request_size); the broker accepts batches to 1,048,588 bytes
# (max.message.bytes).
CLIENT_MAX_BYTES = 2_000_000
BASE_TIMESTAMP_MS = 1_700_000_000_000

Header = tuple[str, bytes | None]


@dataclass(frozen=True)
class Record:
    """One record to produce. ``partition=None`` lets the client's partitioner choose."""

    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
    partition: int | None = None
    timestamp_ms: int | None = None

    @property
    def content(self) -> tuple[bytes | None, bytes | None, tuple[Header, ...]]:
        return self.key, self.value, self.headers


@dataclass(frozen=True)
class Consumed:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]
    timestamp_ms: int | None  # None when the client cannot report it (kcat -J reports it)

    @property
    def content(self) -> tuple[bytes | None, bytes | None, tuple[Header, ...]]:
        return self.key, self.value, self.headers


@dataclass(frozen=True)
class Delivered:
    """Where the producer was told a record landed (same order as the records produced)."""

    partition: int
    offset: int


def body(tag: str) -> bytes:
    """A compressible value (about 200 bytes), so batches of them really get compressed:
    clients send a batch uncompressed when compression would not shrink it."""
    return (f"{tag}|" + "the quick brown fox jumps over the lazy dog; " * 4).encode()


def big_value(seed: int = 1) -> bytes:
    """Exactly 1,000,000 printable bytes: half random hex (so a codec cannot cheat), half
    repeated text (so every codec, LZ4 included, shrinks it and keeps it compressed)."""
    noise = random.Random(seed).randbytes(ONE_MB // 4).hex().encode()
    text = body("filler") * (ONE_MB // 2 // len(body("filler")) + 1)
    value = noise + text[: ONE_MB - len(noise)]
    assert len(value) == ONE_MB
    return value


# Every record carries some compressible bytes (a body, or this header when its value is
# empty or null), so any batch a client cuts, even of one record, shrinks under every codec
# and is sent compressed: the stored-codec checks then cannot flake on batching.
PAD: Header = ("pad", b"padding " * 16)


def sample_records(
    partitions: int = 3, *, null_header_values: bool = True, timestamps: bool = True
) -> list[Record]:
    """Edge cases spread over ``partitions`` explicit partitions: keyed and null-key
    records, empty keys and values, tombstones, empty/None/duplicate/unicode headers,
    binary keys and values, explicit timestamps. ``null_header_values=False`` sends b""
    instead of None (for clients that refuse None)."""
    nullable: bytes | None = None if null_header_values else b""
    out: list[Record] = []
    for p in range(partitions):

        def ts(i: int, p: int = p) -> int | None:
            return BASE_TIMESTAMP_MS + 1000 * p + i if timestamps else None

        out += [
            Record(f"key-{p}-0".encode(), body(f"p{p}-0"), (("trace", b"abc"),), p, ts(0)),
            Record(None, body(f"p{p}-1 null key"), (), p, ts(1)),
            Record(f"key-{p}-2".encode(), b"", (("empty-value", b"yes"), PAD), p, ts(2)),
            Record(b"", body(f"p{p}-3 empty key"), (("h", b""),), p, ts(3)),
            Record(
                f"key-{p}-4".encode(),
                body(f"p{p}-4"),
                (("dup", b"1"), ("dup", b"2"), ("none", nullable), ("ключ", "välue".encode())),
                p,
                ts(4),
            ),
            Record(b"\x00\xffbinary-key", bytes(range(256)) + body(f"p{p}-5"), (), p, ts(5)),
            Record(f"key-{p}-6".encode(), None, (("tombstone", b"1"), PAD), p, ts(6)),
            Record(None, b"", (("partition", str(p).encode()), PAD), p, ts(7)),
        ]
    return out


TEXT_HEADERS: tuple[Header, ...] = (
    ("trace", b"abc"),
    ("empty", b""),
    ("none", None),
    ("dup", b"1"),
    ("dup", b"2"),
    ("ключ", "välue".encode()),
    PAD,
)


def text_records(partitions: int = 3, *, timestamps: bool = False) -> list[Record]:
    """Edge cases a text tool (kcat) can send and print: UTF-8, no newlines. Per
    partition, in runs sharing headers (kcat's ``-H`` applies to a whole run): keyed,
    null-key, empty-key and empty-value records; a null-key record and a tombstone;
    a record without headers."""
    out: list[Record] = []
    for p in range(partitions):

        def ts(i: int, p: int = p) -> int | None:
            return BASE_TIMESTAMP_MS + 1000 * p + i if timestamps else None

        out += [
            Record(f"key-{p}-0".encode(), body(f"p{p}-0"), TEXT_HEADERS, p, ts(0)),
            Record(None, body(f"p{p}-1 null key"), TEXT_HEADERS, p, ts(1)),
            Record(b"", body(f"p{p}-2 empty key"), TEXT_HEADERS, p, ts(2)),
            Record(f"key-{p}-3".encode(), b"", TEXT_HEADERS, p, ts(3)),
            Record(None, body(f"p{p}-4 null key"), (("tombstone", b"1"), PAD), p, ts(4)),
            Record(f"key-{p}-5".encode(), None, (("tombstone", b"1"), PAD), p, ts(5)),
            Record(f"key-{p}-6".encode(), body(f"p{p}-6 no headers"), (), p, ts(6)),
        ]
    return out


def without_null_header_values(records: Sequence[Record]) -> list[Record]:
    """The records with None header values replaced by b"" (for kafka-python)."""
    return [
        replace(r, headers=tuple((k, b"" if v is None else v) for k, v in r.headers))
        for r in records
    ]


def keyed_records(count: int, keys: int) -> list[Record]:
    """``count`` records over ``keys`` keys, no explicit partition (the partitioner
    spreads them); the value carries the sequence number so order is checkable."""
    return [
        Record(
            f"user-{i % keys}".encode(),
            f"seq-{i:05d}".encode() + body("")[:40],
            (("seq", str(i).encode()),),
        )
        for i in range(count)
    ]


def assert_read_back(
    produced: Sequence[Record],
    consumed: Sequence[Consumed],
    delivered: Sequence[Delivered] | None = None,
    *,
    check_timestamps: bool = True,
) -> None:
    """Exactly the produced records came back: per partition in production order at
    offsets 0..n-1, explicit partitions honoured, one key in one partition, and (when
    given) at the offsets the producer was told."""
    contents = [r.content for r in produced]
    assert len(set(contents)) == len(contents), "test bug: produced records must be unique"
    index = {c: i for i, c in enumerate(contents)}
    assert len(consumed) == len(produced), (
        f"consumed {len(consumed)} records, produced {len(produced)}"
    )
    by_partition: dict[int, list[Consumed]] = defaultdict(list)
    for c in consumed:
        assert c.content in index, f"consumed a record never produced: {c}"
        by_partition[c.partition].append(c)
    assert len({c.content for c in consumed}) == len(consumed), "a record came back twice"
    key_partition: dict[bytes, int] = {}
    for partition, got in by_partition.items():
        got.sort(key=lambda c: c.offset)
        assert [c.offset for c in got] == list(range(len(got))), (
            f"partition {partition}: offsets not contiguous from 0: {[c.offset for c in got]}"
        )
        order = [index[c.content] for c in got]
        assert order == sorted(order), f"partition {partition}: production order not kept"
        for c in got:
            record = produced[index[c.content]]
            if record.partition is not None:
                assert c.partition == record.partition, f"{record} landed in {c.partition}"
            elif record.key is not None:
                assert key_partition.setdefault(record.key, c.partition) == c.partition, (
                    f"key {record.key!r} found in two partitions"
                )
            if check_timestamps and record.timestamp_ms is not None:
                assert c.timestamp_ms == record.timestamp_ms, f"timestamp lost: {c}"
            if delivered is not None:
                d = delivered[index[c.content]]
                assert (d.partition, d.offset) == (c.partition, c.offset), (
                    f"delivery report {d} but consumed at {c.partition}/{c.offset}"
                )
