"""Aggregates: state folded from events, and commands that decide new events.

An aggregate subclass holds its state in plain attributes, folds one event at a time in
``apply`` (which must not fail for an event the log holds: validation belongs in commands)
and exposes commands as methods that check the current state and return the events to
append (they never change ``self``)::

    class Account(Aggregate):
        def __init__(self, aggregate_id: str) -> None:
            super().__init__(aggregate_id)
            self.balance = 0

        def apply(self, event: object) -> None:
            match event:
                case Deposited(amount=a): self.balance += a
                case Withdrawn(amount=a): self.balance -= a

        def withdraw(self, amount: int) -> list[object]:
            if amount > self.balance:
                raise Overdraft(...)
            return [Withdrawn(amount)]

``Repository.execute(id, lambda a: a.withdraw(50), command_id=...)`` loads the aggregate,
runs the command and appends its events expecting the version it loaded.
"""

from __future__ import annotations

from typing import Any, ClassVar


class Aggregate:
    """Base class. ``id``; ``version``: how many events were folded (0: none);
    ``recorded_at``: the last folded event's time (ms)."""

    #: The name stored in each event's envelope; defaults to the class name.
    aggregate_type: ClassVar[str] = ""
    #: Bump when the shape of ``snapshot_state`` changes: older snapshots are then ignored.
    snapshot_schema: ClassVar[int] = 1

    def __init__(self, aggregate_id: str) -> None:
        self.id = aggregate_id
        self.version = 0
        self.recorded_at = 0

    @classmethod
    def type_name(cls) -> str:
        return cls.aggregate_type or cls.__name__

    def apply(self, event: Any) -> None:
        """Fold one event into the state. Subclasses implement it."""
        raise NotImplementedError(f"{type(self).__name__}.apply")

    def snapshot_state(self) -> dict[str, Any]:
        """The state as JSON values; the default takes every attribute but the id, version
        and time. Override for state that is not JSON."""
        return {k: v for k, v in vars(self).items()
                if k not in ("id", "version", "recorded_at")}

    def restore_state(self, state: dict[str, Any]) -> None:
        """Inverse of ``snapshot_state`` on a fresh instance."""
        for name, value in state.items():
            setattr(self, name, value)
