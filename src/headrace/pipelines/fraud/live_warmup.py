"""The fraud demo's warm-up: traffic and alerts on cards outside the run, before its
measured traffic.

First, ``WARMUP_SECONDS`` of payments at the run's rate on cards outside the run, none of
which raises an alert (``filler_records``: at most ``FILLER_PER_CARD`` ordinary payments per
card, no profile). The first seconds of traffic at full rate were the slow ones: at 5,000
tx/s every alert above 200 ms of a quiet run fell in its first 22 s, the JVM compiling the
hot paths (JSON parsing, the rule operator, the sink) and every process (broker, sink,
reader) reaching its steady pace while the traffic already came at full rate, with a small
surplus on 2 cores to work the backlog off. After the filler the traffic meets a warm path.

Then the alerts. The real-time path's first alert pays for what nothing before it used:
the rule operator's alert path and the sink's first records (class loading, a cold JIT),
each sink task's first transaction, the alert topic's first read. In a quiet run those
were the run's two slowest alerts, about twice the others'. So the demo then sends a short
burst of tiny payments on ``WARMUP_CARDS`` (ids no run's world uses, no profile): each card
raises one alert (card testing and velocity, the fifth payment), and the cards spread over
the rule operator's two shuffle partitions, so every sink task writes and commits once. The
demo says so, waits until the alerts are read, and keeps them (either path's) out of
precision, recall, the check's agreement and the latency figures (``LiveState.warmup_ms``);
the summary shows them apart. Both paths read the filler too; it raises no alert on either.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from confluent_kafka import Producer

from headrace.pipelines.errors import PipelineError
from headrace.pipelines.fraud.live_view import LiveState

WARMUP_PREFIX = "warmup-"
"""Card ids of the warm-up; a generated world's cards are ``c<prefix><digits>``."""
WARMUP_CARDS = tuple(f"{WARMUP_PREFIX}{i}" for i in range(6))
"""Six cards, in both of the demo's two shuffle partitions (Spark's ``pmod(hash(card),
2)``: 1, 0, 1, 1, 0, 1), so each of the rule operator's tasks and sink tasks has one."""
PAYMENTS_PER_CARD = 5
"""The fifth tiny payment within minutes fires card testing and velocity (``Thresholds``)."""
WARMUP_SECONDS = 10.0
"""How long the filler traffic runs, at the run's rate."""
FILLER_PER_CARD = 4
"""Payments per filler card: one fewer than velocity's count (``Thresholds.velocity_count``),
none tiny, all in one place, no profile (no amount anomaly): no rule fires."""
_SLICE_S = 0.05


def is_warmup(card_id: str) -> bool:
    return card_id.startswith(WARMUP_PREFIX)


def warmup_records(now_ms: int) -> list[tuple[bytes, bytes]]:
    """(key, JSON value) of the warm-up payments, event time ``now_ms`` onwards."""
    out = []
    for n, card in enumerate(WARMUP_CARDS):
        for k in range(PAYMENTS_PER_CARD):
            record = {"txn_id": f"{card}-{k}", "card_id": card, "user_id": f"{card}-user",
                      "merchant_id": "warmup", "amount": 0.5 + k / 10, "currency": "EUR",
                      "lat": 52.52, "lon": 13.405, "city": "Berlin", "country": "DE",
                      "category": "digital", "event_time": now_ms + n + k}
            out.append((card.encode(), json.dumps(record).encode()))
    return out


def filler_records(first: int, count: int, now_ms: int) -> list[tuple[bytes, bytes]]:
    """(key, JSON value) of filler payments ``first`` .. ``first + count - 1`` (payment n is
    the ``n % FILLER_PER_CARD``-th of card ``n // FILLER_PER_CARD``), at event time
    ``now_ms``: ordinary amounts, one place, no rule fires."""
    out = []
    for n in range(first, first + count):
        card = f"{WARMUP_PREFIX}f{n // FILLER_PER_CARD}"
        record = {"txn_id": f"{WARMUP_PREFIX}f{n}", "card_id": card, "user_id": f"{card}-user",
                  "merchant_id": "warmup", "amount": 20.0 + n % 50, "currency": "EUR",
                  "lat": 52.52, "lon": 13.405, "city": "Berlin", "country": "DE",
                  "category": "grocery", "event_time": now_ms}
        out.append((card.encode(), json.dumps(record).encode()))
    return out


def warm_up(bootstrap: str, topic: str, encode: Callable[[bytes], bytes] | None,
            state: LiveState, rate: float, timeout_s: float) -> None:
    """Send ``WARMUP_SECONDS`` of filler payments at ``rate`` per second, then the alerting
    warm-up payments, to ``topic`` (through ``encode``, the run's wire format), and block
    until the alert reader (``watch_alerts``) has read an alert per warm-up card.
    ``PipelineError`` when they do not come within ``timeout_s``."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                         "log_level": 4})

    def send(records: list[tuple[bytes, bytes]]) -> None:
        for key, value in records:
            while True:
                try:
                    producer.produce(topic, key=key, value=encode(value) if encode else value)
                    break
                except BufferError:  # the local queue is full: let it drain
                    producer.poll(0.05)
        producer.poll(0)

    start, sent, total = time.monotonic(), 0, int(rate * WARMUP_SECONDS)
    while sent < total:
        due = min(total, int((time.monotonic() - start + _SLICE_S) * rate))
        if due > sent:
            send(filler_records(sent, due - sent, int(time.time() * 1000)))
            sent = due
        time.sleep(_SLICE_S)
    send(warmup_records(int(time.time() * 1000)))
    if producer.flush(timeout_s) > 0:
        raise PipelineError(f"the warm-up payments were not acknowledged within {timeout_s:g} s")
    deadline = time.monotonic() + timeout_s
    while len(state.warmup_ms) < len(WARMUP_CARDS):
        if time.monotonic() > deadline:
            raise PipelineError(f"the real-time path raised {len(state.warmup_ms)} of "
                                f"{len(WARMUP_CARDS)} warm-up alerts within {timeout_s:g} s")
        time.sleep(0.05)
