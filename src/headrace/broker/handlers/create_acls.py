"""CreateAcls (key 30), versions 1-3 (v0, removed in Kafka 4 by KIP-896, closes
the connection as in Kafka 4): new ACL bindings, durable before the answer.

Each creation answers for itself: INVALID_REQUEST for a malformed binding (ANY or
UNKNOWN values, a pattern type other than LITERAL/PREFIXED, a principal not TYPE:NAME, a
cluster resource not named ``kafka-cluster``), SECURITY_DISABLED when the broker runs
without an authorizer, CLUSTER_AUTHORIZATION_FAILED without ALTER on the cluster.
Creating a binding that exists is a success (nothing changes), as in Kafka.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin.acl import CreateAclsRequest, CreateAclsResponse

from headrace.broker.context import RequestContext
from headrace.broker.handlers._acls import acl_gate
from headrace.broker.registry import handles
from headrace.broker.security.acls import AclBinding, validate_binding
from headrace.protocol.acl_operations import AclOperation
from headrace.protocol.errors import KafkaProtocolError

_Result = CreateAclsResponse.AclCreationResult


@handles(CreateAclsRequest, CreateAclsResponse, max_version=3, min_version=1)
async def handle(ctx: RequestContext, request: Any) -> Any:
    gate = acl_gate(ctx, AclOperation.ALTER)
    results: list[Any] = []
    valid: list[AclBinding] = []
    for c in request.creations:
        if gate is not None:
            results.append(_Result(error_code=gate[0], error_message=gate[1]))
            continue
        binding = AclBinding(c.resource_type, c.resource_name, c.resource_pattern_type,
                             c.principal, c.host, c.operation, c.permission_type)
        try:
            validate_binding(binding)
        except KafkaProtocolError as e:
            results.append(_Result(error_code=e.code, error_message=str(e)))
            continue
        valid.append(binding)
        results.append(_Result(error_code=0, error_message=None))
    ctx.state.authorizer.create(valid)
    return CreateAclsResponse(throttle_time_ms=0, results=results)
