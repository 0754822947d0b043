"""Errors raised by the operator tooling.

Each carries a message written for the person at the terminal: the CLI prints it on stderr,
without a traceback, and exits with status 1.
"""

from __future__ import annotations

from headrace.errors import HeadraceError


class OpsError(HeadraceError):
    """Base class of the CLI's errors; ``str(error)`` is the message shown to the user."""


class BrokerUnreachableError(OpsError):
    """No broker in ``bootstrap.servers`` answered within the request timeout."""


class TopicExistsError(OpsError):
    """A topic to be created already exists."""


class UnknownTopicError(OpsError):
    """A topic (or a partition of it) named by the user does not exist."""


class UnknownGroupError(OpsError):
    """A consumer group named by the user does not exist (no members, no committed offsets)."""


class GroupActiveError(OpsError):
    """An operation that needs an inactive group (Empty or Dead) met one with live members."""


class UnknownTransactionError(OpsError):
    """A transactional id named by the user is unknown to its transaction coordinator."""


class InvalidConfigError(OpsError):
    """The broker refused a config name or value (Kafka's INVALID_CONFIG)."""


class KafkaRequestError(OpsError):
    """A broker rejected a request, or it did not complete in time."""


class DeliveryError(OpsError):
    """At least one produced record was not acknowledged by the broker."""


class InvalidInputError(OpsError):
    """Input read from stdin, or a combination of options, cannot be processed."""


class VerificationError(OpsError):
    """The demo read back something other than what it wrote."""
