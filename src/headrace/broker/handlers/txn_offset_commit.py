"""TxnOffsetCommit (key 28), versions 0-3: offsets committed inside a transaction
(``send_offsets_to_transaction``). Staged in ``__consumer_offsets`` as a transactional
batch and applied only when the transaction commits. Requires an Ongoing transaction
that added the group (AddOffsetsToTxn), else INVALID_TXN_STATE; v3+ group fields are
fenced like OffsetCommit (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID; for
KIP-848 consumer groups the generation is the member epoch: STALE_MEMBER_EPOCH, relaxed by
KIP-1251 as in OffsetCommit). With
ACLs: WRITE on the transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), READ on the
group (GROUP_AUTHORIZATION_FAILED) and on each topic (TOPIC_AUTHORIZATION_FAILED)."""

from __future__ import annotations

from typing import Any

from kafka.protocol.producer import TxnOffsetCommitRequest, TxnOffsetCommitResponse

from headrace.broker.context import RequestContext
from headrace.broker.handlers._offsets import collect_commits, requested
from headrace.broker.handlers._txn import fenced_code
from headrace.broker.registry import handles
from headrace.protocol.acl_operations import AclOperation, ResourceType
from headrace.protocol.errors import KafkaProtocolError

_Topic = TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic
_Partition = _Topic.TxnOffsetCommitResponsePartition


@handles(TxnOffsetCommitRequest, TxnOffsetCommitResponse, max_version=3)
async def handle(ctx: RequestContext, request: Any) -> Any:
    state = ctx.state
    v = ctx.api_version
    try:
        ctx.require(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id)
        ctx.require(AclOperation.READ, ResourceType.GROUP, request.group_id)
        state.txns.check_offset_commit(request.transactional_id, request.producer_id,
                                       request.producer_epoch, request.group_id)
        if v >= 3 and request.generation_id >= 0 and not \
                state.consumer_groups.check_offset_commit(
                    request.group_id, request.member_id, request.generation_id, None,
                    requested(request.topics)):
            state.groups.check_commit(request.group_id, request.generation_id,
                                      request.member_id, request.group_instance_id)
        code = 0
    except KafkaProtocolError as e:
        code = fenced_code(e.code, v, 3)
    offsets, codes = collect_commits(request.topics, code,
                                     state.config.offset_metadata_max_bytes, v >= 2,
                                     state.logs, ctx.may_read_topic)
    if offsets:
        state.offsets.commit_transactional(request.group_id, request.producer_id,
                                           request.producer_epoch, offsets)
        state.remember_group(request.group_id)
    return TxnOffsetCommitResponse(throttle_time_ms=0, topics=[
        _Topic(name=t.name, partitions=[
            _Partition(partition_index=p.partition_index,
                       error_code=codes[(t.name, p.partition_index)]) for p in t.partitions])
        for t in request.topics])
