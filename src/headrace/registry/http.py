"""The registry's HTTP face: Confluent Schema Registry's REST API on aiohttp.

Every answer is JSON with content type ``application/vnd.schemaregistry.v1+json``; every
error is ``{"error_code": ..., "message": ...}`` with Confluent's codes (an unknown route is
404/404, a body that is not JSON 400/400, one over ``max_body_bytes`` 413/413). Bodies are
accepted whatever their JSON content type. Operations run in a thread pool: writes wait
for the broker, and the event loop keeps serving reads meanwhile.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from headrace.registry.errors import RegistryError
from headrace.registry.formats import SCHEMA_TYPES
from headrace.registry.service import RegistryService

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
MAX_BODY_BYTES = 4 * 1024 * 1024
log = logging.getLogger("headrace.registry")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _reply(body: Any, status: int = 200) -> web.Response:
    return web.Response(text=json.dumps(body), status=status, content_type=CONTENT_TYPE.split(";")[0])


def _error(status: int, code: int, message: str) -> web.Response:
    return _reply({"error_code": code, "message": message}, status)


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except RegistryError as e:
        return _error(e.http_status, e.error_code, e.message)
    except web.HTTPRequestEntityTooLarge:
        return _error(413, 413, f"Request body larger than {MAX_BODY_BYTES} bytes")
    except web.HTTPException as e:
        if e.status >= 400:
            return _error(e.status, e.status, f"HTTP {e.status} {e.reason}")
        raise
    except Exception:  # the supervisor of one request: log it, answer 500, keep serving
        log.exception("registry request %s %s failed", request.method, request.path)
        return _error(500, 50001, "Error in the backend data store")


def _flag(request: web.Request, name: str) -> bool:
    return request.query.get(name, "false").lower() == "true"


async def _body(request: web.Request) -> Any:
    raw = await request.read()
    try:
        return json.loads(raw or b"{}")
    except ValueError as e:
        raise _BadJson(f"Unrecognized JSON body: {e}") from e


class _BadJson(RegistryError):
    http_status = 400
    error_code = 400


def _int(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError as e:
        raise _NotFoundPath(f"{what} must be a number, not {text!r}") from e


class _NotFoundPath(RegistryError):
    http_status = 404
    error_code = 404


async def _run(func: Callable[..., Any], *args: Any) -> Any:
    """Operations that write (they wait for the broker) or parse a schema (Protobuf text
    runs protoc) go to the thread pool; the event loop keeps serving meanwhile."""
    return await asyncio.get_running_loop().run_in_executor(None, func, *args)


async def _now(func: Callable[..., Any], *args: Any) -> Any:
    """Reads of the folded state: a dict lookup under a briefly held lock, served inline."""
    return func(*args)


def build_app(service: RegistryService) -> web.Application:
    """The aiohttp application serving ``service``."""
    app = web.Application(middlewares=[_errors], client_max_size=MAX_BODY_BYTES)
    s = service
    r = app.router

    async def root(_: web.Request) -> web.Response:
        return _reply({})

    async def subjects(q: web.Request) -> web.Response:
        return _reply(await _now(s.list_subjects, _flag(q, "deleted"),
                                 q.query.get("subjectPrefix", "")))

    async def versions(q: web.Request) -> web.Response:
        return _reply(await _now(s.list_versions, q.match_info["subject"], _flag(q, "deleted")))

    async def register(q: web.Request) -> web.Response:
        body = await _body(q)
        return _reply(await _run(s.register, q.match_info["subject"], body,
                                 _flag(q, "normalize")))

    async def version(q: web.Request) -> web.Response:
        return _reply(await _run(s.get_version, q.match_info["subject"], q.match_info["version"],
                                 _flag(q, "deleted"), q.query.get("format")))

    async def version_schema(q: web.Request) -> web.Response:
        found = await _run(s.get_version, q.match_info["subject"], q.match_info["version"],
                           _flag(q, "deleted"), q.query.get("format"))
        return web.Response(text=found["schema"], content_type="application/json")

    async def referenced_by(q: web.Request) -> web.Response:
        return _reply(await _now(s.referenced_by, q.match_info["subject"],
                                 q.match_info["version"]))

    async def lookup(q: web.Request) -> web.Response:
        body = await _body(q)
        return _reply(await _run(s.lookup, q.match_info["subject"], body, _flag(q, "normalize"),
                                 _flag(q, "deleted")))

    async def delete_subject(q: web.Request) -> web.Response:
        return _reply(await _run(s.delete_subject, q.match_info["subject"],
                                 _flag(q, "permanent")))

    async def delete_version(q: web.Request) -> web.Response:
        return _reply(await _run(s.delete_version, q.match_info["subject"],
                                 q.match_info["version"], _flag(q, "permanent")))

    async def by_id(q: web.Request) -> web.Response:
        schema_id = _int(q.match_info["id"], "schema id")
        return _reply(await _run(s.schema_by_id, schema_id, q.query.get("format")))

    async def by_id_schema(q: web.Request) -> web.Response:
        schema_id = _int(q.match_info["id"], "schema id")
        found = await _run(s.schema_by_id, schema_id, q.query.get("format"))
        return web.Response(text=found["schema"], content_type="application/json")

    async def id_versions(q: web.Request) -> web.Response:
        schema_id = _int(q.match_info["id"], "schema id")
        return _reply(await _now(s.id_versions, schema_id, _flag(q, "deleted")))

    async def id_subjects(q: web.Request) -> web.Response:
        schema_id = _int(q.match_info["id"], "schema id")
        return _reply(await _now(s.id_subjects, schema_id, _flag(q, "deleted")))

    async def schemas(q: web.Request) -> web.Response:
        return _reply(await _now(s.list_schemas, q.query.get("subjectPrefix", ""),
                                 _flag(q, "deleted"), _flag(q, "latestOnly")))

    async def types(_: web.Request) -> web.Response:
        return _reply(list(SCHEMA_TYPES))

    async def check_version(q: web.Request) -> web.Response:
        body = await _body(q)
        return _reply(await _run(s.check, q.match_info["subject"], q.match_info["version"], body,
                                 _flag(q, "normalize"), _flag(q, "verbose")))

    async def check_all(q: web.Request) -> web.Response:
        body = await _body(q)
        return _reply(await _run(s.check, q.match_info["subject"], None, body,
                                 _flag(q, "normalize"), _flag(q, "verbose")))

    def subject_of(q: web.Request) -> str | None:
        return q.match_info.get("subject")

    async def get_config(q: web.Request) -> web.Response:
        return _reply(await _now(s.get_config, subject_of(q), _flag(q, "defaultToGlobal")))

    async def put_config(q: web.Request) -> web.Response:
        body = await _body(q)
        return _reply(await _run(s.put_config, subject_of(q), body))

    async def delete_config(q: web.Request) -> web.Response:
        return _reply(await _run(s.delete_config, subject_of(q)))

    async def get_mode(q: web.Request) -> web.Response:
        return _reply(await _now(s.get_mode, subject_of(q), _flag(q, "defaultToGlobal")))

    async def put_mode(q: web.Request) -> web.Response:
        body = await _body(q)
        return _reply(await _run(s.put_mode, subject_of(q), body, _flag(q, "force")))

    async def delete_mode(q: web.Request) -> web.Response:
        return _reply(await _run(s.delete_mode, subject_of(q)))

    subject = "/subjects/{subject}"
    r.add_get("/", root)
    r.add_get("/subjects", subjects)
    r.add_get(f"{subject}/versions", versions)
    r.add_post(f"{subject}/versions", register)
    r.add_get(f"{subject}/versions/{{version}}", version)
    r.add_get(f"{subject}/versions/{{version}}/schema", version_schema)
    r.add_get(f"{subject}/versions/{{version}}/referencedby", referenced_by)
    r.add_delete(f"{subject}/versions/{{version}}", delete_version)
    r.add_post(subject, lookup)
    r.add_delete(subject, delete_subject)
    r.add_get("/schemas", schemas)
    r.add_get("/schemas/types", types)
    r.add_get("/schemas/ids/{id}", by_id)
    r.add_get("/schemas/ids/{id}/schema", by_id_schema)
    r.add_get("/schemas/ids/{id}/versions", id_versions)
    r.add_get("/schemas/ids/{id}/subjects", id_subjects)
    r.add_post("/compatibility/subjects/{subject}/versions/{version}", check_version)
    r.add_post("/compatibility/subjects/{subject}/versions", check_all)
    for path in ("/config", "/config/{subject}"):
        r.add_get(path, get_config)
        r.add_put(path, put_config)
        r.add_delete(path, delete_config)
    for path in ("/mode", "/mode/{subject}"):
        r.add_get(path, get_mode)
        r.add_put(path, put_mode)
        r.add_delete(path, delete_mode)
    return app
