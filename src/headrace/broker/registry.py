"""The handler table: each handler module registers the API key and versions it serves.

ApiVersions answers from this table, so what is advertised is exactly what is handled:
each API from its ``min_version``, Apache Kafka 4.3.1's minimum (KIP-896 removed the
oldest versions of many APIs in Kafka 4.0). The one exception is ``advertised_from``, a
lower version advertised but not served: Kafka 4 still advertises Produce v0-2 because
librdkafka before 2.8 turns compression off when Produce's minimum is above 0
(KAFKA-18659). A request for a version above the maximum or below ``min_version``
closes its connection, as Kafka 4 does (ApiVersions itself excepted, KIP-511).
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
    # The lowest version served.
    min_version: int = 0
    # The lowest version advertised, when below min_version (Produce only, see above).
    advertised_from: int | None = None

    @property
    def advertised_min_version(self) -> int:
        """The minimum ApiVersions reports: ``advertised_from``, else ``min_version``."""
        return self.min_version if self.advertised_from is None else self.advertised_from

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
            min_version: int = 0,
            advertised_from: int | None = None) -> Callable[[Handler], Handler]:
    """Register the decorated coroutine as the handler of ``request_class`` for versions
    ``min_version`` to ``max_version`` (capped at what the codec knows), advertised from
    ``advertised_from`` when given (it must be below ``min_version``)."""

    def register(fn: Handler) -> Handler:
        api_key = int(request_class.API_KEY)
        if api_key in API_TABLE:
            raise RuntimeError(f"API key {api_key} registered twice")
        if advertised_from is not None and not 0 <= advertised_from < min_version:
            raise RuntimeError(f"API key {api_key}: advertised_from {advertised_from} "
                               f"must be below min_version {min_version}")
        top = min(max_version, int(request_class.max_version))
        API_TABLE[api_key] = ApiSpec(api_key, top, request_class, response_class, fn,
                                     min_version, advertised_from)
        return fn

    return register
