"""The per-card detector: ``rules.CardState`` kept in Spark state by transformWithState.

Event-time mode (Spark's watermark through ``headrace.streaming.with_spark_watermark``),
grouped by a bucket of card ids (``headrace.streaming.windows.BUCKET``): one pickled value
per bucket holds every card's state and when it expires, and one timer per bucket (the
earliest expiry) cleans up; a micro-batch costs a few state calls per bucket, not per
card. Within a micro-batch a card's transactions are evaluated in event-time order. A
transaction behind the watermark by more than the allowed lateness is not evaluated: it
comes out as ``late`` (the pipeline's side output). A card's state is dropped once the
watermark reaches ``keep_ms`` of event time after its newest transaction.
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

from headrace.pipelines.fraud.rules import CardState, Thresholds, Txn, score
from headrace.streaming import buckets
from headrace.streaming.timeutil import from_ms, to_ms
from headrace.streaming.windows import BUCKET

OUTPUT_DDL = ("kind string, card_id string, txn_id string, user_id string, "
              "event_time timestamp, amount double, city string, reasons array<string>, "
              "score double, lateness_ms long, event string")

# card id -> (CardState.to_json(), the watermark at which the card's state is dropped)
Cards = dict[str, tuple[dict[str, Any], int]]


class FraudDetector(StatefulProcessor):
    def __init__(self, thresholds: Thresholds, allowed_lateness_ms: int) -> None:
        self.th = thresholds
        self.lateness = allowed_lateness_ms

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.state = handle.getValueState("cards", buckets.VALUE_SCHEMA)

    def _store(self, before: bytes | None, cards: Cards, watermark: int,
               registered: int | None) -> None:
        """Drop the cards whose time is up, write the bucket back, and keep its one timer
        at the earliest expiry left."""
        for card_id in [c for c, (_, expires) in cards.items() if expires <= watermark]:
            del cards[card_id]
        wanted = min((expires for _, expires in cards.values()), default=None)
        buckets.store(self.handle, self.state, before, cards, registered, wanted)

    def handleInputRows(self, key: Any, rows: Iterator[Row],
                        timerValues: TimerValues) -> Iterator[Row]:
        watermark = timerValues.getCurrentWatermarkInMs()
        before, cards, timer = buckets.load(self.state)
        by_card: dict[str, list[Row]] = {}
        for r in rows:
            by_card.setdefault(r["card_id"], []).append(r)
        out: list[Row] = []
        for card_id, its_rows in by_card.items():
            self._card(card_id, its_rows, cards, watermark, out)
        self._store(before, cards, watermark, timer)
        return iter(out)

    def _card(self, card_id: str, rows: list[Row], cards: Cards, watermark: int,
              out: list[Row]) -> None:
        stored = cards.get(card_id)
        card = CardState.from_json(stored[0]) if stored else CardState()
        for r in sorted(rows, key=lambda r: (to_ms(r["event_time"]), r["txn_id"])):
            t = to_ms(r["event_time"])
            if watermark > 0 and t < watermark - self.lateness:
                event = {k: v for k, v in r.asDict().items() if k != BUCKET}
                out.append(Row(kind="late", card_id=card_id, txn_id=r["txn_id"],
                               user_id=r["user_id"], event_time=from_ms(t),
                               amount=r["amount"], city=r["city"], reasons=None, score=None,
                               lateness_ms=watermark - t,
                               event=json.dumps(event, default=str, sort_keys=True)))
                continue
            txn = Txn(r["txn_id"], t, r["lat"], r["lon"], r["amount"], r["city"])
            reasons = card.evaluate(txn, r["avg_amount"], r["std_amount"], self.th)
            if reasons:
                out.append(Row(kind="alert", card_id=card_id, txn_id=r["txn_id"],
                               user_id=r["user_id"], event_time=from_ms(t),
                               amount=r["amount"], city=r["city"], reasons=reasons,
                               score=score(reasons), lateness_ms=None, event=None))
        if card.recent:
            cards[card_id] = (card.to_json(), card.recent[-1].t + self.th.keep_ms)

    def handleExpiredTimer(self, key: Any, timerValues: TimerValues,
                           expiredTimerInfo: ExpiredTimerInfo) -> Iterator[Row]:
        before, cards, _ = buckets.load(self.state)
        # The timer that fired was the bucket's only one, and it is gone.
        self._store(before, cards, timerValues.getCurrentWatermarkInMs(), None)
        return iter([])
