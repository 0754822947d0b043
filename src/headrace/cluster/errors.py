"""The clusters' one error type."""

from __future__ import annotations

from headrace.errors import HeadraceError


class ClusterError(HeadraceError):
    """A cluster process did not start, stop or answer as expected, or a cluster's state
    directory is missing or damaged."""
