"""Checks and rewrites of a produced record set against its partition's config, before
the append (what Kafka's LogValidator does on the broker).

* ``max.message.bytes``: a batch larger than it gets MESSAGE_TOO_LARGE;
* per record, as Kafka does (each refused record named by its index in the batch, the
  whole batch rejected, ``RecordValidationError``): a compacted topic refuses records
  without a key (INVALID_RECORD, Kafka 2.8+, decompressing the batch to look); with
  CreateTime, a timestamp further from the broker's clock than
  ``message.timestamp.before.max.ms`` / ``after.max.ms`` is refused (INVALID_TIMESTAMP,
  which wins when both occur). A record without a key is not also checked for its
  timestamp, as in Kafka. Deliberately not as Kafka: with the default (unlimited)
  ``before.max.ms``, a batch of a non-compacted topic whose declared max timestamp is in
  range is not decompressed to check each record's timestamp (Kafka would catch a
  producer understating it);
* ``message.timestamp.type=LogAppendTime``: each batch's max timestamp becomes the
  broker's clock and its timestamp-type bit is set, the CRC recomputed.
"""

from __future__ import annotations

from headrace.protocol.batch_codec import batch_records, stamp_log_append_time
from headrace.protocol.errors import ErrorCode, KafkaProtocolError, RecordValidationError
from headrace.protocol.records import BatchHeader
from headrace.storage.config import LONG_MAX, LogConfig

NO_TIMESTAMP = -1


def validate_for_log(data: bytearray, headers: list[BatchHeader], config: LogConfig,
                     now_ms: int, where: str) -> tuple[list[BatchHeader], int]:
    """The headers to append (rewritten in ``data`` for LogAppendTime) and the log append
    time (-1 with CreateTime). Raises ``KafkaProtocolError`` (``RecordValidationError``
    for refused records; ``ProtocolError`` for an undecodable batch) before anything
    changes; ``where`` names the partition."""
    for h in headers:
        if h.size > config.max_message_bytes:
            raise KafkaProtocolError(
                ErrorCode.MESSAGE_TOO_LARGE,
                f"a record batch of {h.size} bytes exceeds max.message.bytes "
                f"({config.max_message_bytes}) of {where}")
    pos = 0
    for h in headers:
        _check_records(memoryview(data)[pos : pos + h.size], h, config, now_ms, where)
        pos += h.size
    if not config.log_append_time:
        return headers, -1
    stamped = []
    pos = 0
    for h in headers:
        stamped.append(stamp_log_append_time(data, pos, h, now_ms))
        pos += h.size
    return stamped, now_ms


def _check_records(batch: memoryview, h: BatchHeader, config: LogConfig, now_ms: int,
                   where: str) -> None:
    """Raises ``RecordValidationError`` naming every refused record of the batch."""
    before, after = config.message_timestamp_before_max_ms, config.message_timestamp_after_max_ms
    # Records are parsed anyway for a compacted topic; otherwise only when some may be out
    # of range (a producer's understated max timestamp goes unseen: see the module doc).
    check_timestamps = not config.log_append_time and (
        config.compact or before < LONG_MAX or h.max_timestamp - now_ms > after)
    if not (config.compact or check_timestamps):
        return
    # The range as Kafka's message prints it (Java long arithmetic wraps).
    in_range = f"[{_java_long(now_ms - before)}, {_java_long(now_ms + after)}]"
    errors: list[tuple[int, str]] = []
    bad_timestamp = False
    for index, record in enumerate(batch_records(batch, h)[1]):
        if config.compact and record.key is None:
            errors.append((index, "Compacted topic cannot accept message without key in "
                                  f"topic partition {where}"))
            continue
        timestamp = h.base_timestamp + record.timestamp_delta
        if check_timestamps and timestamp != NO_TIMESTAMP and (
                now_ms - timestamp > before or timestamp - now_ms > after):
            bad_timestamp = True
            errors.append((index, f"Timestamp {timestamp} of message with offset "
                                  f"{h.base_offset + record.offset_delta} is out of range. "
                                  f"The timestamp should be within {in_range}"))
    if not errors:
        return
    if bad_timestamp:
        raise RecordValidationError(
            ErrorCode.INVALID_TIMESTAMP,
            "One or more records have been rejected due to invalid timestamp", errors)
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3])
    raise RecordValidationError(
        ErrorCode.INVALID_RECORD,
        f"One or more records have been rejected due to {len(errors)} record errors in total, "
        f"and only showing the first three errors at most: [{shown}]", errors)


def _java_long(value: int) -> int:
    return (value + 2**63) % 2**64 - 2**63
