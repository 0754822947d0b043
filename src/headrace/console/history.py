"""What the console samples in the background for its plots: each group's total lag and
each pipeline's metrics, every ``interval`` seconds, for the last hour."""

from __future__ import annotations

import asyncio
import logging
import time
import urllib.request
from collections import deque
from collections.abc import Callable

from prometheus_client.parser import text_string_to_metric_families

from headrace.console.plots import Points
from headrace.errors import HeadraceError
from headrace.ops.groups import GroupAdmin

log = logging.getLogger("headrace.console")

PIPELINE_SERIES = ("input_rows_per_second", "processed_rows_per_second",
                   "watermark_delay_seconds", "batch_duration_seconds", "late_rows_total",
                   "dead_letters_total", "state_rows", "active")


class History:
    """Series by name (``group:<id>:lag``, ``pipeline:<query>:<metric>``); thread-safe
    enough for one writer task and readers on the same event loop."""

    def __init__(self, interval: float = 5.0, keep_seconds: float = 3600.0) -> None:
        self.interval = interval
        self._series: dict[str, deque[tuple[float, float]]] = {}
        self._maxlen = max(2, int(keep_seconds / interval) + 1)
        self.latest_pipelines: dict[str, dict[str, float]] = {}

    def add(self, name: str, value: float, at: float | None = None) -> None:
        series = self._series.get(name)
        if series is None:
            series = self._series[name] = deque(maxlen=self._maxlen)
        series.append((time.time() if at is None else at, value))

    def points(self, name: str) -> Points:
        return list(self._series.get(name, ()))

    def rate(self, name: str, over_seconds: float = 300.0) -> float | None:
        """Change per second of a series over (up to) the last ``over_seconds``; None with
        fewer than two samples."""
        series = self._series.get(name)
        if not series or len(series) < 2:
            return None
        t1, v1 = series[-1]
        t0, v0 = next((t, v) for t, v in series if t >= t1 - over_seconds)
        return None if t1 <= t0 else (v1 - v0) / (t1 - t0)

    async def run(self, sample: Callable[[], None]) -> None:
        """Call ``sample`` (blocking; in a thread) every ``interval`` until cancelled."""
        while True:
            try:
                await asyncio.to_thread(sample)
            except Exception:  # supervisor: a failed sample must not stop the next ones
                log.exception("sampling failed")
            await asyncio.sleep(self.interval)


def sample_groups(history: History, bootstrap_servers: str) -> None:
    """Total lag of every group."""
    admin = GroupAdmin(bootstrap_servers)
    try:
        groups = admin.list_groups()
    except HeadraceError as e:
        log.warning("listing groups: %s", e)
        return
    for g in groups:
        try:
            described = admin.describe(g.group_id)
        except HeadraceError:
            continue
        now = time.time()
        history.add(f"group:{g.group_id}:lag", described.total_lag, now)
        ends: dict[str, int] = {}
        done: dict[str, int] = {}
        for p in described.partitions:
            if p.log_end_offset is not None and p.committed is not None:
                ends[p.topic] = ends.get(p.topic, 0) + p.log_end_offset
                done[p.topic] = done.get(p.topic, 0) + p.committed
        for topic, end in ends.items():
            history.add(f"group:{g.group_id}:{topic}:end", end, now)
            history.add(f"group:{g.group_id}:{topic}:committed", done[topic], now)


def sample_pipelines(history: History, urls: list[str]) -> None:
    """The ``headrace_pipeline_*`` metrics each URL serves, per query."""
    now = time.time()
    for url in urls:
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                text = r.read().decode()
        except OSError as e:
            log.warning("scraping %s: %s", url, e)
            continue
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if not s.name.startswith("headrace_pipeline_"):
                    continue
                metric = s.name.removeprefix("headrace_pipeline_")
                query = s.labels.get("query", "?")
                history.latest_pipelines.setdefault(query, {})[metric] = s.value
                if metric in PIPELINE_SERIES:
                    history.add(f"pipeline:{query}:{metric}", s.value, now)
