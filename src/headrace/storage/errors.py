"""Storage errors."""

from __future__ import annotations

from headrace.errors import HeadraceError


class StorageError(HeadraceError):
    """A log could not be read or written."""


class OffsetOutOfRangeError(StorageError):
    """A read asked for an offset outside ``[log_start_offset, log_end_offset]``."""


class TopicExistsError(StorageError):
    """CreateTopics for a name that is taken."""


class UnknownTopicError(StorageError):
    """The topic or partition does not exist."""


class InvalidTopicError(StorageError):
    """The topic name is not legal in Kafka."""


class InvalidConfigError(StorageError, ValueError):
    """A topic config name or value is not valid (Kafka's INVALID_CONFIG)."""


class PolicyViolationError(StorageError):
    """The operation is not allowed by the topic's configuration (POLICY_VIOLATION)."""


class RemoteReadRequiredError(StorageError):
    """The offset is below the local log start, in the object store: a remote read serves
    it (never a client-visible error: the broker routes such reads to its remote reader)."""
