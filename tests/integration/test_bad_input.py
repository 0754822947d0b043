"""Bad input against a live broker: each gets its Kafka error code or a clean close of
that one connection, and the broker keeps serving everyone else."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest
from kafka.protocol.producer import ProduceRequest

from headrace.protocol.errors import ErrorCode
from headrace.protocol.records import build_batch
from headrace.testing import EmbeddedBroker
from tests.integration.rawclient import RawClient


def healthy(bootstrap: str) -> bool:
    """A fresh connection gets a Metadata answer."""
    with RawClient(bootstrap) as c:
        r = c.request(MetadataRequest(topics=None, allow_auto_topic_creation=False), 12)
        return len(r.brokers) == 1


def produce(c: RawClient, topic: str, records: bytes, version: int = 9, acks: int = -1) -> int:
    P = ProduceRequest
    req = P(transactional_id=None, acks=acks, timeout_ms=5000, topic_data=[
        P.TopicProduceData(name=topic, partition_data=[
            P.TopicProduceData.PartitionProduceData(index=0, records=records)])])
    resp = c.request(req, version)
    return int(resp.responses[0].partition_responses[0].error_code)


def frame(api_key: int, version: int, body: bytes, correlation_id: int = 7) -> bytes:
    header = struct.pack(">hhih", api_key, version, correlation_id, 4) + b"test"
    return struct.pack(">i", len(header) + len(body)) + header + body


@pytest.fixture(scope="module")
def strict_broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(extra_args=["--no-auto-create-topics"]) as b:
        yield b


def test_garbage_frame_closes_only_that_connection(broker: EmbeddedBroker) -> None:
    with RawClient(broker.bootstrap_servers) as bystander:
        with RawClient(broker.bootstrap_servers) as bad:
            bad.send_raw(struct.pack(">i", 12) + b"\xff" * 12)
            assert bad.is_closed_by_peer()
        r = bystander.request(MetadataRequest(topics=None), 12)
        assert r.brokers[0].node_id == 0


def test_oversize_frame_is_refused(broker: EmbeddedBroker) -> None:
    with RawClient(broker.bootstrap_servers) as bad:
        bad.send_raw(struct.pack(">i", 2**31 - 1) + b"\x00" * 64)
        assert bad.is_closed_by_peer()
    with RawClient(broker.bootstrap_servers) as bad:
        bad.send_raw(struct.pack(">i", -5))
        assert bad.is_closed_by_peer()
    assert healthy(broker.bootstrap_servers)


def test_unknown_api_key_closes_connection(broker: EmbeddedBroker) -> None:
    with RawClient(broker.bootstrap_servers) as bad:
        bad.send_raw(frame(999, 0, b""))
        assert bad.is_closed_by_peer()
    assert healthy(broker.bootstrap_servers)


def test_api_versions_above_ours_answers_unsupported_version(broker: EmbeddedBroker) -> None:
    with RawClient(broker.bootstrap_servers) as c:
        c.send_raw(frame(18, 99, b"\x00" * 8))
        raw = c.read_frame()
        assert raw is not None
        (correlation_id, error_code) = struct.unpack_from(">ih", raw, 0)
        assert correlation_id == 7
        assert error_code == ErrorCode.UNSUPPORTED_VERSION
        # The table follows in v0 layout, so the client can retry with what we serve.
        (count,) = struct.unpack_from(">i", raw, 6)
        keys = {struct.unpack_from(">hhh", raw, 10 + 6 * i) for i in range(count)}
        assert (18, 0, 4) in keys
        # The connection stays usable.
        r = c.request(ApiVersionsRequest(), 0)
        assert r.error_code == 0


def test_unservable_version_of_other_api_closes(broker: EmbeddedBroker) -> None:
    with RawClient(broker.bootstrap_servers) as bad:
        bad.send_raw(frame(3, 99, b""))
        assert bad.is_closed_by_peer()
    assert healthy(broker.bootstrap_servers)


def test_bad_crc_gets_corrupt_message_and_nothing_is_stored(
    broker: EmbeddedBroker, topic_name: str
) -> None:
    good = build_batch([(b"k", b"v")], timestamp_ms=1)
    bad = bytearray(good)
    bad[-1] ^= 0xFF
    with RawClient(broker.bootstrap_servers) as c:
        assert produce(c, topic_name, bytes(bad)) == ErrorCode.CORRUPT_MESSAGE
        assert produce(c, topic_name, good) == ErrorCode.NONE
        # A set mixing a good and a bad batch is rejected whole.
        assert produce(c, topic_name, good + bytes(bad)) == ErrorCode.CORRUPT_MESSAGE
        assert produce(c, topic_name, good) == ErrorCode.NONE
        P = ProduceRequest
        resp = c.request(P(transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[
            P.TopicProduceData(name=topic_name, partition_data=[
                P.TopicProduceData.PartitionProduceData(index=0, records=good)])]), 9)
        # Offsets 0 and 1 went to the two good batches: nothing of the bad ones stored.
        assert resp.responses[0].partition_responses[0].base_offset == 2


def test_legacy_magic_gets_invalid_record(
    broker: EmbeddedBroker, topic_name: str
) -> None:
    legacy = bytearray(build_batch([(b"k", b"v")]))
    legacy[16] = 1  # magic byte
    with RawClient(broker.bootstrap_servers) as c:
        assert produce(c, topic_name, bytes(legacy)) == ErrorCode.INVALID_RECORD


def test_truncated_record_set_is_rejected(broker: EmbeddedBroker, topic_name: str) -> None:
    good = build_batch([(b"k", b"v" * 100)])
    with RawClient(broker.bootstrap_servers) as c:
        assert produce(c, topic_name, good[:-10]) == ErrorCode.CORRUPT_MESSAGE


def test_invalid_acks(broker: EmbeddedBroker, topic_name: str) -> None:
    with RawClient(broker.bootstrap_servers) as c:
        code = produce(c, topic_name, build_batch([(None, b"v")]), acks=5)
        assert code == ErrorCode.INVALID_REQUIRED_ACKS


def test_unknown_topic_with_auto_create_off(strict_broker: EmbeddedBroker) -> None:
    with RawClient(strict_broker.bootstrap_servers) as c:
        code = produce(c, "no-such-topic", build_batch([(None, b"v")]))
        assert code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        r = c.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(
            name="no-such-topic")], allow_auto_topic_creation=True), 12)
        assert r.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_invalid_topic_name(broker: EmbeddedBroker) -> None:
    with RawClient(broker.bootstrap_servers) as c:
        assert produce(c, "bad/name", build_batch([(None, b"v")])) == (
            ErrorCode.INVALID_TOPIC_EXCEPTION)


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    api_key=st.sampled_from([0, 1, 2, 3, 18, 19, 20, 22, 23, 32, 33, 37, 44, 60]),
    version=st.integers(min_value=-2, max_value=20),
    body=st.binary(max_size=300),
)
def test_fuzzed_requests_never_take_the_broker_down(
    strict_broker: EmbeddedBroker, api_key: int, version: int, body: bytes
) -> None:
    """Arbitrary bodies behind valid headers: an answer or a close, never a dead broker."""
    with RawClient(strict_broker.bootstrap_servers, timeout=5.0) as c:
        c.send_raw(frame(api_key, version, body))
        c.read_frame()  # an answer or None (closed): both are fine
    assert healthy(strict_broker.bootstrap_servers)


def test_client_gone_before_its_responses_is_not_an_error() -> None:
    """A client that sends requests and disconnects before reading the answers is normal
    traffic: nothing at ERROR, no traceback, and the broker keeps serving."""
    metadata = MetadataRequest(topics=None, allow_auto_topic_creation=False)
    metadata.with_header(correlation_id=1, client_id="gone")
    many = bytes(metadata.encode(version=12, header=True, framed=True)) * 200
    with EmbeddedBroker() as b:
        host, port = b.bootstrap_servers.rsplit(":", 1)
        for i in range(20):
            with socket.create_connection((host, int(port))) as s:
                s.sendall(many)
                if i % 2:  # a reset rather than an orderly close
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        assert healthy(b.bootstrap_servers)
        # The answer above went out after every earlier connection's writes had failed.
        time.sleep(0.5)
        noisy = [line for line in b.output_lines() if "ERROR" in line or "Traceback" in line]
        assert noisy == []
