"""DescribeProducers (key 61), version 0: the producer state this broker (every
partition's leader) keeps per partition, as ``kafka-transactions describe-producers`` and
``find-hanging`` read it.

Per producer id known to the partition (idempotent and transactional, until
``producer.id.expiration.ms`` forgets it): its epoch, the sequence of its last record (-1
if none since its epoch began), the max timestamp of its last batch or marker, the
coordinator epoch of its last transaction marker (-1: none yet) and the first offset of
its open transaction (-1: none), by ascending producer id. Errors per partition:
UNKNOWN_TOPIC_OR_PARTITION; with ACLs, READ on the topic (else TOPIC_AUTHORIZATION_FAILED),
as Kafka.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import DescribeProducersRequest, DescribeProducersResponse

from headrace.broker.context import RequestContext
from headrace.broker.errors import error_code_for
from headrace.broker.registry import handles
from headrace.errors import HeadraceError
from headrace.protocol.acl_operations import AclOperation, ResourceType
from headrace.storage.producer_state import ProducerStateManager

_Topic = DescribeProducersResponse.TopicResponse
_Partition = _Topic.PartitionResponse
_Producer = _Partition.ProducerState


def _producers(state: ProducerStateManager) -> list[Any]:
    return [_Producer(producer_id=pid, producer_epoch=e.epoch, last_sequence=e.last_seq,
                      last_timestamp=e.last_timestamp, coordinator_epoch=e.coordinator_epoch,
                      current_txn_start_offset=state.ongoing.get(pid, -1))
            for pid, e in sorted(state.producers.items())]


@handles(DescribeProducersRequest, DescribeProducersResponse, max_version=0)
async def handle(ctx: RequestContext, request: Any) -> Any:
    topics = []
    for t in request.topics:
        parts = []
        for index in t.partition_indexes:
            try:
                ctx.require(AclOperation.READ, ResourceType.TOPIC, t.name)
                plog = ctx.state.logs.get_log(t.name, index)
                parts.append(_Partition(partition_index=index, error_code=0, error_message=None,
                                        active_producers=_producers(plog.producer_state)))
            except HeadraceError as e:
                parts.append(_Partition(partition_index=index, error_code=error_code_for(e),
                                        error_message=None, active_producers=[]))
        topics.append(_Topic(name=t.name, partitions=parts))
    return DescribeProducersResponse(throttle_time_ms=0, topics=topics)
