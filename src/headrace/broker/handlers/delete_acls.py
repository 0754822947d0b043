"""DeleteAcls (key 31), versions 1-3 (v0, removed in Kafka 4 by KIP-896, closes
the connection as in Kafka 4): deletes the bindings each filter selects (same
matching as DescribeAcls) and answers them, per filter. SECURITY_DISABLED without an
authorizer, CLUSTER_AUTHORIZATION_FAILED without ALTER on the cluster.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin.acl import DeleteAclsRequest, DeleteAclsResponse

from headrace.broker.context import RequestContext
from headrace.broker.handlers._acls import acl_gate, request_filter
from headrace.broker.registry import handles
from headrace.protocol.acl_operations import AclOperation

_Result = DeleteAclsResponse.DeleteAclsFilterResult
_Matching = _Result.DeleteAclsMatchingAcl


@handles(DeleteAclsRequest, DeleteAclsResponse, max_version=3, min_version=1)
async def handle(ctx: RequestContext, request: Any) -> Any:
    gate = acl_gate(ctx, AclOperation.ALTER)
    results = []
    for f in request.filters:
        if gate is not None:
            results.append(_Result(error_code=gate[0], error_message=gate[1], matching_acls=[]))
            continue
        deleted = ctx.state.authorizer.delete(request_filter(f))
        results.append(_Result(error_code=0, error_message=None, matching_acls=[
            _Matching(error_code=0, error_message=None, resource_type=b.resource_type,
                      resource_name=b.resource_name, pattern_type=b.pattern_type,
                      principal=b.principal, host=b.host, operation=b.operation,
                      permission_type=b.permission) for b in deleted]))
    return DeleteAclsResponse(throttle_time_ms=0, filter_results=results)
