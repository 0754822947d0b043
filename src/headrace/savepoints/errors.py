"""Errors of savepoints."""

from headrace.errors import HeadraceError


class SavepointError(HeadraceError):
    """Base class: a savepoint cannot be written or read (a checkpoint without a committed
    batch, a folder that is not a savepoint, an output folder that exists)."""


class IncompatibleStateError(SavepointError):
    """A query cannot start from a savepoint: raised while the query is defined, before
    anything runs, naming the operator and what cannot carry over (a changed key or
    window, a state schema version with no migration)."""
