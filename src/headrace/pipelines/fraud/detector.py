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

import numpy as np
import pandas as pd
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessorHandle,
    TimerValues,
)

from headrace.pipelines.fraud.rules import CardState, Thresholds, Txn, anomalous, score
from headrace.streaming import buckets
from headrace.streaming.frames import python_values, utc_times
from headrace.streaming.timeutil import epoch_ms
from headrace.streaming.windows import BUCKET

OUTPUT_DDL = ("kind string, card_id string, txn_id string, user_id string, "
              "event_time timestamp, amount double, city string, reasons array<string>, "
              "score double, lateness_ms long, event string")
_OUTPUT = ("kind", "card_id", "txn_id", "user_id", "event_time", "amount", "city", "reasons",
           "score", "lateness_ms", "event")
# the input columns a transaction is evaluated from, in this order
_INPUT = ("card_id", "txn_id", "user_id", "amount", "city", "lat", "lon", "avg_amount",
          "std_amount")


# card id -> (the watermark at which the card's state is dropped, *CardState.to_stored())
Cards = dict[str, tuple[Any, ...]]
OPERATOR = "fraud.detector"
STATE_VERSION = 1
"""The layout of ``Cards``; a change ships a migration (``headrace.savepoints.migrations``)."""


class FraudDetector(buckets.BucketProcessor):
    """On the pandas flavour of transformWithState: a bucket's rows come as columns, and
    each transaction is evaluated from plain values, without a Row per input or output."""

    memo = False  # flat tuples of numbers and per-row strings: nothing the memo would share

    def __init__(self, thresholds: Thresholds, allowed_lateness_ms: int,
                 params: dict[str, Any] | None = None,
                 resume: buckets.Resume | None = None) -> None:
        self.th = thresholds
        self.lateness = allowed_lateness_ms
        self.head = buckets.header(OPERATOR, STATE_VERSION, params or {})
        self.resume = resume

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.state = self.bucket_state = handle.getValueState("cards", buckets.VALUE_SCHEMA)

    def _store(self, before: bytes | None, cards: Cards, watermark: int,
               registered: int | None) -> None:
        """Drop the cards whose time is up, write the bucket back, and keep its one timer
        at the earliest expiry left."""
        dead: list[str] = []
        wanted: int | None = None
        for card_id, stored in cards.items():
            expires = stored[0]
            if expires <= watermark:
                dead.append(card_id)
            elif wanted is None or expires < wanted:
                wanted = expires
        for card_id in dead:
            del cards[card_id]
        # flat tuples of numbers and per-row strings: nothing the memo would share
        buckets.store(self.handle, self.state, before, cards, registered, wanted, memo=False,
                      head=self.head)

    def _load(self) -> tuple[bytes | None, Cards, int | None]:
        """The bucket, its cards in today's form (a bucket written before 2026-11-26 held
        ``(state as a dict, expiry)`` per card)."""
        before, cards, timer = buckets.load(self.state)
        if cards and isinstance(next(iter(cards.values()))[0], dict):
            cards = {c: (expires, *CardState.from_stored(d).to_stored())
                     for c, (d, expires) in cards.items()}
        return before, cards, timer

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        watermark = self.watermark(timerValues)
        before, cards, timer = self._load()
        frames = [f for f in rows if len(f)]
        out: list[tuple[Any, ...]] = []
        if frames:
            batch = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
            columns = [python_values(batch[c]) for c in _INPUT]
            # one tuple per transaction: its position, time and _INPUT values
            txns = list(zip(range(len(batch)), epoch_ms(batch["event_time"]).tolist(),
                            *columns, strict=True))
            card_ids = columns[0]
            rest = np.ones(len(batch), dtype=bool)
            if self._lone_allowed:
                once = np.flatnonzero(~batch["card_id"].duplicated(keep=False).to_numpy())
                first = [i for i in once.tolist() if card_ids[i] not in cards]
                self._first(first, txns, batch, cards, watermark, out)
                rest[first] = False
            by_card: dict[str, list[tuple[Any, ...]]] = {}
            for i in np.flatnonzero(rest).tolist():
                by_card.setdefault(card_ids[i], []).append(txns[i])
            for card_id, mine in by_card.items():
                mine.sort(key=lambda txn: (txn[1], txn[3]))  # event-time order, ties by id
                self._card(card_id, mine, batch, cards, watermark, out)
        self._store(before, cards, watermark, timer)
        return self._frames(out)

    @property
    def _lone_allowed(self) -> bool:
        """Whether a card's first transaction can raise only the amount anomaly: true
        unless a threshold lets one transaction make a velocity or card-testing burst."""
        return self.th.velocity_count > 1 and self.th.tiny_count > 1

    def _first(self, positions: list[int], txns: list[tuple[Any, ...]], batch: pd.DataFrame,
               cards: Cards, watermark: int, out: list[tuple[Any, ...]]) -> None:
        """``_card`` for the commonest case, cards without state and with one transaction
        in the batch: nothing for velocity, travel or card testing to compare it with, so
        the amount rule alone decides, and the card's state (``CardState.to_stored``)
        holds just this transaction."""
        keep = self.th.keep_ms
        late_before = watermark - self.lateness if watermark > 0 else None
        for i in positions:
            txn = txns[i]
            _, t, card_id, txn_id, user_id, amount, city, lat, lon, mean, std = txn
            if late_before is not None and t < late_before:
                self._late(card_id, txn, batch, watermark, out)
                continue
            fired = None
            if anomalous(amount, mean, std, self.th):
                fired = {"amount_anomaly": t}
                out.append(("alert", card_id, txn_id, user_id, t, amount, city,
                            ["amount_anomaly"], score(["amount_anomaly"]), None, None))
            cards[card_id] = (t + keep, fired, txn_id, t, lat, lon, amount, city)

    def _late(self, card_id: str, txn: tuple[Any, ...], batch: pd.DataFrame, watermark: int,
              out: list[tuple[Any, ...]]) -> None:
        i, t, _, txn_id, user_id, amount, city = txn[:7]
        # a null double is NaN in a pandas row; the event's JSON says null
        event = {k: None if isinstance(v, float) and v != v else v
                 for k, v in batch.iloc[i].to_dict().items() if k != BUCKET}
        out.append(("late", card_id, txn_id, user_id, t, amount, city, None, None,
                    watermark - t, json.dumps(event, default=str, sort_keys=True)))

    def _card(self, card_id: str, txns: list[tuple[Any, ...]], batch: pd.DataFrame,
              cards: Cards, watermark: int, out: list[tuple[Any, ...]]) -> None:
        stored = cards.get(card_id)
        card = CardState.from_stored(stored[1:]) if stored else CardState()
        for txn in txns:
            _, t, _, txn_id, user_id, amount, city, lat, lon, mean, std = txn
            if watermark > 0 and t < watermark - self.lateness:
                self._late(card_id, txn, batch, watermark, out)
                continue
            reasons = card.evaluate(Txn(txn_id, t, lat, lon, amount, city), mean, std,
                                    self.th)
            if reasons:
                out.append(("alert", card_id, txn_id, user_id, t, amount, city, reasons,
                            score(reasons), None, None))
        if card.recent:
            cards[card_id] = (card.recent[-1].t + self.th.keep_ms, *card.to_stored())

    @staticmethod
    def _frames(out: list[tuple[Any, ...]]) -> Iterator[pd.DataFrame]:
        if not out:
            return iter(())
        data: dict[str, Any] = {name: pd.Series(values, dtype=object)
                                for name, values in zip(_OUTPUT, zip(*out, strict=True),
                                                        strict=True)}
        data["event_time"] = utc_times(np.array(data["event_time"].tolist(), dtype="int64"))
        return iter([pd.DataFrame(data)])

    def handleExpiredTimer(self, key: Any, timerValues: TimerValues,
                           expiredTimerInfo: ExpiredTimerInfo) -> Iterator[pd.DataFrame]:
        before, cards, _ = self._load()
        # The timer that fired was the bucket's only one, and it is gone.
        self._store(before, cards, self.watermark(timerValues), None)
        return iter(())
