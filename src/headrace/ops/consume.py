"""``headrace consume``: print records of a topic through confluent-kafka's ``Consumer``.

Without a group the consumer assigns partitions itself (all of the topic's, or one) and never
joins a group nor commits; librdkafka insists on a ``group.id`` even then, so a placeholder is
set that no request ever uses.

With ``group`` it subscribes and commits at least once: a record's offset is stored only after
its line was written and flushed to the output, librdkafka's auto-commit sends the stored
offsets every few seconds, and a last synchronous commit runs when the command ends (also on
Ctrl-C). A crash may thus print a record again on the next run, never skip one; a record
returned but not yet printed (e.g. a broken pipe) is not committed.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import BinaryIO

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from headrace.ops.clients import REQUEST_TIMEOUT_S, ClientSession, error_text, kafka_error
from headrace.ops.errors import InvalidInputError, KafkaRequestError, UnknownTopicError

logger = logging.getLogger(__name__)

_PLACEHOLDER_GROUP = "headrace-cli-no-group"
# With --group and --timeout: how long to wait for the group to assign partitions.
GROUP_JOIN_TIMEOUT_S = 60.0
_BATCH = 500
_FETCH_WAIT_MS = 100
_NULL = b"null"
_UNKNOWN_TOPIC_ERRORS = frozenset(
    {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION}
)


@dataclass(frozen=True)
class ConsumeOptions:
    """What to read and when to stop.

    Starting point: ``offset`` (needs ``partition``), else the beginning with
    ``from_beginning``, else the end (only records produced from now on). With ``group`` the
    group's committed offsets win, ``from_beginning`` only chooses where a new group starts.
    Stops after ``max_messages`` records, or after ``idle_timeout`` seconds without one, or
    at Ctrl-C; with neither limit it runs until Ctrl-C. In a group, the idle clock starts once
    the group assigned partitions (``KafkaRequestError`` if that takes over
    ``GROUP_JOIN_TIMEOUT_S``).
    """

    bootstrap_servers: str
    topic: str
    from_beginning: bool = False
    partition: int | None = None
    offset: int | None = None
    max_messages: int | None = None
    group: str | None = None
    print_key: bool = False
    key_separator: bytes = b"\t"
    idle_timeout: float | None = None
    timeout: float = REQUEST_TIMEOUT_S

    def __post_init__(self) -> None:
        if self.offset is not None and self.partition is None:
            raise InvalidInputError("--offset needs --partition")
        if self.offset is not None and self.from_beginning:
            raise InvalidInputError("--offset and --from-beginning exclude each other")
        if self.group is not None and self.partition is not None:
            raise InvalidInputError(
                "--partition assigns partitions by hand and cannot be combined with --group"
            )


def consume(options: ConsumeOptions, out: BinaryIO) -> int:
    """Write records to ``out`` as lines (``value``, or ``key SEP value``); return how many.

    Blocks until a stop condition of ``options`` is met; flushes ``out`` after each batch so
    a pipe sees records promptly. In a group, offsets of printed records are committed
    (module docstring). A ``None`` key or value prints as ``null``. Raises
    ``UnknownTopicError`` for a missing topic or partition, ``KafkaRequestError`` when the
    start offset is out of range or the consumer fails fatally. ``BrokenPipeError`` from
    ``out`` propagates (the consumer is closed first).
    """
    session = ClientSession(
        Consumer,
        options.bootstrap_servers,
        {
            "group.id": options.group or _PLACEHOLDER_GROUP,
            "enable.auto.commit": options.group is not None,
            # Offsets are stored by hand, once their records are printed.
            "enable.auto.offset.store": False,
            "auto.offset.reset": _offset_reset(options),
            # librdkafka keeps one fetch in flight per broker; when it goes out before
            # every partition's start offset is known, records of the others wait for
            # that long poll to end. A short poll keeps --timeout honest.
            "fetch.wait.max.ms": _FETCH_WAIT_MS,
        },
        options.timeout,
    )
    consumer = session.client
    try:
        _start(session, options)
        count = _drain(consumer, options, out)
        if options.group is not None:
            _commit(consumer, options.group)
        return count
    finally:
        consumer.close()


def _offset_reset(options: ConsumeOptions) -> str:
    if options.offset is not None:
        return "error"  # an explicit offset that does not exist is the user's mistake
    return "earliest" if options.from_beginning else "latest"


def _start(session: ClientSession[Consumer], options: ConsumeOptions) -> None:
    wanted = None if options.partition is None else [options.partition]
    partitions = session.partitions(options.topic, wanted)
    consumer = session.client
    if options.group is not None:
        consumer.subscribe([options.topic])
        return
    if options.offset is not None:
        start = options.offset
    else:
        start = OFFSET_BEGINNING if options.from_beginning else OFFSET_END
    consumer.assign([TopicPartition(options.topic, p, start) for p in partitions])


def _drain(consumer: Consumer, options: ConsumeOptions, out: BinaryIO) -> int:
    count = 0
    started = last_record = time.monotonic()
    was_assigned = False
    try:
        while options.max_messages is None or count < options.max_messages:
            wait = 1.0  # short slices keep Ctrl-C responsive
            if options.idle_timeout is not None:
                now = time.monotonic()
                assigned = options.group is None or bool(consumer.assignment())
                if not (assigned and was_assigned):
                    # A group rebalance can take longer than the idle timeout: the idle
                    # clock only runs from the first check that sees partitions assigned
                    # (they may have come in the middle of the last consume() call).
                    last_record = now
                was_assigned = assigned
                if not assigned:
                    wait = 0.1  # notice the assignment promptly
                    if now - started > GROUP_JOIN_TIMEOUT_S:
                        raise KafkaRequestError(
                            f"group {options.group!r} assigned no partition of "
                            f"{options.topic!r} to this consumer within {GROUP_JOIN_TIMEOUT_S:g} s"
                        )
                left = last_record + options.idle_timeout - now
                if left <= 0:
                    break
                wait = min(wait, left)
            want = _BATCH if options.max_messages is None else options.max_messages - count
            lines = []
            positions: dict[tuple[str, int], int] = {}  # next offset to read, per partition
            for message in consumer.consume(num_messages=min(_BATCH, want), timeout=wait):
                error = message.error()
                if error is not None:
                    _check(error, options)
                    continue
                lines.append(_format(message, options))
                positions[(message.topic() or "", message.partition() or 0)] = (
                    message.offset() or 0
                ) + 1
            if lines:
                out.write(b"".join(lines))
                out.flush()
                count += len(lines)
                last_record = time.monotonic()
                if options.group is not None:
                    _store(consumer, positions)
    except KeyboardInterrupt:
        pass  # Ctrl-C is the normal way to end an unbounded consume
    return count


def _store(consumer: Consumer, positions: dict[tuple[str, int], int]) -> None:
    """Mark printed records as processed; auto-commit (or ``_commit``) sends them."""
    try:
        consumer.store_offsets(offsets=[TopicPartition(t, p, o) for (t, p), o in positions.items()])
    except KafkaException as e:
        # The partition was revoked meanwhile: its new owner reads these records again.
        logger.warning("offsets not stored: %s", error_text(kafka_error(e)))


def _commit(consumer: Consumer, group: str) -> None:
    """Commit the stored offsets now, synchronously; nothing stored is not an error."""
    try:
        consumer.commit(asynchronous=False)
    except KafkaException as e:
        error = kafka_error(e)
        if error.code() != KafkaError._NO_OFFSET:
            raise KafkaRequestError(
                f"records were printed but group {group!r} could not commit their offsets: "
                f"{error_text(error)}"
            ) from e


def _format(message: Message, options: ConsumeOptions) -> bytes:
    value = message.value()
    line = _NULL if value is None else value
    if options.print_key:
        key = message.key()
        line = (_NULL if key is None else key) + options.key_separator + line
    return line + b"\n"


def _check(error: KafkaError, options: ConsumeOptions) -> None:
    """Raise for errors that end the command; log the transient ones librdkafka retries."""
    code = error.code()
    if code == KafkaError._PARTITION_EOF:
        return
    if code in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
        where = f"partition {options.partition} of {options.topic!r}"
        if options.offset is not None:
            where = f"offset {options.offset} is out of range for {where}"
        raise KafkaRequestError(f"{where}: {error_text(error)}")
    if code in _UNKNOWN_TOPIC_ERRORS:
        raise UnknownTopicError(f"topic {options.topic!r}: {error_text(error)}")
    if error.fatal():
        raise KafkaRequestError(f"consumer failed: {error_text(error)}")
    logger.warning("%s (retrying)", error_text(error))
