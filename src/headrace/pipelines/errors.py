"""Errors of the concrete pipelines (``headrace.pipelines``)."""

from __future__ import annotations

from headrace.errors import HeadraceError


class PipelineError(HeadraceError):
    """Base class of the errors raised by ``headrace.pipelines``."""
