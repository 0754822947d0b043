"""Metadata (key 3), versions 0-13.

One broker leads every partition (leader epoch 0, replicas = ISR = [this node]). Asking
for an unknown topic auto-creates it when ``allow_auto_topic_creation`` (v4+, implied
before) and the broker allows it; otherwise UNKNOWN_TOPIC_OR_PARTITION. A null topic list
(v1+) means all topics. A topic with a non-zero topic id (v10+) is looked up by that id,
its name ignored, as Kafka does (the Java Admin's ``describeTopics(TopicCollection.
ofTopicIds(...))`` sends the id with an empty name): UNKNOWN_TOPIC_ID if no topic has it;
ids are never auto-created. With ACLs (``--authorizer``): listing all topics shows only
those the client may DESCRIBE, as Kafka hides them; a named one it may not describe
answers TOPIC_AUTHORIZATION_FAILED, and auto-creation needs CREATE on the cluster or the
topic (else UNKNOWN_TOPIC_OR_PARTITION). Authorized operations (v8+, when asked): those
the client may perform. ``is_internal`` marks Kafka's internal topics (``internal_topics``);
reserved names are never auto-created, and broker-private state (credentials, ACLs) is
not a topic, so no listing can show it.
"""

from __future__ import annotations

import uuid
from typing import Any

from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from headrace.broker import internal_topics
from headrace.broker.context import RequestContext
from headrace.broker.errors import error_code_for
from headrace.broker.registry import handles
from headrace.protocol.acl_operations import AclOperation, ResourceType
from headrace.protocol.errors import ErrorCode
from headrace.storage.errors import StorageError
from headrace.storage.manager import Topic

_Topic = MetadataResponse.MetadataResponseTopic
_Partition = _Topic.MetadataResponsePartition
_ZERO_UUID = uuid.UUID(int=0)


def _topic_entry(ctx: RequestContext, topic: Topic, request: Any) -> Any:
    node = ctx.state.config.node_id
    return _Topic(
        authorized_operations=ctx.operations(
            getattr(request, "include_topic_authorized_operations", False),
            ResourceType.TOPIC, topic.name),
        error_code=0,
        name=topic.name,
        topic_id=topic.topic_id,
        is_internal=internal_topics.is_internal(topic.name),
        partitions=[
            _Partition(error_code=0, partition_index=p, leader_id=node, leader_epoch=0,
                       replica_nodes=[node], isr_nodes=[node], offline_replicas=[])
            for p in range(len(topic.partitions))
        ],
    )


@handles(MetadataRequest, MetadataResponse, max_version=13)
async def handle(ctx: RequestContext, request: Any) -> Any:
    state = ctx.state
    requested = request.topics
    entries = []
    if requested is None or (ctx.api_version == 0 and not requested):
        entries = [_topic_entry(ctx, t, request) for t in state.logs.topics.values()
                   if ctx.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC, t.name)]
    else:
        allow = ctx.api_version < 4 or bool(request.allow_auto_topic_creation)
        by_id = state.topics_by_id() if ctx.api_version >= 10 else {}
        for t in requested:
            name = t.name
            topic_id = getattr(t, "topic_id", None)  # v10+
            if topic_id is not None and topic_id != _ZERO_UUID:
                found = by_id.get(topic_id)
                if found is None:
                    entries.append(_Topic(error_code=ErrorCode.UNKNOWN_TOPIC_ID, name=None,
                                          topic_id=topic_id, partitions=[]))
                elif not ctx.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC, found):
                    entries.append(_Topic(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                          name=None, topic_id=topic_id, partitions=[]))
                else:
                    entries.append(_topic_entry(ctx, state.logs.get_topic(found), request))
                continue
            if name is None:  # neither a name nor an id
                entries.append(_Topic(error_code=ErrorCode.UNKNOWN_TOPIC_ID, name=None,
                                      topic_id=_ZERO_UUID, partitions=[]))
                continue
            if not ctx.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC, name):
                entries.append(_Topic(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                      name=name, topic_id=_ZERO_UUID, partitions=[]))
                continue
            try:
                create = allow and (name in state.logs.topics or ctx.may_create_topic(name))
                entries.append(_topic_entry(ctx, state.topic_for_write(name, create),
                                            request))
            except StorageError as e:
                entries.append(_Topic(error_code=error_code_for(e), name=name,
                                      topic_id=_ZERO_UUID, partitions=[]))
            except ValueError:
                entries.append(_Topic(error_code=ErrorCode.INVALID_TOPIC_EXCEPTION, name=name,
                                      topic_id=_ZERO_UUID, partitions=[]))
    cfg = state.config
    return MetadataResponse(
        throttle_time_ms=0,
        brokers=[MetadataResponse.MetadataResponseBroker(
            node_id=cfg.node_id, host=ctx.listener.advertised_host, port=ctx.listener.port, rack=None)],
        cluster_id=state.logs.cluster_id,
        controller_id=cfg.node_id,
        topics=entries,
        error_code=0,
        authorized_operations=ctx.operations(
            getattr(request, "include_cluster_authorized_operations", False),
            ResourceType.CLUSTER),
    )
