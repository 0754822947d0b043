"""ApiVersions (key 18), versions 0-4.

Answers from the handler table: each API from its advertised minimum (Kafka 4.3.1's:
Produce from 0 though v0-2 are not served, the others from the lowest version served)
to its maximum. A request for a version above
ours is answered in v0 with UNSUPPORTED_VERSION and the table (KIP-511). The response
header is always v0, even for flexible versions (handled by the server).
Not implemented: supported/finalized features (none exist on one broker).
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

from headrace.broker.context import RequestContext
from headrace.broker.registry import API_TABLE, handles
from headrace.protocol.errors import ErrorCode


def _table() -> list[Any]:
    return [
        ApiVersionsResponse.ApiVersion(api_key=k, min_version=s.advertised_min_version,
                                       max_version=s.max_version)
        for k, s in sorted(API_TABLE.items())
    ]


def unsupported_version_response() -> Any:
    return ApiVersionsResponse(error_code=ErrorCode.UNSUPPORTED_VERSION, api_keys=_table())


@handles(ApiVersionsRequest, ApiVersionsResponse, max_version=4)
async def handle(ctx: RequestContext, request: Any) -> Any:
    return ApiVersionsResponse(error_code=0, api_keys=_table(), throttle_time_ms=0)
