"""``headrace.spark.metadata.with_retries``: what a failover's errors do to a driver-side
call (retried on fresh metadata within a deadline) and what any other error does (fails
at once). No sockets: the call is a function that raises librdkafka's own errors."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from confluent_kafka import KafkaError, KafkaException

from headrace.spark import metadata
from headrace.spark.errors import SparkConnectorError


def _failing(codes: list[int], result: str = "done") -> tuple[Callable[[], str], list[int]]:
    calls: list[int] = []

    def call() -> str:
        calls.append(1)
        if len(calls) <= len(codes):
            raise KafkaException(KafkaError(codes[len(calls) - 1]))
        return result

    return call, calls


@pytest.mark.parametrize("code", [KafkaError.FENCED_LEADER_EPOCH,
                                  KafkaError.NOT_LEADER_FOR_PARTITION,
                                  KafkaError.NOT_CONTROLLER, KafkaError._TIMED_OUT,
                                  KafkaError.COORDINATOR_NOT_AVAILABLE,
                                  KafkaError.LEADER_NOT_AVAILABLE])
def test_a_failover_error_is_retried(code: int) -> None:
    call, calls = _failing([code, code])
    assert metadata.with_retries("list offsets", call, deadline=10) == "done"
    assert len(calls) == 3


def test_any_other_error_fails_at_once_with_the_call_named() -> None:
    call, calls = _failing([KafkaError.TOPIC_AUTHORIZATION_FAILED])
    with pytest.raises(SparkConnectorError, match="cannot list offsets: "):
        metadata.with_retries("list offsets", call, deadline=10)
    assert len(calls) == 1


def test_a_transient_error_past_the_deadline_fails() -> None:
    call, calls = _failing([KafkaError.FENCED_LEADER_EPOCH] * 100)
    with pytest.raises(SparkConnectorError, match=r"cannot list offsets: "):
        metadata.with_retries("list offsets", call, deadline=0.5)
    assert 2 <= len(calls) < 10
