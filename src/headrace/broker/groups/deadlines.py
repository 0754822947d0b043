"""Deadlines of the group coordinators: a min-heap of (loop time, group id) and one loop
timer armed at the earliest, as Kafka's timer wheel fires each session at its deadline.

A coordinator adds a deadline whenever it sets one (a session restarts, a rebalance
starts); entries are never removed when a deadline moves: one that comes due is just a
reason to check its group, and checking a group is idempotent. ``due`` pops the groups
whose deadlines have come; the coordinators call it from the timer and before serving any
request that looks at a group, so a request handled after a deadline always sees its
effect, however late the timer fires on a busy loop.
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Callable

RETRY_SECONDS = 0.001


class Deadlines:
    """Deadlines by group id. ``on_due`` is called on the event loop when the earliest
    deadline comes (it should call ``due``). Event loop only; without a running loop
    (tests driving a coordinator by hand) no timer is armed and ``due`` does the work."""

    def __init__(self, on_due: Callable[[], None]) -> None:
        self._heap: list[tuple[float, str]] = []
        self._on_due = on_due
        self._timer: asyncio.TimerHandle | None = None
        self._armed_at = float("inf")

    def add(self, when: float, group_id: str) -> None:
        """Remember that ``group_id`` must be checked at loop time ``when``."""
        heapq.heappush(self._heap, (when, group_id))
        if when < self._armed_at:
            self._arm(when)

    def due(self, now: float) -> set[str]:
        """Pop and return the groups with a deadline at or before ``now``."""
        found: set[str] = set()
        while self._heap and self._heap[0][0] <= now:
            found.add(heapq.heappop(self._heap)[1])
        return found

    def next(self) -> float:
        """The earliest deadline not yet popped (inf if none)."""
        return self._heap[0][0] if self._heap else float("inf")

    def __len__(self) -> int:
        return len(self._heap)

    def _arm(self, when: float) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._armed_at = when
        self._timer = loop.call_at(when, self._fire)

    def _fire(self) -> None:
        self._timer, self._armed_at = None, float("inf")
        try:
            self._on_due()
        finally:
            if self._heap:
                # A deadline left behind is one the coordinator's clock has not reached
                # yet (a timer may fire a hair early; tests move a clock of their own):
                # look again a millisecond later rather than spin.
                retry = asyncio.get_running_loop().time() + RETRY_SECONDS
                self._arm(max(self._heap[0][0], retry))
