"""ApiVersions against Apache Kafka 4.3.1: for every API both brokers serve, headrace
advertises Kafka's minimum and Kafka's maximum, except the maxima listed in
``NOT_YET_MAX`` (newer versions headrace does not serve yet, each named in
COMPATIBILITY.md). A request below an API's minimum (the versions KIP-896 removed in
Kafka 4.0) closes its connection on both brokers, while the same request at the minimum
is answered."""

from __future__ import annotations

import struct
from typing import Any

from kafka.protocol.admin import (
    CreateAclsRequest,
    CreateTopicsRequest,
    DeleteAclsRequest,
    DeleteTopicsRequest,
    DescribeAclsRequest,
    DescribeConfigsRequest,
    DescribeLogDirsRequest,
)
from kafka.protocol.consumer import (
    FetchRequest,
    ListOffsetsRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    OffsetForLeaderEpochRequest,
)
from kafka.protocol.metadata import ApiVersionsRequest
from kafka.protocol.producer import WriteTxnMarkersRequest

from tests.differential.conftest import Brokers
from tests.integration.rawclient import RawClient

Table = dict[int, tuple[int, int]]

# API key -> headrace's maximum where it is below Kafka 4.3.1's (Kafka's in the comment).
NOT_YET_MAX = {
    0: 11,   # Produce 13: v12+ need transactions v2 (KIP-890)
    10: 4,   # FindCoordinator 6: share groups
    24: 3,   # AddPartitionsToTxn 5: transactions v2
    25: 3,   # AddOffsetsToTxn 4: transactions v2
    26: 4,   # EndTxn 5: transactions v2
    28: 3,   # TxnOffsetCommit 5: transactions v2
    35: 4,   # DescribeLogDirs 5: cordoned log dirs
    60: 1,   # DescribeCluster 2: endpoint type
}

# Every API both serve whose minimum Kafka 4.3.1 raised above 0 (KIP-896), but Produce:
# advertised from 0 by both (KAFKA-18659), its v0-2 closing the connection, which
# test_errors.py's ``legacy_produce`` case compares.
RAISED_MINIMUM: dict[int, Any] = {
    1: FetchRequest, 2: ListOffsetsRequest, 8: OffsetCommitRequest, 9: OffsetFetchRequest,
    19: CreateTopicsRequest, 20: DeleteTopicsRequest, 23: OffsetForLeaderEpochRequest,
    27: WriteTxnMarkersRequest, 29: DescribeAclsRequest, 30: CreateAclsRequest,
    31: DeleteAclsRequest, 32: DescribeConfigsRequest, 35: DescribeLogDirsRequest,
}

# Fields whose default (0, UNKNOWN) Kafka refuses as malformed, closing the connection:
# ANY (1) makes the request well formed.
WELL_FORMED: dict[int, dict[str, int]] = {
    29: {"resource_type_filter": 1, "pattern_type_filter": 1, "operation": 1,
         "permission_type": 1},
}


def advertised(bootstrap: str) -> Table:
    with RawClient(bootstrap) as c:
        response = c.request(ApiVersionsRequest(client_software_name="diff",
                                                client_software_version="1"), 3)
    assert response.error_code == 0
    return {int(k.api_key): (int(k.min_version), int(k.max_version))
            for k in response.api_keys}


def test_advertised_versions_match_kafka(brokers: Brokers) -> None:
    kafka, ours = advertised(brokers.kafka), advertised(brokers.headrace)
    assert set(ours) <= set(kafka), f"served by headrace only: {set(ours) - set(kafka)}"
    expected = {key: (kafka[key][0], NOT_YET_MAX.get(key, kafka[key][1])) for key in ours}
    assert ours == expected
    # Each entry of NOT_YET_MAX is a real gap (drop it once the versions are served).
    assert all(NOT_YET_MAX[key] < kafka[key][1] for key in NOT_YET_MAX)
    raised = {key for key in ours if kafka[key][0] > 0 and key != 0}
    assert raised == set(RAISED_MINIMUM)


def outcome(bootstrap: str, key: int, version: int) -> str:
    """"closed" or "answered": an empty request of API ``key`` at ``version``."""
    request = RAISED_MINIMUM[key](**WELL_FORMED.get(key, {}))
    request.with_header(correlation_id=5, client_id="below-minimum")
    with RawClient(bootstrap) as c:
        c.send_raw(bytes(request.encode(version=version, header=True, framed=True)))
        frame = c.read_frame()
    if frame is None:
        return "closed"
    assert struct.unpack_from(">i", frame)[0] == 5
    return "answered"


def below_minimum(bootstrap: str, table: Table) -> dict[str, str]:
    seen = {}
    for key, request_class in RAISED_MINIMUM.items():
        low = table[key][0]
        for version in range(low + 1):
            seen[f"{request_class.__name__} v{version}"] = outcome(bootstrap, key, version)
    return seen


def test_below_minimum_closes_the_connection(brokers: Brokers) -> None:
    table = advertised(brokers.kafka)
    reference = below_minimum(brokers.kafka, table)
    ours = below_minimum(brokers.headrace, table)
    assert ours == reference
    assert reference == {
        f"{cls.__name__} v{v}": "answered" if v == table[key][0] else "closed"
        for key, cls in RAISED_MINIMUM.items() for v in range(table[key][0] + 1)}
