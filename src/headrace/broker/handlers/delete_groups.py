"""DeleteGroups (key 42), versions 0-2: deletes Empty groups, classic or KIP-848 consumer
groups, and their committed offsets (tombstones in ``__consumer_offsets``). A group with
members gets NON_EMPTY_GROUP, an unknown one GROUP_ID_NOT_FOUND; with ACLs DELETE on the
group is needed (else GROUP_AUTHORIZATION_FAILED)."""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import DeleteGroupsRequest, DeleteGroupsResponse

from headrace.broker.context import RequestContext
from headrace.broker.registry import handles
from headrace.protocol.acl_operations import AclOperation, ResourceType
from headrace.protocol.errors import KafkaProtocolError

_Result = DeleteGroupsResponse.DeletableGroupResult


@handles(DeleteGroupsRequest, DeleteGroupsResponse, max_version=2)
async def handle(ctx: RequestContext, request: Any) -> Any:
    results = []
    for group_id in request.groups_names:
        try:
            ctx.require(AclOperation.DELETE, ResourceType.GROUP, group_id)
            if not ctx.state.consumer_groups.delete(group_id):
                ctx.state.groups.delete(group_id)
            else:
                ctx.state.groups.groups.pop(group_id, None)
            ctx.state.offsets.delete_group(group_id)
            code = 0
        except KafkaProtocolError as e:
            code = e.code
        results.append(_Result(group_id=group_id, error_code=code))
    return DeleteGroupsResponse(throttle_time_ms=0, results=results)
