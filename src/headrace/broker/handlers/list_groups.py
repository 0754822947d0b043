"""ListGroups (key 16), versions 0-5: every group this broker coordinates (including
Empty groups that only hold committed offsets), filtered by state (v4+, case-insensitive)
and type (v5+). Classic groups are of type "classic"; KIP-848 consumer groups of type
"consumer" with protocol type "consumer" and their Empty/Assigning/Reconciling/Stable
state, as Kafka lists them. With ACLs: every group for DESCRIBE on the cluster, else the
groups the client may DESCRIBE."""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import ListGroupsRequest, ListGroupsResponse

from headrace.broker.context import RequestContext
from headrace.broker.registry import handles
from headrace.protocol.acl_operations import AclOperation, ResourceType

_Listed = ListGroupsResponse.ListedGroup


@handles(ListGroupsRequest, ListGroupsResponse, max_version=5)
async def handle(ctx: RequestContext, request: Any) -> Any:
    v = ctx.api_version
    states = {s.lower() for s in request.states_filter} if v >= 4 else set()
    types = {t.lower() for t in request.types_filter} if v >= 5 else set()
    ctx.state.groups.expire_due()  # states as of now: sessions past their deadline are gone
    ctx.state.consumer_groups.expire_due()
    rows = [(g.group_id, g.protocol_type or "", g.state.value, "classic")
            for g in ctx.state.groups.groups.values()]
    rows += [(g.group_id, "consumer", g.state.value, "consumer")
             for g in ctx.state.consumer_groups.groups.values()]
    if not ctx.allowed(AclOperation.DESCRIBE, ResourceType.CLUSTER):
        rows = [r for r in rows if ctx.allowed(AclOperation.DESCRIBE, ResourceType.GROUP, r[0])]
    listed = [_Listed(group_id=group_id, protocol_type=protocol_type, group_state=state,
                      group_type=group_type)
              for group_id, protocol_type, state, group_type in rows
              if not (states and state.lower() not in states)
              and not (types and group_type not in types)]
    return ListGroupsResponse(throttle_time_ms=0, error_code=0, groups=listed)
