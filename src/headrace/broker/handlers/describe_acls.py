"""DescribeAcls (key 29), versions 1-3 (v0, removed in Kafka 4 by KIP-896, closes
the connection as in Kafka 4): the bindings a filter selects, grouped by resource
pattern. A filter field null (names, principal, host) or ANY matches everything; pattern
type MATCH selects every binding that applies to the named resource (its literal name,
``*``, and the prefixes it starts with). SECURITY_DISABLED without an authorizer,
CLUSTER_AUTHORIZATION_FAILED without DESCRIBE on the cluster.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin.acl import DescribeAclsRequest, DescribeAclsResponse

from headrace.broker.context import RequestContext
from headrace.broker.handlers._acls import acl_gate, request_filter
from headrace.broker.registry import handles
from headrace.protocol.acl_operations import AclOperation

_Resource = DescribeAclsResponse.DescribeAclsResource
_Acl = _Resource.AclDescription


@handles(DescribeAclsRequest, DescribeAclsResponse, max_version=3, min_version=1)
async def handle(ctx: RequestContext, request: Any) -> Any:
    gate = acl_gate(ctx, AclOperation.DESCRIBE)
    if gate is not None:
        return DescribeAclsResponse(throttle_time_ms=0, error_code=gate[0],
                                    error_message=gate[1], resources=[])
    flt = request_filter(request)
    grouped: dict[tuple[int, str, int], list[Any]] = {}
    for b in ctx.state.authorizer.bindings():
        if flt.matches(b):
            grouped.setdefault((b.resource_type, b.resource_name, b.pattern_type), []).append(
                _Acl(principal=b.principal, host=b.host, operation=b.operation,
                     permission_type=b.permission))
    return DescribeAclsResponse(throttle_time_ms=0, error_code=0, error_message=None, resources=[
        _Resource(resource_type=rtype, resource_name=name, pattern_type=pattern, acls=acls)
        for (rtype, name, pattern), acls in grouped.items()])
