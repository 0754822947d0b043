"""CreatePartitions (key 37), versions 0-3.

Grows a topic to ``count`` partitions (never shrinks: INVALID_PARTITIONS). Keys hash to
new partitions from then on, as in Kafka. ``validate_only`` checks without creating.
With ACLs each topic needs ALTER (else TOPIC_AUTHORIZATION_FAILED). Internal topics never
grow: INVALID_TOPIC_EXCEPTION for every client (``internal_topics``; Kafka lets a principal
with ALTER add partitions to them).
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import CreatePartitionsRequest, CreatePartitionsResponse

from headrace.broker import internal_topics
from headrace.broker.context import RequestContext
from headrace.broker.errors import error_code_for
from headrace.broker.registry import handles
from headrace.errors import HeadraceError
from headrace.protocol.acl_operations import AclOperation, ResourceType
from headrace.protocol.errors import ErrorCode

_Result = CreatePartitionsResponse.CreatePartitionsTopicResult


@handles(CreatePartitionsRequest, CreatePartitionsResponse, max_version=3)
async def handle(ctx: RequestContext, request: Any) -> Any:
    results = []
    for t in request.topics:
        try:
            ctx.require(AclOperation.ALTER, ResourceType.TOPIC, t.name)
            ctx.state.logs.get_topic(t.name)
            internal_topics.refuse_change(t.name, "add partitions to")
            ctx.state.logs.add_partitions(t.name, t.count, bool(request.validate_only))
            results.append(_Result(name=t.name, error_code=0, error_message=None))
        except ValueError as e:
            results.append(_Result(name=t.name, error_code=ErrorCode.INVALID_PARTITIONS,
                                   error_message=str(e)))
        except (HeadraceError, OSError) as e:
            results.append(_Result(name=t.name, error_code=error_code_for(e),
                                   error_message=str(e)))
    return CreatePartitionsResponse(throttle_time_ms=0, results=results)
