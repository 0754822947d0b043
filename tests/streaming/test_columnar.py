"""The columnar window processor against the per-event one: fed the same micro-batches
(events out of order, late ones, nulls; tumbling, hopping, session and sliding windows; allowed
lateness; both emit modes), both give the same rows, batch for batch, and fire timers
alike.

Spark's own runs of both are the stream-vs-batch oracle and the windowing tests; here a
stand-in for Spark's state handle (one value, a set of timers, fired as Spark fires them:
once the watermark reaches them, in a batch without events for the bucket) lets thousands
of batch sequences run in seconds.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from headrace.streaming import (
    avg_of,
    count,
    hopping,
    max_of,
    min_of,
    session,
    sliding,
    sum_of,
    tumbling,
)
from headrace.streaming.columnar import ColumnarWindowProcessor, handles
from headrace.streaming.processor import WindowProcessor
from headrace.streaming.window_spec import EVENT_JSON, WindowedSpec
from tests.streaming.stand_ins import Handle, TimerValues


def _rows(frames: Iterator[pd.DataFrame]) -> list[str]:
    out = []
    for frame in frames:
        for row in frame.to_dict("records"):
            norm = {k: None if v is None or v is pd.NaT or (isinstance(v, float) and math.isnan(v))
                    else round(v, 6) if isinstance(v, float) else v for k, v in row.items()}
            out.append(repr(sorted(norm.items())))
    return sorted(out)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**32))
def test_columnar_windows_equal_the_per_event_processor(seed: int) -> None:
    rng = random.Random(seed)
    window = rng.choice([tumbling(rng.choice([10, 60, 100])), hopping(60, rng.choice([20, 25, 60])),
                         hopping(100, 30), session(rng.choice([5, 20, 50])),
                         session(rng.choice([5, 20, 50])), sliding(rng.choice([10, 60, 100]))])
    spec = WindowedSpec(("k",), "ts", window, (count(), sum_of("x"), avg_of("x"), min_of("x"),
                                               max_of("y")),
                        rng.choice([0, 0, 30, 200]), rng.choice(["final", "updates"]))
    assert handles(spec)
    processors = [WindowProcessor(spec), ColumnarWindowProcessor(spec)]
    handles_ = [Handle(), Handle()]
    for p, h in zip(processors, handles_, strict=True):
        p.init(h)  # type: ignore[arg-type]
    watermark, latest = -1, 0
    for b in range(rng.randint(1, 8)):
        n = rng.randint(0, 30)
        times = [max(0, b * 50 + rng.randint(-150, 60)) for _ in range(n)]
        events = pd.DataFrame({
            "k": [rng.choice(["a", "b", None]) for _ in range(n)],
            "ts": pd.Series(np.array(times, dtype="int64").astype("datetime64[ms]"))
            .astype("datetime64[ns]"),
            "x": pd.Series([rng.choice([None, rng.uniform(-10, 10), rng.randint(-5, 5)])
                            for _ in range(n)], dtype="float64"),
            "y": pd.Series([rng.choice([None, 1.0, 2.0]) for _ in range(n)], dtype="float64"),
            EVENT_JSON: [f"e{b}-{i}" for i in range(n)]})
        outputs = []
        for p, h in zip(processors, handles_, strict=True):
            if n:
                frames = p.handleInputRows((0,), iter([events]),
                                           TimerValues(watermark))  # type: ignore[arg-type]
            elif h.timers and min(h.timers) <= watermark:
                h.timers.discard(min(h.timers))
                frames = p.handleExpiredTimer((0,), TimerValues(watermark), None)  # type: ignore[arg-type]
            else:
                frames = iter(())
            outputs.append(_rows(frames))
        assert outputs[0] == outputs[1], (b, watermark)
        assert handles_[0].timers == handles_[1].timers
        latest = max([latest, *times])
        watermark = max(watermark, latest - rng.choice([0, 20, 50]))


def test_approx_distinct_keeps_the_per_event_processor() -> None:
    from headrace.streaming import approx_distinct

    base = WindowedSpec(("k",), "ts", tumbling(10), (count(),), 0, "final")
    assert handles(base)
    assert handles(WindowedSpec(("k",), "ts", session(10), (count(),), 0, "final"))
    assert handles(WindowedSpec(("k",), "ts", sliding(10), (count(),), 0, "final"))
    assert not handles(WindowedSpec(("k",), "ts", tumbling(10), (approx_distinct("x"),), 0,
                                    "final"))
