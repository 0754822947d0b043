"""The hand parser of Fetch v11 responses against the codec's own encoding of the same
response, and against arbitrary bytes (a clear error, never a wrong answer or a crash)."""

from __future__ import annotations

import contextlib
import struct

from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.consumer import FetchResponse

from headrace.spark.fetcher import FETCH_VERSION, parse_fetch_response

_T = FetchResponse.FetchableTopicResponse
_P = _T.PartitionData
_A = _P.AbortedTransaction


def frame(correlation_id: int, response: FetchResponse) -> bytearray:
    return bytearray(struct.pack(">i", correlation_id)
                     + bytes(response.encode(version=FETCH_VERSION)))


@settings(max_examples=50, deadline=None)
@given(st.integers(-1, 2**31 - 1), st.integers(0, 120), st.integers(-1, 2**62),
       st.lists(st.tuples(st.integers(0, 2**62), st.integers(0, 2**62)), max_size=4),
       st.none() | st.binary(max_size=200), st.text(min_size=1, max_size=20))
def test_matches_the_codec(cid: int, code: int, high: int, aborted: list[tuple[int, int]],
                           records: bytes | None, topic: str) -> None:
    response = FetchResponse(throttle_time_ms=0, error_code=0, session_id=0, responses=[
        _T(topic=topic, partitions=[_P(
            partition_index=3, error_code=code, high_watermark=high, last_stable_offset=high,
            log_start_offset=0, preferred_read_replica=-1, records=records,
            aborted_transactions=[_A(producer_id=p, first_offset=o) for p, o in aborted])])])
    got = parse_fetch_response(frame(cid, response))
    assert (got.error_code, got.high_watermark, got.last_stable_offset, got.log_start_offset,
            got.aborted, bytes(got.records)) == (code, high, high, 0, aborted, records or b"")


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=120))
def test_garbage_is_a_clear_error(garbage: bytes) -> None:
    with contextlib.suppress(ValueError, struct.error, ConnectionError):
        parse_fetch_response(bytearray(garbage))
