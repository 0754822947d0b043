"""Produce (key 0), versions 3-11 (capped until transactions v2, KIP-890). Versions 0-2
(message formats 0 and 1, removed in Kafka 4 by KIP-896) are still advertised, as Kafka 4
advertises them (KAFKA-18659: librdkafka before 2.8 turns compression off when Produce's
minimum is above 0), and a request at those versions closes its connection, as in Kafka 4.

Each partition's record set is split into v2 batches, every batch checked (magic,
framing, CRC-32C, size) before any is appended, then appended verbatim with offsets
assigned by rewriting baseOffset. ``acks=0`` gets no response; ``acks=1`` and
``acks=-1`` are answered after the append (the page cache survives a killed broker) or,
with ``headrace.flush.on.ack``, or once the topic's ``flush.messages`` unflushed messages are
reached, after a group-commit fsync (a deferred response: the connection goes on
appending pipelined requests, which then share fsyncs); ``flush.ms`` arms a timer that
fsyncs the partition at most that long after an unflushed append. Errors: INVALID_RECORD
(magic 0/1, as Kafka), CORRUPT_MESSAGE (CRC), MESSAGE_TOO_LARGE (the topic's max.message.bytes),
INVALID_RECORD (a null key in a compacted topic) and INVALID_TIMESTAMP (outside
message.timestamp.before/after.max.ms) refuse the whole batch, naming each refused
record in ``record_errors`` (v8+) as Kafka does, UNKNOWN_TOPIC_OR_PARTITION,
INVALID_REQUIRED_ACKS; for idempotent producers a retried duplicate gets its original
offset, a sequence gap OUT_OF_ORDER_SEQUENCE_NUMBER and a stale epoch
INVALID_PRODUCER_EPOCH; control batches from clients INVALID_RECORD. Transactional
batches open the producer's transaction in the partition (it holds back the last stable
offset until its marker) once verified as Kafka does (KIP-890 part 1): the request's
transactional id must map to the batch's producer id and epoch, with the partition added
to its Ongoing transaction (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
INVALID_PRODUCER_ID_MAPPING, INVALID_PRODUCER_EPOCH or INVALID_TXN_STATE). With message.timestamp.type=LogAppendTime each batch is
stamped with the broker's clock (``log_validation``), answered in ``log_append_time_ms``.
With ACLs: a transactional request needs WRITE on its transactional id (else every
partition answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED), each topic WRITE (else
TOPIC_AUTHORIZATION_FAILED), and a missing topic is auto-created only with CREATE.
Internal topics (``internal_topics``) are never appended to by a client:
INVALID_TOPIC_EXCEPTION, as Kafka (not even for its ``__admin_client`` client id).
"""

from __future__ import annotations

import time
from typing import Any

from kafka.protocol.producer import ProduceRequest, ProduceResponse

from headrace.broker import internal_topics
from headrace.broker.context import RequestContext
from headrace.broker.errors import error_code_for
from headrace.broker.log_validation import validate_for_log
from headrace.broker.registry import DeferredResponse, handles
from headrace.errors import HeadraceError
from headrace.protocol.acl_operations import AclOperation, ResourceType
from headrace.protocol.errors import ErrorCode, KafkaProtocolError, RecordValidationError
from headrace.protocol.records import validate_batches
from headrace.storage.config import LONG_MAX
from headrace.storage.log import PartitionLog

_TopicResp = ProduceResponse.TopicProduceResponse
_PartResp = _TopicResp.PartitionProduceResponse
_RecordError = _PartResp.BatchIndexAndErrorMessage


@handles(ProduceRequest, ProduceResponse, max_version=11, min_version=3,
          advertised_from=0)
async def handle(ctx: RequestContext, request: Any) -> Any:
    state = ctx.state
    acks = request.acks
    to_flush: set[PartitionLog] = set()
    answers: list[tuple[str, list[Any]]] = []
    txn_id = request.transactional_id
    txn_denied = txn_id is not None and not ctx.allowed(
        AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id)
    for topic_data in request.topic_data:
        parts: list[Any] = []
        name = topic_data.name
        topic_denied = not ctx.allowed(AclOperation.WRITE, ResourceType.TOPIC, name)
        for pd in topic_data.partition_data:
            partition_log: PartitionLog | None = None
            try:
                if acks not in (-1, 0, 1):
                    raise KafkaProtocolError(ErrorCode.INVALID_REQUIRED_ACKS)
                if txn_denied:
                    ctx.require(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id)
                if topic_denied:
                    ctx.require(AclOperation.WRITE, ResourceType.TOPIC, name)
                internal_topics.refuse_change(name, "append to")
                plog = state.topic_for_write(
                    name, name in state.logs.topics or ctx.may_create_topic(name)).partitions
                if not 0 <= pd.index < len(plog):
                    raise KafkaProtocolError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                partition_log = plog[pd.index]
                if pd.records is None:
                    raise KafkaProtocolError(ErrorCode.CORRUPT_MESSAGE, "null record set")
                data = bytearray(pd.records)
                headers = validate_batches(data)
                if any(h.is_control for h in headers):
                    raise KafkaProtocolError(ErrorCode.INVALID_RECORD,
                                             "control batches are written by the broker only")
                for h in headers:
                    if h.is_transactional:
                        state.txns.verify_produce(request.transactional_id, h.producer_id,
                                                  h.producer_epoch,
                                                  (topic_data.name, pd.index))
                headers, append_time = validate_for_log(
                    data, headers, partition_log.config, int(time.time() * 1000),
                    f"{topic_data.name}-{pd.index}")
                result = partition_log.append(data, headers)
                state.metrics.produced((topic_data.name, pd.index), len(data),
                                       result.last_offset - result.base_offset + 1)
                state.notifier.notify((topic_data.name, pd.index))
                cfg = partition_log.config
                if cfg.flush_on_ack or partition_log.unflushed_messages >= cfg.flush_messages:
                    to_flush.add(partition_log)
                elif cfg.flush_ms != LONG_MAX:
                    state.flusher.flush_later(partition_log, cfg.flush_ms)
                parts.append(_PartResp(index=pd.index, error_code=0,
                                       base_offset=result.base_offset,
                                       log_append_time_ms=append_time,
                                       log_start_offset=result.log_start_offset))
            except (HeadraceError, OSError) as e:  # each partition answers for itself
                code = error_code_for(e)
                part = _PartResp(index=pd.index, error_code=code, base_offset=-1,
                                 log_append_time_ms=-1, log_start_offset=-1,
                                 error_message=str(e) or code.name, record_errors=[])
                if isinstance(e, RecordValidationError) and partition_log is not None:
                    part.record_errors = [_RecordError(batch_index=i, batch_index_error_message=m)
                                          for i, m in e.record_errors]
                    part.log_start_offset = partition_log.log_start_offset
                parts.append(part)
        answers.append((topic_data.name, parts))
    if acks == 0:
        if to_flush:
            state.flusher.flush_soon(to_flush)
        return None

    def build(error: BaseException | None) -> Any:
        if error is not None:  # the fsync failed: nothing here may be acknowledged
            code = error_code_for(error)
            for _, parts in answers:
                for part in parts:
                    if part.error_code == 0:
                        part.error_code, part.base_offset = code, -1
        return ProduceResponse(
            responses=[_TopicResp(name=name, partition_responses=parts) for name, parts in answers],
            throttle_time_ms=0,
        )

    if to_flush:
        # Answered once the group-commit fsync covering these appends is done; the
        # connection handles the next request meanwhile.
        return DeferredResponse(state.flusher.request(to_flush), build)
    return build(None)
