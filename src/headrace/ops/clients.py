"""Shared plumbing for the Kafka clients the CLI creates.

Contracts kept by every command:

- the clients' own log lines (librdkafka's, through the ``headrace.ops.librdkafka`` logger,
  and kafka-python's ``kafka`` logger) are silent unless the CLI runs with ``--verbose``
  (``show_client_logs``); the user sees our error messages instead;
- each confluent-kafka client is made through a ``ClientSession``, and the first thing a
  command does is fetch metadata through it (``fetch_metadata``), which turns "nobody listens
  there" into ``BrokerUnreachableError`` at once (connection refused) or after
  ``REQUEST_TIMEOUT_S`` (no answer), instead of librdkafka's endless reconnect loop.
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Generic, Protocol, TypeVar

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import ClusterMetadata, TopicMetadata

from headrace.ops.errors import BrokerUnreachableError, KafkaRequestError, UnknownTopicError

DEFAULT_BOOTSTRAP_SERVERS = "127.0.0.1:9092"
BOOTSTRAP_ENV_VAR = "HEADRACE_BOOTSTRAP_SERVERS"
# Upper bound on any single round trip the CLI waits for (metadata, admin requests).
REQUEST_TIMEOUT_S = 10.0
CLIENT_ID = "headrace-cli"

LIBRDKAFKA_LOGGER = logging.getLogger("headrace.ops.librdkafka")
KAFKA_PYTHON_LOGGER = logging.getLogger("kafka")
# A handler anywhere on the path keeps Python's last-resort handler from printing the
# clients' reconnect chatter when logging is not configured (i.e. without --verbose).
for _logger in (LIBRDKAFKA_LOGGER, KAFKA_PYTHON_LOGGER):
    _logger.addHandler(logging.NullHandler())

# Metadata answers that mean "not yet" (e.g. a topic being auto-created), not "no".
_TRANSIENT_TOPIC_ERRORS = frozenset({KafkaError.LEADER_NOT_AVAILABLE, KafkaError._WAIT_COORD})
_UNKNOWN_TOPIC_ERRORS = frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC})


class ClientErrors:
    """The ``error_cb`` of one client: remembers what librdkafka reported.

    librdkafka calls it from ``poll()`` (or ``consume()``) on the caller's thread, so no
    locking is needed.
    """

    def __init__(self) -> None:
        self.all_brokers_down = False
        self.last_error: KafkaError | None = None

    def __call__(self, error: KafkaError) -> None:
        if error.code() == KafkaError._ALL_BROKERS_DOWN:
            self.all_brokers_down = True
        else:
            self.last_error = error


class _MetadataClient(Protocol):
    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any: ...

    def poll(self, timeout: float = -1) -> Any: ...


C = TypeVar("C", bound=_MetadataClient)


class ClientSession(Generic[C]):
    """One confluent-kafka client (``client``) with the CLI's contracts around it.

    ``factory`` (``Consumer``, ``Producer``, ``AdminClient``) receives ``client_config`` with
    ``overrides`` (librdkafka's dotted names). Creating a session opens no connection;
    ``metadata`` is meant to be the first request. Closing or flushing the client stays the
    caller's business.
    """

    def __init__(
        self,
        factory: Callable[[dict[str, Any]], C],
        bootstrap_servers: str,
        overrides: Mapping[str, Any] | None = None,
        timeout: float = REQUEST_TIMEOUT_S,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.timeout = timeout
        self.errors = ClientErrors()
        self.client = factory(client_config(bootstrap_servers, self.errors, **(overrides or {})))

    def metadata(self, topic: str | None = None) -> ClusterMetadata:
        """``fetch_metadata`` through this session's client, with its timeout."""
        return fetch_metadata(
            self.client, self.errors, self.bootstrap_servers, topic=topic, timeout=self.timeout
        )

    def partitions(self, topic: str, wanted: Iterable[int] | None = None) -> list[int]:
        """The sorted ids of ``topic``'s partitions, or of ``wanted`` (deduplicated) once each
        is known to exist; ``UnknownTopicError`` for a missing topic or partition."""
        known = sorted(topic_metadata(self.metadata(topic), topic).partitions)
        if wanted is None:
            return known
        chosen = sorted(set(wanted))
        missing = [p for p in chosen if p not in known]
        if missing:
            raise UnknownTopicError(
                f"topic {topic!r} has no partition {missing[0]} (it has {len(known)})"
            )
        return chosen


# Settings every client the process makes applies (security.protocol, sasl.*, ssl.* ...,
# librdkafka's names), from ``headrace --client-config``/``--command-config``.
_SETTINGS: dict[str, str] = {}
# librdkafka's security settings under kafka-python's names (its admin client serves the
# calls librdkafka lacks).
_KAFKA_PYTHON_NAMES = {
    "security.protocol": "security_protocol", "sasl.mechanism": "sasl_mechanism",
    "sasl.mechanisms": "sasl_mechanism", "sasl.username": "sasl_plain_username",
    "sasl.password": "sasl_plain_password", "ssl.ca.location": "ssl_cafile",
    "ssl.certificate.location": "ssl_certfile", "ssl.key.location": "ssl_keyfile",
    "ssl.key.password": "ssl_password"}


def parse_client_settings(pairs: Iterable[str], properties: str = "") -> dict[str, str]:
    """``KEY=VALUE`` pairs over a Java-style properties text (``key=value`` lines, ``#``
    comments); ``ValueError`` names a malformed one."""
    settings: dict[str, str] = {}
    lines = [ln.strip() for ln in properties.splitlines()]
    for item in [ln for ln in lines if ln and not ln.startswith(("#", "!"))] + list(pairs):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{item!r} is not KEY=VALUE")
        settings[key.strip()] = value.strip()
    return settings


def set_client_settings(settings: Mapping[str, str]) -> None:
    """What every client of this process applies from now on."""
    _SETTINGS.clear()
    _SETTINGS.update(settings)


def add_client_settings(settings: Mapping[str, str]) -> None:
    """Add ``settings`` to the process's client settings (a subcommand's ``-X``)."""
    _SETTINGS.update(settings)


def client_settings() -> dict[str, str]:
    """The process's client settings (librdkafka names), for clients made elsewhere."""
    return dict(_SETTINGS)


def kafka_python_settings() -> dict[str, Any]:
    """The process's security settings as kafka-python keyword arguments."""
    return {_KAFKA_PYTHON_NAMES[k]: v for k, v in _SETTINGS.items() if k in _KAFKA_PYTHON_NAMES}


def client_config(bootstrap_servers: str, errors: ClientErrors, **overrides: Any) -> dict[str, Any]:
    """Configuration common to every client: the process's client settings, then
    ``overrides`` (librdkafka's dotted names)."""
    config: dict[str, Any] = {
        **_SETTINGS,
        "bootstrap.servers": bootstrap_servers,
        "client.id": CLIENT_ID,
        "logger": LIBRDKAFKA_LOGGER,
        "error_cb": errors,
    }
    config.update(overrides)
    return config


def show_client_logs() -> None:
    """Send the clients' own log lines, down to debug level, to stderr (``--verbose``)."""
    for logger, name in ((LIBRDKAFKA_LOGGER, "librdkafka"), (KAFKA_PYTHON_LOGGER, "%(name)s")):
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter(f"%(levelname)s {name}: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)


def kafka_error(exc: KafkaException) -> KafkaError:
    """The ``KafkaError`` a ``KafkaException`` carries (a generic one if it carries none)."""
    if exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0]
    return KafkaError(KafkaError._FAIL, str(exc))


def wait_future(future: concurrent.futures.Future[Any], timeout: float, what: str) -> Any:
    """The result of an admin request's ``future``, made with ``request_timeout=timeout``.

    Blocks for at most ``timeout`` + 5 s: the margin lets the request's own, more precise
    error arrive first. ``KafkaException`` from the request propagates (callers map its
    code); ``KafkaRequestError`` if nothing at all came back in time.
    """
    try:
        return future.result(timeout=timeout + 5)
    except concurrent.futures.TimeoutError as e:
        raise KafkaRequestError(f"{what}: no answer within {timeout:g} s") from e


def error_text(error: KafkaError) -> str:
    """A one-line human description, e.g. ``Broker: Unknown topic or partition``."""
    return error.str() or error.name()


def fetch_metadata(
    client: _MetadataClient,
    errors: ClientErrors,
    bootstrap_servers: str,
    topic: str | None = None,
    timeout: float = REQUEST_TIMEOUT_S,
) -> ClusterMetadata:
    """Fetch cluster metadata (of one ``topic``, or of all topics), failing fast.

    Blocks for at most ``timeout`` seconds. ``poll(0)`` is called on ``client`` to serve its
    error callback, so a consumer must not have an assignment yet. Raises
    ``BrokerUnreachableError`` when every bootstrap server refuses connections or none answers
    in time, ``UnknownTopicError`` when ``topic`` does not exist (a producer's metadata request
    may auto-create it, as Kafka's producers do), ``KafkaRequestError`` for other failures.
    """
    deadline = time.monotonic() + timeout
    pending: str | None = None  # why the last answer was "not yet"
    wait = 0.1  # grows to 1 s: a refused connection is noticed quickly, a slow broker not flooded
    while True:
        remaining = deadline - time.monotonic()
        try:
            metadata: ClusterMetadata = client.list_topics(
                topic=topic, timeout=max(0.05, min(wait, remaining))
            )
        except KafkaException as e:
            error = kafka_error(e)
            if error.code() not in (KafkaError._TRANSPORT, KafkaError._TIMED_OUT):
                raise KafkaRequestError(f"metadata request failed: {error_text(error)}") from e
        else:
            if topic is None:
                return metadata
            topic_error = _topic_error(metadata, topic)
            if topic_error is None:
                return metadata
            if topic_error.code() in _UNKNOWN_TOPIC_ERRORS:
                raise UnknownTopicError(f"topic {topic!r} does not exist")
            if topic_error.code() not in _TRANSIENT_TOPIC_ERRORS:
                raise KafkaRequestError(f"topic {topic!r}: {error_text(topic_error)}")
            pending = error_text(topic_error)
        wait = min(1.0, wait * 2)
        client.poll(0)
        last = errors.last_error
        if last is not None and last.code() == KafkaError._AUTHENTICATION:
            raise BrokerUnreachableError(f"cannot log in at {bootstrap_servers} (check the "
                                         f"sasl.* / ssl.* client settings): {error_text(last)}")
        if errors.all_brokers_down:
            detail = f": {error_text(last)}" if last else ""
            raise BrokerUnreachableError(f"cannot reach a broker at {bootstrap_servers}{detail}")
        if time.monotonic() >= deadline:
            if pending is not None:
                raise KafkaRequestError(
                    f"topic {topic!r} still not ready after {timeout:g} s: {pending}"
                )
            raise BrokerUnreachableError(
                f"no answer from a broker at {bootstrap_servers} within {timeout:g} s"
            )


def topic_metadata(metadata: ClusterMetadata, topic: str) -> TopicMetadata:
    """The metadata of ``topic``; ``UnknownTopicError`` if the cluster does not list it."""
    found = metadata.topics.get(topic)
    if found is None or (found.error is not None and found.error.code() in _UNKNOWN_TOPIC_ERRORS):
        raise UnknownTopicError(f"topic {topic!r} does not exist")
    return found


def _topic_error(metadata: ClusterMetadata, topic: str) -> KafkaError | None:
    found = metadata.topics.get(topic)
    if found is None:
        return KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)
    return found.error
