"""Migrations of operator state between schema versions.

An operator whose state layout changes raises its ``STATE_VERSION`` and registers, next to
it, one step from each older version to the next::

    @migrations.register("windowed.columnar", from_version=1)
    def _v1_to_v2(keys, timer):
        ...
        return new_keys, timer

A savepoint (or a corpus checkpoint) written by version n then starts a query of version
m > n through the steps n -> n+1 -> ... -> m, applied bucket by bucket when the operator
takes its initial state. A missing step is a refusal before the query starts
(``IncompatibleStateError``), never a silent loss of state.
"""

from __future__ import annotations

from collections.abc import Callable

from headrace.savepoints.errors import IncompatibleStateError
from headrace.savepoints.state import Migration

_STEPS: dict[tuple[str, int], Migration] = {}


def register(operator: str, from_version: int) -> Callable[[Migration], Migration]:
    """Register ``fn`` as ``operator``'s step from ``from_version`` to the next. Steps
    must be module-level functions (they travel to Python workers by reference)."""
    def add(fn: Migration) -> Migration:
        _STEPS[(operator, from_version)] = fn
        return fn
    return add


def unregister(operator: str, from_version: int) -> None:
    """Forget a step (tests register layouts of their own)."""
    _STEPS.pop((operator, from_version), None)


def chain(operator: str, from_version: int, to_version: int) -> tuple[Migration, ...]:
    """The steps from ``from_version`` up to ``to_version``. Raises
    ``IncompatibleStateError`` for a newer savepoint than the code or a missing step."""
    if from_version > to_version:
        raise IncompatibleStateError(
            f"operator {operator}: the savepoint's state is schema version {from_version}, "
            f"newer than this headrace's {to_version}; start it with a newer headrace")
    steps = []
    for v in range(from_version, to_version):
        step = _STEPS.get((operator, v))
        if step is None:
            raise IncompatibleStateError(
                f"operator {operator}: no migration of its state from schema version {v} "
                f"to {v + 1}")
        steps.append(step)
    return tuple(steps)
