"""Errors of the event-time toolkit."""

from headrace.errors import HeadraceError


class StreamingError(HeadraceError):
    """Base class of the toolkit's errors."""


class SpecError(StreamingError):
    """A window, aggregate, join or lateness setting is invalid; raised when the query is
    defined, never inside a task."""
