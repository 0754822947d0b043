"""DeleteTopics (key 20), versions 1-6 (v0, removed in Kafka 4 by KIP-896, closes the
connection as in Kafka 4).

Deletes topics by name (v6 also by topic id): metadata first, then the partition
directories. Fetches waiting on a deleted partition answer UNKNOWN_TOPIC_OR_PARTITION
on their next pass. With ACLs each topic needs DELETE (else
TOPIC_AUTHORIZATION_FAILED). Internal topics are never deleted: INVALID_TOPIC_EXCEPTION
for every client (``internal_topics``; Kafka lets a principal with DELETE delete them).
"""

from __future__ import annotations

import uuid
from typing import Any

from kafka.protocol.admin import DeleteTopicsRequest, DeleteTopicsResponse

from headrace.broker import internal_topics
from headrace.broker.context import RequestContext
from headrace.broker.errors import error_code_for
from headrace.broker.registry import handles
from headrace.errors import HeadraceError
from headrace.protocol.acl_operations import AclOperation, ResourceType
from headrace.protocol.errors import ErrorCode

_Result = DeleteTopicsResponse.DeletableTopicResult
_ZERO_UUID = uuid.UUID(int=0)


@handles(DeleteTopicsRequest, DeleteTopicsResponse, max_version=6, min_version=1)
async def handle(ctx: RequestContext, request: Any) -> Any:
    logs = ctx.state.logs
    if ctx.api_version >= 6:
        wanted: list[tuple[str | None, uuid.UUID]] = [(t.name, t.topic_id) for t in request.topics]
    else:
        wanted = [(name, _ZERO_UUID) for name in request.topic_names]
    results = []
    for name, topic_id in wanted:
        if name is None:
            name = next((t.name for t in logs.topics.values() if t.topic_id == topic_id), None)
            if name is None:
                results.append(_Result(name=None, topic_id=topic_id,
                                       error_code=ErrorCode.UNKNOWN_TOPIC_ID,
                                       error_message="unknown topic id"))
                continue
        try:
            ctx.require(AclOperation.DELETE, ResourceType.TOPIC, name)
            logs.get_topic(name)
            internal_topics.refuse_change(name, "delete")
            topic = logs.delete_topic(name)
            results.append(_Result(name=name, topic_id=topic.topic_id, error_code=0,
                                   error_message=None))
        except (HeadraceError, OSError) as e:
            results.append(_Result(name=name, topic_id=topic_id, error_code=error_code_for(e),
                                   error_message=str(e)))
    return DeleteTopicsResponse(throttle_time_ms=0, responses=results)
