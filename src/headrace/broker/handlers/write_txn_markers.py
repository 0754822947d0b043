"""WriteTxnMarkers (key 27), versions 1-2 (Kafka 4 removed v0): write COMMIT or ABORT
markers into partitions this broker leads.

headrace's own coordinator writes its markers locally within EndTxn; this request is how
an operator ends a hanging transaction (``kafka-transactions abort``: the Admin client's
``abortTransaction`` sends an ABORT marker with the producer id, epoch and coordinator
epoch that DescribeProducers reported). Per partition, as Kafka: a marker epoch below the
producer's epoch there gets INVALID_PRODUCER_EPOCH, a coordinator epoch below that of its
last marker TRANSACTION_COORDINATOR_FENCED, a missing partition
UNKNOWN_TOPIC_OR_PARTITION; a marker for a ``__consumer_offsets`` partition also applies or
drops the producer's pending transactional offset commits. The markers are fsynced before
the answer when the broker runs with ``--fsync``. Needs CLUSTER_ACTION on the cluster (else
every partition answers CLUSTER_AUTHORIZATION_FAILED). v2's ``transaction_version`` is
ignored (transactions v2, KIP-890, are not served).
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.producer import WriteTxnMarkersRequest, WriteTxnMarkersResponse

from headrace.broker.context import RequestContext
from headrace.broker.errors import error_code_for
from headrace.broker.groups.offsets import OFFSETS_TOPIC
from headrace.broker.registry import DeferredResponse, handles
from headrace.errors import HeadraceError
from headrace.protocol.acl_operations import AclOperation, ResourceType
from headrace.storage.log import PartitionLog

_Result = WriteTxnMarkersResponse.WritableTxnMarkerResult
_TopicResult = _Result.WritableTxnMarkerTopicResult
_PartResult = _TopicResult.WritableTxnMarkerPartitionResult


def _write(ctx: RequestContext, marker: Any, topic: str, index: int,
           written: set[PartitionLog]) -> None:
    """Append one marker after the producer-state checks. Raises ``HeadraceError``."""
    state = ctx.state
    plog = state.logs.get_log(topic, index)
    plog.producer_state.check_marker(marker.producer_id, marker.producer_epoch,
                                     marker.coordinator_epoch)
    committed = bool(marker.transaction_result)
    plog.append_control(marker.producer_id, marker.producer_epoch, committed,
                        marker.coordinator_epoch)
    if topic == OFFSETS_TOPIC:
        state.offsets.complete_txn(marker.producer_id, committed)
    written.add(plog)
    state.notifier.notify((topic, index))


@handles(WriteTxnMarkersRequest, WriteTxnMarkersResponse, max_version=2, min_version=1)
async def handle(ctx: RequestContext, request: Any) -> Any:
    written: set[PartitionLog] = set()
    results = []
    for marker in request.markers:
        topics = []
        for t in marker.topics:
            parts = []
            for index in t.partition_indexes:
                try:
                    ctx.require(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER)
                    _write(ctx, marker, t.name, index, written)
                    code = 0
                except HeadraceError as e:
                    code = error_code_for(e)
                parts.append(_PartResult(partition_index=index, error_code=code))
            topics.append(_TopicResult(name=t.name, partitions=parts))
        results.append(_Result(producer_id=marker.producer_id, topics=topics))

    def build(error: BaseException | None) -> Any:
        if error is not None:  # the fsync failed: no marker may be acknowledged
            code = error_code_for(error)
            for r in results:
                for t in r.topics:
                    for p in t.partitions:
                        p.error_code = p.error_code or code
        return WriteTxnMarkersResponse(markers=results)

    if ctx.state.config.log.flush_on_ack and written:
        return DeferredResponse(ctx.state.flusher.request(written), build)
    return build(None)
