"""Errors of the real-time path (``headrace.realtime``)."""

from __future__ import annotations

from headrace.errors import HeadraceError


class RealtimeError(HeadraceError):
    """Base class of the errors raised by ``headrace.realtime``."""


class RuleError(RealtimeError, ValueError):
    """A rule or rule set that cannot be compiled (bad threshold, unknown column, ...)."""


class NotRealTimeError(RealtimeError):
    """A plan that Spark's Real-Time Mode cannot run: a Python operator sits on it."""
