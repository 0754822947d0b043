"""State per bucket of keys, shared by the toolkit's stateful processors (``windowed``, the
stream-table joins, the fraud detector): one ValueState holding a pickled ``(keys, timer)``
pair per bucket (``keys``: a map from key to its state, or, for the columnar window
processor, from column name to a numpy column of its table), and the bucket's one
event-time timer.

Python transformWithState pays a JVM round trip per state call; one value and one timer
per bucket keep that to a few calls per bucket and micro-batch, whatever the keys.

Since savepoints (``headrace.savepoints``) the pickled value is ``(keys, timer, header)``:
the header (``headrace.savepoints.state.header``) names the operator, its state schema version and the parameters
its state depends on, so a savepoint can tell what a checkpoint's operators hold. A value
of two items is a bucket written before headers (schema version 1 of every operator).
``restore`` is every processor's ``handleInitialState``: a bucket from a savepoint,
migrated to the running version, stored with its timer.
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Sequence
from typing import Any

import pandas as pd
from pyspark.sql.streaming.stateful_processor import (
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)
from pyspark.sql.types import BinaryType, StructField, StructType

from headrace.savepoints.state import Migration, Resume, decode, header

VALUE_SCHEMA = StructType([StructField("keys", BinaryType())])

__all__ = ["VALUE_SCHEMA", "BucketProcessor", "Migration", "Resume", "decode", "header",
           "load", "restore", "store"]

def load(state: Any) -> tuple[bytes | None, dict[Any, Any], int | None]:
    """The bucket's stored bytes (to detect changes), its key map and registered timer."""
    stored = state.get()
    if stored is None:
        return None, {}, None
    value = pickle.loads(stored[0])
    return stored[0], value[0], value[1]


def restore(handle: StatefulProcessorHandle, state: Any, frame: pd.DataFrame | Any,
            head: str | None, migrations: Sequence[Migration] = (), *,
            memo: bool = True) -> None:
    """``handleInitialState``: ``frame`` holds the bucket's value from a savepoint (column
    ``keys``, one row); apply ``migrations`` (oldest first), store it under this
    operator's ``head`` and register its timer. Called once per bucket, first batch only."""
    value = frame["keys"].iloc[0] if isinstance(frame, pd.DataFrame) else frame["keys"]
    keys, timer, _ = decode(bytes(value))
    for step in migrations:
        keys, timer = step(keys, timer)
    store(handle, state, None, keys, None, timer, memo=memo, head=head)


def store(handle: StatefulProcessorHandle, state: Any, before: bytes | None,
          keys: dict[Any, Any], registered: int | None, wanted: int | None, *,
          memo: bool = True, head: str | None = None) -> None:
    """Move the bucket's timer from ``registered`` to ``wanted`` and write ``keys`` back
    (cleared when empty, untouched when unchanged), with ``head`` (``header()``) when
    given. ``memo=False`` pickles without the memo (``_dumps``): for state without
    objects worth sharing."""
    if registered != wanted:
        if registered is not None:
            handle.deleteTimer(registered)
        if wanted is not None:
            handle.registerTimer(wanted)
    if not keys:
        if before is not None:
            state.clear()
        return
    value: tuple[Any, ...] = (keys, wanted) if head is None else (keys, wanted, head)
    after = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL) if memo else _dumps(value)
    if after != before:
        state.update((after,))


def _dumps(value: Any) -> bytes:
    """``pickle.dumps`` without the memo (``Pickler.fast``): a third of the time for a
    bucket of many small keys, but an object held many times (a dict key such as
    ``"table"`` in every key's state) is written each time. The state must be a tree (no
    object refers to itself); an object it holds twice comes back as two equal copies."""
    out = io.BytesIO()
    pickler = pickle.Pickler(out, protocol=pickle.HIGHEST_PROTOCOL)
    pickler.fast = True
    pickler.dump(value)
    return out.getvalue()


class BucketProcessor(StatefulProcessor):
    """What the toolkit's processors share for savepoints: ``head`` (their ``header()``),
    ``resume`` and the state variable ``bucket_state`` (set in ``init``).
    ``handleInitialState`` takes a savepoint's bucket; ``watermark`` is Spark's, raised
    to the savepoint's."""

    head: str | None = None
    resume: Resume | None = None
    handle: StatefulProcessorHandle
    bucket_state: Any = None
    memo = True

    def handleInitialState(self, key: Any, initialState: Any,
                           timerValues: TimerValues) -> None:
        restore(self.handle, self.bucket_state, initialState, self.head,
                self.resume.migrations if self.resume else (), memo=self.memo)

    def watermark(self, timer_values: TimerValues) -> int:
        now = int(timer_values.getCurrentWatermarkInMs())
        return max(now, self.resume.watermark_ms) if self.resume else now
