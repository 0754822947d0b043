"""Stand-ins for Spark's transformWithState handle, for driving a stateful processor in
process: one value per state variable, a set of timers (the test fires them as Spark
does: once the watermark reaches them), and the timer values a call receives. Spark's own
runs of the same processors are the Spark tests; these let thousands of batches run in
seconds."""

from __future__ import annotations

from typing import Any


class Value:
    def __init__(self) -> None:
        self.value: Any = None

    def get(self) -> Any:
        return self.value

    def update(self, value: Any) -> None:
        self.value = value

    def clear(self) -> None:
        self.value = None


class Handle:
    def __init__(self) -> None:
        self.timers: set[int] = set()

    def getValueState(self, name: str, schema: Any) -> Value:
        return Value()

    def registerTimer(self, at: int) -> None:
        self.timers.add(at)

    def deleteTimer(self, at: int) -> None:
        self.timers.remove(at)


class TimerValues:
    def __init__(self, watermark: int) -> None:
        self.watermark = watermark

    def getCurrentWatermarkInMs(self) -> int:
        return self.watermark
