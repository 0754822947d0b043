"""Kafka error codes, and the protocol component's errors.

Broker code raises ``KafkaProtocolError`` carrying a code; handlers turn it into the
code in their response at the boundary.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import IntEnum

from headrace.errors import HeadraceError


class ErrorCode(IntEnum):
    """Error codes as numbered by Apache Kafka (names in Kafka's spelling)."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    MESSAGE_TOO_LARGE = 10
    OFFSET_METADATA_TOO_LARGE = 12
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    INVALID_REQUIRED_ACKS = 21
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REQUEST = 42
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    OPERATION_NOT_ATTEMPTED = 55
    TRANSACTIONAL_ID_NOT_FOUND = 105
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    MEMBER_ID_REQUIRED = 79
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    UNSTABLE_OFFSET_COMMIT = 88
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    UNKNOWN_PRODUCER_ID = 59
    TRANSACTION_COORDINATOR_FENCED = 52
    PRODUCER_FENCED = 90
    INVALID_REPLICA_ASSIGNMENT = 39
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    INVALID_CONFIG = 40
    POLICY_VIOLATION = 44
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    SECURITY_DISABLED = 54
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    UNSUPPORTED_COMPRESSION_TYPE = 76
    INVALID_RECORD = 87
    KAFKA_STORAGE_ERROR = 56
    UNKNOWN_TOPIC_ID = 100
    INCONSISTENT_TOPIC_ID = 103
    RESOURCE_NOT_FOUND = 91
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    SASL_AUTHENTICATION_FAILED = 58
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113
    INVALID_REGULAR_EXPRESSION = 128


class ProtocolError(HeadraceError):
    """Malformed bytes on the wire or in a record batch."""


class KafkaProtocolError(HeadraceError):
    """An error that maps to a Kafka error code in a response."""

    def __init__(self, code: ErrorCode, message: str = "") -> None:
        super().__init__(message or code.name)
        self.code = code


class RecordValidationError(KafkaProtocolError):
    """Records of one batch refused one by one (Kafka's RecordValidationException): the
    whole batch is rejected, and ``record_errors`` names each refused record by its index
    in the batch, with a message (Produce v8+ answers them in ``record_errors``)."""

    def __init__(self, code: ErrorCode, message: str,
                 record_errors: Sequence[tuple[int, str]]) -> None:
        super().__init__(code, message)
        self.record_errors = tuple(record_errors)
