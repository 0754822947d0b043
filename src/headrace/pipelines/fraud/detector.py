"""The per-card detector: ``rules.CardState`` kept in Spark state by transformWithState.

Keyed by card id, event-time mode (Spark's watermark through
``headrace.streaming.with_spark_watermark``). Within a micro-batch a card's transactions
are evaluated in event-time order. A transaction behind the watermark by more than the
allowed lateness is not evaluated: it comes out as ``late`` (the pipeline's side
output). A card's state is dropped after ``keep_ms`` of event time without transactions.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from pyspark.sql import Row
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)
from pyspark.sql.types import StringType, StructField, StructType

from headrace.pipelines.fraud.rules import CardState, Thresholds, Txn, score
from headrace.streaming.timeutil import from_ms, to_ms

OUTPUT_DDL = ("kind string, card_id string, txn_id string, user_id string, "
              "event_time timestamp, amount double, city string, reasons array<string>, "
              "score double, lateness_ms long, event string")

_STATE = StructType([StructField("v", StringType())])


class FraudDetector(StatefulProcessor):
    def __init__(self, thresholds: Thresholds, allowed_lateness_ms: int) -> None:
        self.th = thresholds
        self.lateness = allowed_lateness_ms

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.state = handle.getValueState("card", _STATE)

    def handleInputRows(self, key: Any, rows: Iterator[Row],
                        timerValues: TimerValues) -> Iterator[Row]:
        card_id = key[0]
        watermark = timerValues.getCurrentWatermarkInMs()
        stored = self.state.get() if self.state.exists() else None
        card = CardState.from_json(json.loads(stored[0])) if stored else CardState()
        out: list[Row] = []
        for r in sorted(rows, key=lambda r: (to_ms(r["event_time"]), r["txn_id"])):
            t = to_ms(r["event_time"])
            if watermark > 0 and t < watermark - self.lateness:
                out.append(Row(kind="late", card_id=card_id, txn_id=r["txn_id"],
                               user_id=r["user_id"], event_time=from_ms(t),
                               amount=r["amount"], city=r["city"], reasons=None, score=None,
                               lateness_ms=watermark - t,
                               event=json.dumps(r.asDict(), default=str, sort_keys=True)))
                continue
            txn = Txn(r["txn_id"], t, r["lat"], r["lon"], r["amount"], r["city"])
            reasons = card.evaluate(txn, r["avg_amount"], r["std_amount"], self.th)
            if reasons:
                out.append(Row(kind="alert", card_id=card_id, txn_id=r["txn_id"],
                               user_id=r["user_id"], event_time=from_ms(t),
                               amount=r["amount"], city=r["city"], reasons=reasons,
                               score=score(reasons), lateness_ms=None, event=None))
        if card.recent:
            self.state.update((json.dumps(card.to_json()),))
            self.handle.registerTimer(card.recent[-1].t + self.th.keep_ms)
        return iter(out)

    def handleExpiredTimer(self, key: Any, timerValues: TimerValues,
                           expiredTimerInfo: ExpiredTimerInfo) -> Iterator[Row]:
        stored = self.state.get() if self.state.exists() else None
        if stored is None:
            return iter([])
        card = CardState.from_json(json.loads(stored[0]))
        if not card.recent or card.recent[-1].t + self.th.keep_ms <= \
                timerValues.getCurrentWatermarkInMs():
            self.state.clear()
        return iter([])
