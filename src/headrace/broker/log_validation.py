"""Checks and rewrites of a produced record set against its partition's config, before
the append (what Kafka's LogValidator does on the broker).

* ``max.message.bytes``: a batch larger than it gets MESSAGE_TOO_LARGE;
* a compacted topic refuses records without a key: INVALID_RECORD, as Kafka 2.8+ does
  (decompressing the batch to look, as Kafka does for compacted topics);
* ``message.timestamp.type=LogAppendTime``: each batch's max timestamp becomes the
  broker's clock and its timestamp-type bit is set, the CRC recomputed.
"""

from __future__ import annotations

from headrace.protocol.batch_codec import has_null_key, stamp_log_append_time
from headrace.protocol.errors import ErrorCode, KafkaProtocolError
from headrace.protocol.records import BatchHeader
from headrace.storage.config import LogConfig


def validate_for_log(data: bytearray, headers: list[BatchHeader], config: LogConfig,
                     now_ms: int, where: str) -> tuple[list[BatchHeader], int]:
    """The headers to append (rewritten in ``data`` for LogAppendTime) and the log append
    time (-1 with CreateTime). Raises ``KafkaProtocolError`` (or ``ProtocolError`` for an
    undecodable batch) before anything changes; ``where`` names the partition."""
    for h in headers:
        if h.size > config.max_message_bytes:
            raise KafkaProtocolError(
                ErrorCode.MESSAGE_TOO_LARGE,
                f"a record batch of {h.size} bytes exceeds max.message.bytes "
                f"({config.max_message_bytes}) of {where}")
    if config.compact:
        pos = 0
        for h in headers:
            if has_null_key(memoryview(data)[pos : pos + h.size], h):
                raise KafkaProtocolError(
                    ErrorCode.INVALID_RECORD,
                    f"Compacted topic cannot accept message without key in topic partition "
                    f"{where}")
            pos += h.size
    if not config.log_append_time:
        return headers, -1
    stamped = []
    pos = 0
    for h in headers:
        stamped.append(stamp_log_append_time(data, pos, h, now_ms))
        pos += h.size
    return stamped, now_ms
