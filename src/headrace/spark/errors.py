"""Errors of the Spark connector. Raised on the driver (options, planning) or in tasks."""

from headrace.errors import HeadraceError


class SparkConnectorError(HeadraceError):
    """Base class of the connector's errors."""


class OptionError(SparkConnectorError):
    """A ``format("headrace")`` option is missing, unknown or has a bad value."""


class DataLossError(SparkConnectorError):
    """Offsets a query still had to read are gone (retention, a deleted topic or partition)
    and ``failOnDataLoss`` is true (the default)."""


class SinkError(SparkConnectorError):
    """A task could not write its rows (delivery failed, transaction aborted or fenced)."""


class Invalid(ValueError):
    """A value does not fit the schema; the message says where and why.

    Raised and caught inside a read task (``events``, ``registry_values``): the record
    becomes a dead letter, so it never reaches a caller. Hence a ``ValueError``, not a
    ``SparkConnectorError``."""
