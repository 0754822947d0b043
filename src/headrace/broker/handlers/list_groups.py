"""ListGroups (key 16), versions 0-5: every group this broker coordinates (including
Empty groups that only hold committed offsets), filtered by state (v4+) and type (v5+;
all groups here are "classic")."""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import ListGroupsRequest, ListGroupsResponse

from headrace.broker.context import RequestContext
from headrace.broker.registry import handles

_Listed = ListGroupsResponse.ListedGroup
GROUP_TYPE = "classic"


@handles(ListGroupsRequest, ListGroupsResponse, max_version=5)
async def handle(ctx: RequestContext, request: Any) -> Any:
    v = ctx.api_version
    states = {s.lower() for s in request.states_filter} if v >= 4 else set()
    types = {t.lower() for t in request.types_filter} if v >= 5 else set()
    listed = []
    for group in ctx.state.groups.groups.values():
        state = group.state.value
        if (states and state.lower() not in states) or (types and GROUP_TYPE not in types):
            continue
        listed.append(_Listed(group_id=group.group_id, protocol_type=group.protocol_type or "",
                              group_state=state, group_type=GROUP_TYPE))
    return ListGroupsResponse(throttle_time_ms=0, error_code=0, groups=listed)
