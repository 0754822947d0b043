"""The handler table: each handler module registers the API key and versions it serves.

ApiVersions answers from this table, so what is advertised is exactly what is handled.
Every API is advertised from version 0 (librdkafka disables features when a minimum is
higher: Kafka 4 too still advertises Produce v0-2, KAFKA-18659). A request for a version
above the maximum, or below ``min_version`` (the versions Kafka 4 removed, such as
Produce v0-2), closes its connection, as Kafka 4 does.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from headrace.broker.context import RequestContext

Handler = Callable[["RequestContext", Any], Awaitable[Any]]


@dataclass(frozen=True)
class ApiSpec:
    api_key: int
    max_version: int
    request_class: Any
    response_class: Any
    handle: Handler
    # The lowest version served; lower ones are still advertised (see above).
    min_version: int = 0

    def serves(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version

    def flexible(self, version: int) -> bool:
        return bool(self.request_class.flexible_version_q(version))


API_TABLE: dict[int, ApiSpec] = {}


def is_flexible(api_key: int, version: int) -> bool:
    """Whether a request of this key and version uses the flexible (v2) header."""
    spec = API_TABLE.get(api_key)
    return spec is not None and spec.serves(version) and spec.flexible(version)


class DeferredResponse:
    """A response that is complete only once ``ready`` resolves (Produce waiting for its
    fsync). ``build(error)`` makes the response, ``error`` being the exception ``ready``
    raised, or None. The connection handles later requests meanwhile and still sends
    responses in request order."""

    __slots__ = ("build", "ready")

    def __init__(self, ready: Awaitable[None],
                 build: Callable[[BaseException | None], Any]) -> None:
        self.ready = ready
        self.build = build

    async def result(self) -> Any:
        try:
            await self.ready
        except Exception as e:  # the response reports it; the connection lives on
            return self.build(e)
        return self.build(None)


def handles(request_class: Any, response_class: Any, max_version: int,
            min_version: int = 0) -> Callable[[Handler], Handler]:
    """Register the decorated coroutine as the handler of ``request_class`` for versions
    ``min_version`` to ``max_version`` (capped at what the codec knows)."""

    def register(fn: Handler) -> Handler:
        api_key = int(request_class.API_KEY)
        if api_key in API_TABLE:
            raise RuntimeError(f"API key {api_key} registered twice")
        top = min(max_version, int(request_class.max_version))
        API_TABLE[api_key] = ApiSpec(api_key, top, request_class, response_class, fn,
                                     min_version)
        return fn

    return register
