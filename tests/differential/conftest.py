"""Fixtures of the differential suite: one Apache Kafka (the reference) and one headrace
broker for the whole session, both without topic auto-creation and with a fast log
cleaner, so every scenario runs the same client calls against each and compares."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from headrace.testing import ApacheKafka, EmbeddedBroker

if TYPE_CHECKING:
    from tests.differential.secured import Secured

REPO_ROOT = Path(__file__).resolve().parents[2]
KAFKA_CONFIGS = {
    "auto.create.topics.enable": "false",
    "num.partitions": "1",
    "log.cleaner.backoff.ms": "100",
    "log.retention.check.interval.ms": "200",
    "log.segment.delete.delay.ms": "0",
    "log.cleaner.dedupe.buffer.size": "2097152",
    "group.initial.rebalance.delay.ms": "0",
}
HEADRACE_ARGS = ["--no-auto-create-topics", "--log-cleaner-backoff-ms", "100",
                 "--log-retention-check-interval-ms", "200"]


@dataclass(frozen=True)
class Brokers:
    """Bootstrap addresses of the reference (Apache Kafka) and of headrace."""

    kafka: str
    headrace: str

    def each(self) -> dict[str, str]:
        return {"kafka": self.kafka, "headrace": self.headrace}


@pytest.fixture(scope="session")
def apache_kafka() -> Iterator[ApacheKafka]:
    os.environ.setdefault("HEADRACE_JVM_LIB", str(REPO_ROOT / "jvm" / "lib"))
    with ApacheKafka(configs=KAFKA_CONFIGS) as k:
        yield k


@pytest.fixture(scope="session")
def headrace_broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(extra_args=HEADRACE_ARGS) as b:
        yield b


@pytest.fixture(scope="session")
def brokers(apache_kafka: ApacheKafka, headrace_broker: EmbeddedBroker) -> Brokers:
    return Brokers(apache_kafka.bootstrap_servers, headrace_broker.bootstrap_servers)


@pytest.fixture(scope="session")
def kafka_secured() -> Iterator[Secured]:
    """Apache Kafka with its StandardAuthorizer and SASL users (``secured``)."""
    from tests.differential import secured

    os.environ.setdefault("HEADRACE_JVM_LIB", str(REPO_ROOT / "jvm" / "lib"))
    with secured.kafka_secured() as s:
        yield s


@pytest.fixture(scope="session")
def headrace_secured() -> Iterator[Secured]:
    """headrace with ``--authorizer``, the same users and ACLs (``secured``)."""
    from tests.differential import secured

    with secured.headrace_secured() as s:
        yield s
