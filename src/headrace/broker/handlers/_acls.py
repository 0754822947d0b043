"""Shared by the ACL handlers: the gate every ACL API passes (an authorizer configured,
the cluster operation allowed) and request filters as ``AclFilter``."""

from __future__ import annotations

from typing import Any

from headrace.broker.context import RequestContext
from headrace.broker.security.acls import AclFilter
from headrace.protocol.acl_operations import AclOperation, ResourceType
from headrace.protocol.errors import ErrorCode


def acl_gate(ctx: RequestContext, operation: AclOperation) -> tuple[int, str] | None:
    """``(error code, message)`` when the request may not touch ACLs at all, else None:
    SECURITY_DISABLED without an authorizer, CLUSTER_AUTHORIZATION_FAILED without
    ``operation`` (DESCRIBE to read, ALTER to change) on the cluster."""
    if not ctx.state.authorizer.enabled:
        return ErrorCode.SECURITY_DISABLED, "No Authorizer is configured."
    if not ctx.allowed(operation, ResourceType.CLUSTER):
        return (ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                f"{ctx.session.principal} may not {operation.name} the cluster's ACLs")
    return None


def request_filter(f: Any) -> AclFilter:
    """The ``AclFilter`` of a DescribeAcls request or a DeleteAcls filter entry."""
    return AclFilter(f.resource_type_filter, f.resource_name_filter, f.pattern_type_filter,
                     f.principal_filter, f.host_filter, f.operation, f.permission_type)
