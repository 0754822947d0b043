"""CreateTopics (key 19), versions 2-7 (v0-1, removed in Kafka 4 by KIP-896, close the
connection as in Kafka 4).

Creates topics with the requested partition count (-1: the broker default) and config
overrides, persisted before the answer. Replication factor must be -1 or 1 (one broker):
anything else gets INVALID_REPLICATION_FACTOR. ``validate_only`` checks without creating.
Manual replica assignments naming another broker get INVALID_REPLICA_ASSIGNMENT.
With ACLs: CREATE on the cluster or the topic (else TOPIC_AUTHORIZATION_FAILED); the
configs are answered only with DESCRIBE_CONFIGS on the topic, as Kafka does. Reserved
names (``internal_topics``) answer INVALID_REQUEST, as Kafka for ``__cluster_metadata``.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import CreateTopicsRequest, CreateTopicsResponse

from headrace.broker import internal_topics
from headrace.broker.context import RequestContext
from headrace.broker.errors import error_code_for
from headrace.broker.registry import handles
from headrace.errors import HeadraceError
from headrace.protocol.acl_operations import AclOperation, ResourceType
from headrace.protocol.errors import ErrorCode, KafkaProtocolError
from headrace.storage.manager import MAX_PARTITIONS_PER_TOPIC

_Result = CreateTopicsResponse.CreatableTopicResult
_Config = _Result.CreatableTopicConfigs


@handles(CreateTopicsRequest, CreateTopicsResponse, max_version=7, min_version=2)
async def handle(ctx: RequestContext, request: Any) -> Any:
    state = ctx.state
    validate_only = bool(getattr(request, "validate_only", False))
    results = []
    for t in request.topics:
        try:
            if not ctx.may_create_topic(t.name):
                ctx.require(AclOperation.CREATE, ResourceType.TOPIC, t.name)
            internal_topics.refuse_creation(t.name)
            if t.replication_factor not in (-1, 1):
                raise KafkaProtocolError(ErrorCode.INVALID_REPLICATION_FACTOR,
                                         f"replication factor {t.replication_factor} > 1 "
                                         "available broker")
            partitions = t.num_partitions
            if t.assignments:
                if any(b != state.config.node_id for a in t.assignments for b in a.broker_ids):
                    raise KafkaProtocolError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                             "assignment names an unknown broker")
                partitions = len(t.assignments)
            if partitions == -1:
                partitions = state.config.num_partitions
            if not 1 <= partitions <= MAX_PARTITIONS_PER_TOPIC:
                raise KafkaProtocolError(
                    ErrorCode.INVALID_PARTITIONS,
                    f"number of partitions must be in [1, {MAX_PARTITIONS_PER_TOPIC}], "
                    f"got {partitions}")
            configs = {c.name: c.value for c in t.configs if c.value is not None}
            try:
                topic = state.logs.create_topic(t.name, partitions, configs, validate_only)
            except ValueError as e:
                raise KafkaProtocolError(ErrorCode.INVALID_CONFIG, str(e)) from e
            shown = topic.config.as_kafka_configs() | topic.config_overrides
            if not ctx.allowed(AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, t.name):
                shown = {}
            results.append(_Result(
                name=t.name, topic_id=topic.topic_id, error_code=0, error_message=None,
                num_partitions=partitions, replication_factor=1,
                configs=[_Config(name=k, value=v, read_only=False,
                                 config_source=1 if k in topic.config_overrides else 5,
                                 is_sensitive=False) for k, v in sorted(shown.items())]))
        except (HeadraceError, OSError) as e:
            results.append(_Result(name=t.name, error_code=error_code_for(e),
                                   error_message=str(e), num_partitions=-1,
                                   replication_factor=-1, configs=None))
    return CreateTopicsResponse(throttle_time_ms=0, topics=results)
