"""Broker errors, and the mapping of component errors to Kafka error codes."""

from __future__ import annotations

from headrace.errors import HeadraceError
from headrace.protocol.errors import ErrorCode, KafkaProtocolError, ProtocolError
from headrace.protocol.records import CorruptBatchError, UnsupportedMagicError
from headrace.storage.errors import (
    InvalidConfigError,
    InvalidTopicError,
    OffsetOutOfRangeError,
    PolicyViolationError,
    RemoteReadRequiredError,
    TopicExistsError,
    UnknownTopicError,
)
from headrace.storage.remote_store import RemoteStorageError


class BrokerError(HeadraceError):
    """The broker could not start or serve."""


class FramingError(BrokerError):
    """A request frame could not be parsed; the connection is closed."""


def error_code_for(exc: BaseException) -> ErrorCode:
    """The Kafka error code a handler answers for ``exc`` (UNKNOWN_SERVER_ERROR if none fits)."""
    if isinstance(exc, KafkaProtocolError):
        return exc.code
    if isinstance(exc, UnsupportedMagicError):
        return ErrorCode.INVALID_RECORD  # as Kafka 4 for Produce v3+ (no v0-2 served)
    if isinstance(exc, (CorruptBatchError, ProtocolError)):
        return ErrorCode.CORRUPT_MESSAGE
    if isinstance(exc, UnknownTopicError):
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if isinstance(exc, InvalidTopicError):
        return ErrorCode.INVALID_TOPIC_EXCEPTION
    if isinstance(exc, TopicExistsError):
        return ErrorCode.TOPIC_ALREADY_EXISTS
    if isinstance(exc, RemoteStorageError):
        return ErrorCode.KAFKA_STORAGE_ERROR  # retriable: the object store may come back
    if isinstance(exc, RemoteReadRequiredError):
        return ErrorCode.OFFSET_OUT_OF_RANGE  # tiered data, tiered storage now off
    if isinstance(exc, OffsetOutOfRangeError):
        return ErrorCode.OFFSET_OUT_OF_RANGE
    if isinstance(exc, InvalidConfigError):
        return ErrorCode.INVALID_CONFIG
    if isinstance(exc, PolicyViolationError):
        return ErrorCode.POLICY_VIOLATION
    if isinstance(exc, OSError):
        return ErrorCode.KAFKA_STORAGE_ERROR
    if isinstance(exc, HeadraceError):
        return ErrorCode.INVALID_REQUEST
    return ErrorCode.UNKNOWN_SERVER_ERROR


class BrokerConfigError(BrokerError):
    """The broker's own configuration is wrong (listeners, TLS files): it does not start."""
