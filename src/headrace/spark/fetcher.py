"""A blocking Fetch client for one partition: the raw path of ``format("headrace")``'s reader.

librdkafka hands every record to Python as an object (about 2.5 µs each here); this client
asks the partition leader for whole record batches with plain Kafka requests (kafka-python's
codec, generated from Kafka's message specs) and leaves their bytes to
``headrace.protocol.columnar``. It speaks the protocol any Kafka broker serves (Metadata v1,
Fetch v11, no fetch sessions) over PLAINTEXT only; the reader keeps librdkafka for every
other security protocol. One connection to the bootstrap broker for metadata, one to the
leader; a leader change or a lost connection is retried with fresh metadata until the
caller's deadline. Not thread-safe; blocks.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass
from typing import Any

from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest
from kafka.protocol.metadata import MetadataRequest

from headrace.spark.errors import SparkConnectorError

FETCH_VERSION = 11  # isolation level, log start offset, aborted transactions; not flexible
METADATA_VERSION = 1
LIST_OFFSETS_VERSION = 1
EARLIEST_TIMESTAMP = -2
_SIZE = struct.Struct(">i")
CLIENT_ID = "headrace-spark-reader"

# Errors after which fresh metadata (a new leader) may help.
RETRIABLE = {
    3,  # UNKNOWN_TOPIC_OR_PARTITION (a topic still being created)
    5,  # LEADER_NOT_AVAILABLE
    6,  # NOT_LEADER_OR_FOLLOWER
    13,  # NETWORK_EXCEPTION
    56,  # KAFKA_STORAGE_ERROR
    74,  # FENCED_LEADER_EPOCH
    75,  # UNKNOWN_LEADER_EPOCH
}
OFFSET_OUT_OF_RANGE = 1


@dataclass(frozen=True)
class Fetched:
    """One partition's part of a Fetch response."""

    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted: list[tuple[int, int]]  # (producer id, first offset)
    records: memoryview  # a view of the response frame


class _Connection:
    """One socket, requests in order, one at a time."""

    def __init__(self, host: str, port: int, timeout_s: float) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.correlation_id = 0

    def request(self, request: Any, version: int, timeout_s: float) -> Any:
        """Send ``request`` and decode its response with the codec."""
        frame = self.request_frame(request, version, timeout_s)
        return request.header.get_response_class().decode(frame, header=True)

    def request_frame(self, request: Any, version: int, timeout_s: float) -> bytearray:
        """Send ``request``; its response frame (header included), undecoded."""
        self.correlation_id += 1
        request.with_header(correlation_id=self.correlation_id, client_id=CLIENT_ID)
        self.sock.settimeout(timeout_s)
        self.sock.sendall(bytes(request.encode(version=version, header=True, framed=True)))
        (size,) = _SIZE.unpack(self._read(4))
        frame = self._read(size)
        if len(frame) < 4 or _SIZE.unpack_from(frame)[0] != self.correlation_id:
            raise ConnectionError("response out of order")
        return frame

    def _read(self, n: int) -> bytearray:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            k = self.sock.recv_into(view[got:], n - got)
            if k == 0:
                raise ConnectionError("the broker closed the connection")
            got += k
        return buf

    def close(self) -> None:
        self.sock.close()


class PartitionFetcher:
    """Fetches one topic partition from its leader. ``close()`` when done."""

    def __init__(self, bootstrap_servers: str, topic: str, partition: int,
                 read_committed: bool, timeout_s: float,
                 partition_max_bytes: int = 8 << 20) -> None:
        self.bootstrap = [_host_port(s) for s in bootstrap_servers.split(",") if s.strip()]
        self.topic = topic
        self.partition = partition
        self.read_committed = read_committed
        self.timeout_s = timeout_s
        self.partition_max_bytes = partition_max_bytes
        self._leader: _Connection | None = None

    def fetch(self, offset: int, max_wait_ms: int) -> Fetched:
        """One Fetch at ``offset``; waits up to ``max_wait_ms`` for a first byte. A
        connection or leadership problem raises ``ConnectionError`` after closing the
        connection (the next call looks the leader up again)."""
        request = FetchRequest(
            replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1,
            max_bytes=self.partition_max_bytes, isolation_level=int(self.read_committed),
            session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="",
            topics=[FetchRequest.FetchTopic(topic=self.topic, partitions=[
                FetchRequest.FetchTopic.FetchPartition(
                    partition=self.partition, current_leader_epoch=-1, fetch_offset=offset,
                    log_start_offset=-1, partition_max_bytes=self.partition_max_bytes)])])
        conn = self._leader_connection()
        try:
            frame = conn.request_frame(request, FETCH_VERSION,
                                       self.timeout_s + max_wait_ms / 1000)
            fetched = parse_fetch_response(frame)
        except (OSError, ValueError, struct.error) as e:
            self.close()
            raise ConnectionError(f"fetch from the leader failed: {e}") from e
        if fetched.error_code in RETRIABLE:
            self.close()
            raise ConnectionError(f"fetch error code {fetched.error_code}")
        return fetched

    def earliest(self) -> int:
        """The partition's log start offset (ListOffsets, timestamp -2)."""
        return self.list_offset(EARLIEST_TIMESTAMP)

    def list_offset(self, timestamp: int, version: int = LIST_OFFSETS_VERSION) -> int:
        """ListOffsets of one timestamp spec (-2 earliest, -5 latest tiered, ...) at the
        leader, in request ``version`` (a spec newer than v1 needs the version that
        carries it: v9 for -5)."""
        Topic = ListOffsetsRequest.ListOffsetsTopic
        request = ListOffsetsRequest(
            replica_id=-1, isolation_level=0, timeout_ms=int(self.timeout_s * 1000),
            topics=[Topic(name=self.topic, partitions=[Topic.ListOffsetsPartition(
                partition_index=self.partition, timestamp=timestamp,
                current_leader_epoch=-1)])])
        conn = self._leader_connection()
        try:
            response = conn.request(request, version, self.timeout_s)
        except (OSError, ValueError, struct.error) as e:
            self.close()
            raise ConnectionError(f"list offsets at the leader failed: {e}") from e
        part = response.topics[0].partitions[0]
        if part.error_code:
            self.close()
            raise ConnectionError(f"list offsets error code {part.error_code}")
        return int(part.offset)

    def _leader_connection(self) -> _Connection:
        if self._leader is None:
            host, port = self._find_leader()
            try:
                self._leader = _Connection(host, port, self.timeout_s)
            except OSError as e:
                raise ConnectionError(f"cannot connect to the leader {host}:{port}: {e}") from e
        return self._leader

    def _find_leader(self) -> tuple[str, int]:
        errors = []
        for host, port in self.bootstrap:
            try:
                conn = _Connection(host, port, self.timeout_s)
            except OSError as e:
                errors.append(f"{host}:{port}: {e}")
                continue
            try:
                meta = conn.request(MetadataRequest(topics=[
                    MetadataRequest.MetadataRequestTopic(name=self.topic)]),
                    METADATA_VERSION, self.timeout_s)
            except (OSError, ValueError, struct.error) as e:
                errors.append(f"{host}:{port}: {e}")
                continue
            finally:
                conn.close()
            return _leader_of(meta, self.topic, self.partition)
        raise ConnectionError("no bootstrap server answered: " + "; ".join(errors))

    def close(self) -> None:
        """Close the leader connection (idempotent)."""
        if self._leader is not None:
            self._leader.close()
            self._leader = None


_HEAD = struct.Struct(">iihi")  # correlation id, throttle time, error code, session id
_PARTITION = struct.Struct(">ihqqq")  # index, error code, high watermark, LSO, log start
_ABORTED = struct.Struct(">qq")


def parse_fetch_response(frame: bytearray) -> Fetched:
    """The one partition of a Fetch v11 response frame (header v0 included), parsed by
    hand so that its records stay a view of ``frame`` rather than a copy. Raises
    ``ValueError`` or ``struct.error`` on a malformed frame."""
    view = memoryview(frame)
    _cid, _throttle, error_code, _session = _HEAD.unpack_from(view, 0)
    if error_code:
        raise ConnectionError(f"fetch failed with error code {error_code}")
    pos = _HEAD.size
    (topics,) = _SIZE.unpack_from(view, pos)
    (name_length,) = struct.unpack_from(">h", view, pos + 4)
    pos += 6 + name_length
    (partitions,) = _SIZE.unpack_from(view, pos)
    if topics != 1 or partitions != 1:
        raise ValueError(f"expected one topic partition, got {topics} / {partitions}")
    _index, code, high, stable, start = _PARTITION.unpack_from(view, pos + 4)
    pos += 4 + _PARTITION.size
    (count,) = _SIZE.unpack_from(view, pos)
    pos += 4
    aborted = []
    for _ in range(max(count, 0)):
        aborted.append(_ABORTED.unpack_from(view, pos))
        pos += _ABORTED.size
    (size,) = _SIZE.unpack_from(view, pos + 4)  # after the preferred read replica
    pos += 8
    if size > len(view) - pos:
        raise ValueError("records run past the end of the response")
    records = view[pos:pos + max(size, 0)]
    return Fetched(code, high, stable, start, aborted, records)


def _leader_of(meta: Any, topic: str, partition: int) -> tuple[str, int]:
    brokers = {b.node_id: (b.host, b.port) for b in meta.brokers}
    for t in meta.topics:
        if t.name != topic:
            continue
        if t.error_code:
            raise ConnectionError(f"metadata of {topic}: error code {t.error_code}")
        for p in t.partitions:
            if p.partition_index == partition:
                if p.leader_id not in brokers:
                    raise ConnectionError(f"{topic}[{partition}] has no leader")
                return brokers[p.leader_id]
    raise ConnectionError(f"{topic}[{partition}] is not in the metadata")


def _host_port(server: str) -> tuple[str, int]:
    host, _, port = server.strip().rpartition(":")
    try:
        return host.strip("[]"), int(port)
    except ValueError as e:
        raise SparkConnectorError(f"bad bootstrap server {server!r}: expected HOST:PORT") from e

