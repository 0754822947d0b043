"""A raw Kafka-protocol peek at what the broker stores, independent of any client.

Used to prove that a producer really sent (and the broker kept verbatim) batches in the
codec under test: clients silently fall back to uncompressed batches in some cases
(librdkafka does when compression does not shrink a batch), which would make a
"compression" test pass without compressing anything. One blocking socket per call.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass
from typing import Any

from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.record.memory_records import MemoryRecords

from headrace.testing import scaled

FETCH_VERSION = 4  # non-flexible, v2 record batches, max_bytes honoured


@dataclass(frozen=True)
class StoredBatch:
    base_offset: int
    record_count: int
    compression_type: int  # 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd
    producer_id: int  # -1 unless an idempotent producer wrote the batch
    base_sequence: int


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise ConnectionError("broker closed the connection")
        buf += chunk
    return bytes(buf)


def round_trip(
    sock: socket.socket, request: Any, response_class: Any, version: int, correlation_id: int
) -> Any:
    """Send one non-flexible request on ``sock`` and decode its response. Blocks."""
    request.API_VERSION = version
    request.with_header(correlation_id=correlation_id, client_id="headrace-compat-wire")
    sock.sendall(request.encode(header=True, framed=True))
    (size,) = struct.unpack(">i", _recv_exactly(sock, 4))
    response = response_class.decode(_recv_exactly(sock, size), version=version, header=True)
    assert response.header.correlation_id == correlation_id
    return response


def stored_batches(
    bootstrap: str, topic: str, partition: int, timeout: float = 30.0
) -> list[StoredBatch]:
    """Every batch of ``topic``/``partition`` from offset 0 to the high watermark."""
    host, port = bootstrap.rsplit(":", 1)
    batches: list[StoredBatch] = []
    offset, high_watermark, correlation_id = 0, None, 0
    with socket.create_connection((host, int(port)), timeout=scaled(timeout)) as sock:
        while high_watermark is None or offset < high_watermark:
            correlation_id += 1
            request = FetchRequest(
                replica_id=-1,
                max_wait_ms=0,
                min_bytes=0,
                max_bytes=64 << 20,
                isolation_level=0,
                topics=[
                    FetchRequest.FetchTopic(
                        topic=topic,
                        partitions=[
                            FetchRequest.FetchTopic.FetchPartition(
                                partition=partition,
                                fetch_offset=offset,
                                partition_max_bytes=8 << 20,
                            )
                        ],
                    )
                ],
            )
            response = round_trip(sock, request, FetchResponse, FETCH_VERSION, correlation_id)
            (part,) = response.responses[0].partitions
            assert part.error_code == 0, f"fetch error code {part.error_code}"
            high_watermark = part.high_watermark
            records = MemoryRecords(bytes(part.records or b""))
            before = offset
            while records.has_next():
                batch = records.next_batch()
                batches.append(
                    StoredBatch(
                        batch.base_offset,
                        batch.next_offset - batch.base_offset,
                        batch.compression_type,
                        batch.producer_id,
                        batch.base_sequence,
                    )
                )
                offset = batch.next_offset
            if offset == before and offset < high_watermark:
                raise AssertionError(f"no progress fetching at offset {offset}")
    return batches


CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}

def assert_stored_codec(
    bootstrap: str,
    topic: str,
    partitions: range | list[int],
    codec: str,
) -> None:
    """Every stored batch of the partitions is in ``codec``: the producer compressed and
    the broker kept the batch verbatim."""
    allowed = {CODEC_IDS[codec]}
    for p in partitions:
        found = {b.compression_type for b in stored_batches(bootstrap, topic, p)}
        assert found and found <= allowed, (
            f"partition {p}: stored codecs {found}, wanted {codec} ({allowed})"
        )


def assert_idempotent_batches(bootstrap: str, topic: str, partitions: range | list[int]) -> None:
    """Each partition was written by one idempotent producer (a broker-assigned producer
    id) with sequence numbers from 0 and without gaps."""
    producer_ids: set[int] = set()
    for p in partitions:
        batches = stored_batches(bootstrap, topic, p)
        sequence = 0
        for b in batches:
            assert b.producer_id >= 0, f"partition {p}: batch without a producer id: {b}"
            assert b.base_sequence == sequence, f"partition {p}: sequence gap at {b}"
            sequence += b.record_count
            producer_ids.add(b.producer_id)
    assert len(producer_ids) == 1, f"several producer ids: {producer_ids}"
