"""State per bucket of keys, shared by the toolkit's stateful processors (``windowed``, the
stream-table joins, the fraud detector): one ValueState holding a pickled ``(keys, timer)``
pair per bucket (``keys``: a map from key to its state, or, for the columnar window
processor, from column name to a numpy column of its table), and the bucket's one
event-time timer.

Python transformWithState pays a JVM round trip per state call; one value and one timer
per bucket keep that to a few calls per bucket and micro-batch, whatever the keys.
"""

from __future__ import annotations

import io
import pickle
from typing import Any

from pyspark.sql.streaming.stateful_processor import StatefulProcessorHandle
from pyspark.sql.types import BinaryType, StructField, StructType

VALUE_SCHEMA = StructType([StructField("keys", BinaryType())])


def load(state: Any) -> tuple[bytes | None, dict[Any, Any], int | None]:
    """The bucket's stored bytes (to detect changes), its key map and registered timer."""
    stored = state.get()
    if stored is None:
        return None, {}, None
    keys, timer = pickle.loads(stored[0])
    return stored[0], keys, timer


def store(handle: StatefulProcessorHandle, state: Any, before: bytes | None,
          keys: dict[Any, Any], registered: int | None, wanted: int | None, *,
          memo: bool = True) -> None:
    """Move the bucket's timer from ``registered`` to ``wanted`` and write ``keys`` back
    (cleared when empty, untouched when unchanged). ``memo=False`` pickles without the
    memo (``_dumps``): for state without objects worth sharing."""
    if registered != wanted:
        if registered is not None:
            handle.deleteTimer(registered)
        if wanted is not None:
            handle.registerTimer(wanted)
    if not keys:
        if before is not None:
            state.clear()
        return
    value = (keys, wanted)
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
