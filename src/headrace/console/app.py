"""The console's routes. Every page is rendered on the server; the Kafka work runs in
threads (the clients block), so one slow page never stalls the others.

Errors a user can cause (an unknown topic, a bad offset, resetting an active group) come
back as a page saying what was wrong, with status 400/404/409, never a stack trace.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import jinja2
from aiohttp import web

from headrace.console import browse
from headrace.console.history import PIPELINE_SERIES, History
from headrace.console.plots import line_plot
from headrace.errors import HeadraceError
from headrace.ops.brokers import cluster_view
from headrace.ops.capacity import CapacitySampler
from headrace.ops.errors import (
    GroupActiveError,
    InvalidInputError,
    UnknownGroupError,
    UnknownTopicError,
)
from headrace.ops.groups import GroupAdmin
from headrace.ops.offset_reset import ResetMode, ResetSpec, apply_reset, parse_datetime, plan_reset
from headrace.ops.topics import TopicAdmin
from headrace.ops.transactions import TransactionAdmin

log = logging.getLogger("headrace.console")
HERE = Path(__file__).parent
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass
class Settings:
    """Where the console looks: the cluster, optionally a registry and pipeline metrics."""

    bootstrap_servers: str
    registry_url: str = ""
    pipeline_metrics: list[str] = field(default_factory=list)


SETTINGS = web.AppKey("settings", Settings)
HISTORY = web.AppKey("history", History)
TEMPLATES = web.AppKey("templates", jinja2.Environment)


def _status(e: HeadraceError) -> int:
    if isinstance(e, UnknownTopicError | UnknownGroupError):
        return 404
    if isinstance(e, GroupActiveError):
        return 409
    return 400


@web.middleware
async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except HeadraceError as e:
        return page(request, "error.html", status=_status(e), title="Error", message=str(e))
    except web.HTTPException:
        raise
    except Exception:  # supervisor: a page fails alone, without a trace shown
        log.exception("%s failed", request.path)
        return page(request, "error.html", status=500, title="Error",
                    message="the page failed; the console's log has the details")


def page(request: web.Request, template: str, status: int = 200,
         **context: Any) -> web.Response:
    settings = request.app[SETTINGS]
    html = request.app[TEMPLATES].get_template(template).render(
        settings=settings, path=request.path, **context)
    return web.Response(text=html, status=status, content_type="text/html")


def _int(request: web.Request, name: str, default: int | None = None) -> int | None:
    raw = request.query.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError as e:
        raise InvalidInputError(f"{name} must be a whole number, not {raw!r}") from e


# -- brokers ---------------------------------------------------------------------------------


async def brokers(request: web.Request) -> web.Response:
    bootstrap = request.app[SETTINGS].bootstrap_servers
    view = await asyncio.to_thread(lambda: cluster_view(TopicAdmin(bootstrap)))
    return page(request, "brokers.html", title="Brokers", view=view)


# -- topics ----------------------------------------------------------------------------------


async def topics(request: web.Request) -> web.Response:
    bootstrap = request.app[SETTINGS].bootstrap_servers

    def load() -> list[dict[str, Any]]:
        admin = TopicAdmin(bootstrap)
        sizes, _disk = CapacitySampler(bootstrap).log_dirs()
        rows = []
        for t in admin.list_topics():
            tps = [(t.name, p) for p in range(t.partitions)]
            starts = admin.list_offsets(tps, "earliest")
            ends = admin.list_offsets(tps, "latest")
            rows.append({"name": t.name, "partitions": t.partitions,
                         "records": sum(ends[tp] - starts[tp] for tp in tps),
                         "end": sum(ends.values()),
                         "size": sum(sizes.get(tp, 0) for tp in tps) if sizes else None})
        return rows

    return page(request, "topics.html", title="Topics", topics=await asyncio.to_thread(load))


async def topic(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    bootstrap = request.app[SETTINGS].bootstrap_servers

    def load() -> dict[str, Any]:
        admin = TopicAdmin(bootstrap)
        described = admin.describe(name)
        tps = [(name, p.partition) for p in described.partitions]
        starts = admin.list_offsets(tps, "earliest")
        ends = admin.list_offsets(tps, "latest")
        oldest = browse.oldest_timestamp(bootstrap, name, [p for _, p in tps])
        configs = {c.name: c.value for c in described.configs}
        sizes, _disk = CapacitySampler(bootstrap).log_dirs()
        return {"described": described, "starts": starts, "ends": ends, "sizes": sizes,
                "window_s": None if oldest is None else max(time.time() - oldest / 1000, 0),
                "retention_ms": configs.get("retention.ms"), "configs": described.configs}

    return page(request, "topic.html", title=name, name=name, **await asyncio.to_thread(load))


def _search(request: web.Request) -> browse.Search:
    q = request.query
    from_time = q.get("from_time", "").strip()
    return browse.Search(
        partition=_int(request, "partition"), offset=_int(request, "offset"),
        from_time_ms=parse_datetime(from_time) if from_time else None,
        key=q.get("key", ""), value=q.get("value", ""), header=q.get("header", ""),
        limit=_int(request, "limit", 50) or 50, scan=_int(request, "scan", 100_000) or 100_000)


async def messages(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    settings = request.app[SETTINGS]
    query = _search(request)
    started = time.perf_counter()
    result = await asyncio.to_thread(browse.search, settings.bootstrap_servers, name, query,
                                     browse.Decoder(settings.registry_url))
    return page(request, "messages.html", title=f"{name}: messages", name=name, query=query,
                result=result, seconds=time.perf_counter() - started, form=request.query)


async def tail(request: web.Request) -> web.Response:
    return page(request, "tail.html", title=f"{request.match_info['name']}: live tail",
                name=request.match_info["name"])


async def tail_stream(request: web.Request) -> web.StreamResponse:
    """Server-sent events: each new record of the topic as JSON, until the page closes."""
    name = request.match_info["name"]
    settings = request.app[SETTINGS]
    decoder = browse.Decoder(settings.registry_url)
    consumer = browse.tail_consumer(settings.bootstrap_servers, name)
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                           "Cache-Control": "no-cache"})
    await response.prepare(request)
    try:
        while True:
            batch = await asyncio.to_thread(consumer.consume, 100, 0.5)
            for m in batch:
                if m.error() is not None:
                    continue
                shown = browse.show(m, decoder)
                await response.write(b"data: " + json.dumps(shown.__dict__).encode() + b"\n\n")
            if not batch:
                await response.write(b": keep-alive\n\n")
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    finally:
        await asyncio.to_thread(consumer.close)
    return response


# -- groups ------------------------------------------------------------------------------


async def groups(request: web.Request) -> web.Response:
    bootstrap = request.app[SETTINGS].bootstrap_servers

    def load() -> list[Any]:
        admin = GroupAdmin(bootstrap)
        return [admin.describe(g.group_id) for g in admin.list_groups()]

    return page(request, "groups.html", title="Consumer groups",
                groups=await asyncio.to_thread(load))


async def group(request: web.Request, plan: Any = None, done: str = "") -> web.Response:
    gid = request.match_info["group"]
    bootstrap = request.app[SETTINGS].bootstrap_servers

    def load() -> dict[str, Any]:
        admin = GroupAdmin(bootstrap)
        if gid not in {g.group_id for g in admin.list_groups()}:
            raise UnknownGroupError(f"unknown group {gid!r}")
        described = admin.describe(gid)
        rows = []
        for p in described.partitions:
            seconds = None
            if p.committed is not None and p.lag:
                stamp = browse.record_timestamp(bootstrap, p.topic, p.partition, p.committed)
                seconds = None if stamp is None else max(time.time() - stamp / 1000, 0)
            rows.append((p, seconds))
        topics = sorted({p.topic for p in described.partitions})
        retention = {t: _retention_seconds(bootstrap, t) for t in topics}
        return {"described": described, "rows": rows, "topics": topics,
                "retention": retention}

    data = await asyncio.to_thread(load)
    data["forecast"] = _forecast(request.app[HISTORY], gid, data["rows"], data["retention"])
    plot = line_plot(request.app[HISTORY].points(f"group:{gid}:lag"), f"lag of {gid} (records)")
    return page(request, "group.html", title=f"group {gid}", gid=gid, plot=plot, plan=plan,
                done=done, **data)


def _retention_seconds(bootstrap: str, topic: str) -> float | None:
    """retention.ms of ``topic`` in seconds; None when unlimited."""
    configs = {c.name: c.value for c in TopicAdmin(bootstrap).describe(topic).configs}
    ms = int(configs.get("retention.ms") or -1)
    return None if ms < 0 else ms / 1000


def _forecast(history: History, gid: str, rows: list[tuple[Any, float | None]],
              retention: dict[str, float | None]) -> dict[str, str]:
    """Per topic: when does the group fall off the log at the current trend? Retention
    deletes by age, so it falls off when its oldest unread record gets older than
    retention.ms; that age grows at ``1 - consume/produce`` seconds per second (rates from
    the console's samples)."""
    out: dict[str, str] = {}
    for topic, window_s in retention.items():
        mine = [(p, age) for p, age in rows if p.topic == topic]
        if not any(p.lag for p, _ in mine):
            out[topic] = "keeps up (nothing unread)"
            continue
        age = max((a for _, a in mine if a is not None), default=0.0)
        if window_s is None:
            out[topic] = "retention is unlimited: it never falls off"
            continue
        if age >= window_s:
            out[topic] = "already past the retention window: records are deleted unread"
            continue
        produce = history.rate(f"group:{gid}:{topic}:end")
        consume = history.rate(f"group:{gid}:{topic}:committed")
        if produce is None or consume is None:
            out[topic] = "collecting samples for a trend ..."
            continue
        rates = f"producing {produce:.1f}/s, consuming {consume:.1f}/s"
        ratio = consume / produce if produce > 0 else (1.0 if consume > 0 else 0.0)
        if ratio >= 1:
            out[topic] = f"catching up ({rates})"
        else:
            left = (window_s - age) / (1 - ratio)
            out[topic] = f"falls off the log in {left / 3600:.1f} h at the current trend ({rates})"
    return out


async def reset(request: web.Request) -> web.Response:
    """Offset reset: a dry run (the plan) unless the form says ``confirm=yes``."""
    gid = request.match_info["group"]
    form = await request.post()
    bootstrap = request.app[SETTINGS].bootstrap_servers
    topic_name = str(form.get("topic", "")).strip()
    if not topic_name:
        raise InvalidInputError("choose the topic whose offsets to reset")
    try:
        mode = ResetMode(str(form.get("mode", "")))
    except ValueError as e:
        raise InvalidInputError(f"unknown reset mode {form.get('mode')!r}") from e
    raw = str(form.get("value", "")).strip()
    if mode is ResetMode.DATETIME:
        value = parse_datetime(raw)
    elif mode in (ResetMode.OFFSET, ResetMode.SHIFT):
        try:
            value = int(raw)
        except ValueError as e:
            raise InvalidInputError(f"{mode.value} needs a whole number, not {raw!r}") from e
    else:
        value = 0
    spec = ResetSpec(mode, value)
    admin = GroupAdmin(bootstrap)
    plan = await asyncio.to_thread(plan_reset, admin, gid, topic_name, spec)
    if form.get("confirm") != "yes":
        return await group(request, plan=plan)
    await asyncio.to_thread(apply_reset, admin, plan)
    return await group(request, done=f"offsets of {topic_name} reset {spec}")


# -- transactions, schemas, pipelines ------------------------------------------------------


async def transactions(request: web.Request) -> web.Response:
    bootstrap = request.app[SETTINGS].bootstrap_servers

    def load() -> list[Any]:
        admin = TransactionAdmin(bootstrap)
        return [admin.describe(t.transactional_id) for t in admin.list_transactions()]

    return page(request, "transactions.html", title="Transactions",
                txns=await asyncio.to_thread(load), now_ms=time.time() * 1000)


async def schemas(request: web.Request) -> web.Response:
    url = request.app[SETTINGS].registry_url
    if not url:
        return page(request, "error.html", status=404, title="Schemas",
                    message="no schema registry: start the console with --registry URL")
    async with httpx.AsyncClient(base_url=url, timeout=10) as client:
        try:
            subjects = (await client.get("/subjects")).json()
            latest = {s: (await client.get(f"/subjects/{s}/versions/latest")).json()
                      for s in subjects}
        except httpx.HTTPError as e:
            raise InvalidInputError(f"the schema registry at {url} did not answer: {e}") from e
    return page(request, "schemas.html", title="Schemas", latest=latest)


async def pipelines(request: web.Request) -> web.Response:
    history = request.app[HISTORY]
    plots = {query: [line_plot(history.points(f"pipeline:{query}:{metric}"),
                               metric.replace("_", " "))
                     for metric in PIPELINE_SERIES if metric != "active"]
             for query in sorted(history.latest_pipelines)}
    return page(request, "pipelines.html", title="Pipelines", latest=history.latest_pipelines,
                plots=plots)


async def home(request: web.Request) -> web.Response:
    raise web.HTTPFound("/topics")


def make_app(settings: Settings, history: History) -> web.Application:
    """The console's aiohttp application (sampling is started by ``server``)."""
    app = web.Application(middlewares=[errors])
    app[SETTINGS] = settings
    app[HISTORY] = history
    templates = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"),
                                   autoescape=True)
    templates.filters["ts"] = lambda ms: dt.datetime.fromtimestamp(
        ms / 1000, dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    app[TEMPLATES] = templates
    app.router.add_get("/", home)
    app.router.add_get("/brokers", brokers)
    app.router.add_get("/topics", topics)
    app.router.add_get("/topics/{name}", topic)
    app.router.add_get("/topics/{name}/messages", messages)
    app.router.add_get("/topics/{name}/tail", tail)
    app.router.add_get("/topics/{name}/tail/stream", tail_stream)
    app.router.add_get("/groups", groups)
    app.router.add_get("/groups/{group}", group)
    app.router.add_post("/groups/{group}/reset", reset)
    app.router.add_get("/transactions", transactions)
    app.router.add_get("/schemas", schemas)
    app.router.add_get("/pipelines", pipelines)
    app.router.add_static("/static", HERE / "static")
    return app
