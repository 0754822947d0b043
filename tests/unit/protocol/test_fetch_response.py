"""Our hand-framed Fetch response equals kafka-python's generated codec, byte for byte."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.consumer import FetchResponse

from headrace.protocol.fetch_response import (
    FetchPartition,
    FetchTopic,
    encode_fetch_response,
)

_T = FetchResponse.FetchableTopicResponse
_P = _T.PartitionData

i64 = st.integers(min_value=-1, max_value=2**40)
partitions = st.builds(
    FetchPartition,
    partition_index=st.integers(min_value=0, max_value=1000),
    error_code=st.sampled_from([0, 1, 3, 6]),
    high_watermark=i64,
    last_stable_offset=i64,
    log_start_offset=i64,
    aborted_transactions=st.none() | st.lists(st.tuples(i64, i64), max_size=3),
    preferred_read_replica=st.sampled_from([-1, 0]),
    records=st.none() | st.binary(max_size=200),
)
topics = st.lists(
    st.builds(FetchTopic, topic=st.text(min_size=1, max_size=20),
              partitions=st.lists(partitions, max_size=4), topic_id=st.uuids()),
    max_size=3,
)


def _joined(parts: list[object]) -> bytes:
    out = b""
    for part in parts:
        assert isinstance(part, bytes)
        out += part
    return out


def _codec(version: int, tops: list[FetchTopic]) -> bytes:
    resp = FetchResponse(
        throttle_time_ms=5, error_code=0, session_id=0,
        responses=[_T(topic=t.topic, topic_id=t.topic_id, partitions=[
            _P(partition_index=p.partition_index, error_code=p.error_code,
               high_watermark=p.high_watermark, last_stable_offset=p.last_stable_offset,
               log_start_offset=p.log_start_offset,
               aborted_transactions=None if p.aborted_transactions is None else [
                   _P.AbortedTransaction(producer_id=a, first_offset=b)
                   for a, b in p.aborted_transactions],
               preferred_read_replica=p.preferred_read_replica, records=p.records)
            for p in t.partitions]) for t in tops])
    return bytes(resp.encode(version=version))


@settings(max_examples=300, deadline=None)
@given(version=st.integers(min_value=4, max_value=18), tops=topics)
def test_matches_the_generated_codec(version: int, tops: list[FetchTopic]) -> None:
    for t in tops:
        for p in t.partitions:
            p.records_length = len(p.records) if isinstance(p.records, bytes) else 0
    assert _joined(encode_fetch_response(version, tops, throttle_time_ms=5)) == _codec(version, tops)


def test_records_object_is_passed_through_untouched() -> None:
    marker = object()
    parts = encode_fetch_response(12, [FetchTopic("t", [
        FetchPartition(0, records=marker, records_length=10)])])
    assert parts[1] is marker
    assert len(parts) == 3


def test_golden_bytes_v4() -> None:
    parts = encode_fetch_response(4, [FetchTopic("t", [FetchPartition(
        0, high_watermark=1, last_stable_offset=1, records=b"R", records_length=1)])])
    assert _joined(parts) == bytes.fromhex(
        "00000000"          # throttle_time_ms
        "00000001"          # one topic
        "0001" "74"         # "t"
        "00000001"          # one partition
        "00000000" "0000"   # partition 0, no error
        "0000000000000001"  # high watermark
        "0000000000000001"  # last stable offset
        "ffffffff"          # aborted transactions: null
        "00000001" "52"     # records: 1 byte
    )
