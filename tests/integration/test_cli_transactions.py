"""``headrace transactions list|describe``, run as subprocesses against a real broker process
(EmbeddedBroker), checked against transactions that confluent-kafka producers in this process
opened, committed and aborted.

No fixed sleeps: a transaction's completion is awaited by polling with a deadline (EndTxn may
answer before the coordinator wrote CompleteCommit).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime

import pytest
from confluent_kafka import Producer

from headrace.testing import EmbeddedBroker, scaled
from tests.integration.test_cli import cli, closed_port, failed, ok, table_rows
from tests.integration.txn_support import create_topics, transactional_producer

DEADLINE_S = scaled(30.0)
TOPIC = "txn-cli"


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(extra_args=["--no-auto-create-topics"]) as b:
        create_topics(b.bootstrap_servers, [TOPIC], partitions=3)
        yield b


def open_transaction(servers: str, transactional_id: str, partitions: list[int]) -> Producer:
    """A producer whose transaction is open (begun, records flushed, not committed), with
    ``partitions`` of ``TOPIC`` in it."""
    producer = transactional_producer(servers, transactional_id)
    producer.begin_transaction()
    for p in partitions:
        producer.produce(TOPIC, f"{transactional_id}-{p}".encode(), partition=p)
    assert producer.flush(DEADLINE_S) == 0
    return producer


def facts(servers: str, transactional_id: str) -> dict[str, str]:
    """``transactions describe``'s rows as {name: value}."""
    out = ok(cli("transactions", "describe", transactional_id, servers=servers)).stdout
    return {name: value for name, value in table_rows(out)}


def listed(servers: str, *args: str) -> list[list[str]]:
    """Rows (transactional id, coordinator, producer id, state) of ``transactions list``."""
    return table_rows(ok(cli("transactions", "list", *args, servers=servers)).stdout)


def wait_for_state(servers: str, transactional_id: str, state: str) -> dict[str, str]:
    deadline = time.monotonic() + DEADLINE_S
    while (found := facts(servers, transactional_id))["State"] != state:
        assert time.monotonic() < deadline, f"{transactional_id} stayed {found['State']}"
    return found


# --- help and failures ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "command", [["transactions"], ["transactions", "list"], ["transactions", "describe"]]
)
def test_every_transactions_command_has_help(command: list[str]) -> None:
    assert "Usage" in ok(cli(*command, "--help")).stdout


@pytest.mark.parametrize("command", [["list"], ["describe", "some-id"]])
def test_unreachable_broker_fails_fast_and_clearly(command: list[str]) -> None:
    servers = f"127.0.0.1:{closed_port()}"
    err = failed(cli("transactions", *command, "-b", servers))
    # Fast: this is the refused-connection message; waiting out the request timeout ends
    # with "no answer from a broker at ... within N s" instead (no wall-clock bound).
    assert f"cannot reach a broker at {servers}" in err
    assert "no answer from a broker" not in err


def test_describe_unknown_transactional_id_fails_clearly(broker: EmbeddedBroker) -> None:
    result = cli("transactions", "describe", "no-such-txn", servers=broker.bootstrap_servers)
    assert "transactional id 'no-such-txn' does not exist" in failed(result)
    assert result.stdout == ""


def test_unknown_state_is_a_usage_error(broker: EmbeddedBroker) -> None:
    result = cli("transactions", "list", "--state", "Pending", servers=broker.bootstrap_servers)
    assert "--state" in failed(result, code=2)


# --- list and describe ------------------------------------------------------------------------


def test_open_transaction_is_ongoing_with_its_partitions_then_complete(
    broker: EmbeddedBroker,
) -> None:
    servers = broker.bootstrap_servers
    started_before = time.time()
    producer = open_transaction(servers, "txn-open", [0, 2])

    described = facts(servers, "txn-open")
    assert described["State"] == "Ongoing"
    assert described["Partitions"] == f"{TOPIC}:0,2"
    assert described["Producer epoch"] == "0"
    assert described["Timeout"] == "60000 ms"  # librdkafka's default transaction.timeout.ms
    assert described["Coordinator"] == "node 0"
    # "2026-11-02T14:30:00.123+01:00 (0.4 s ago)": when the first partition was added.
    when, _, ago = described["Started"].partition(" (")
    start_s = datetime.fromisoformat(when).timestamp()
    assert started_before - 1 <= start_s <= time.time() and ago.endswith(" s ago)")
    producer_id = described["Producer id"]
    assert int(producer_id) >= 0

    assert ["txn-open", "0", producer_id, "Ongoing"] in listed(servers)
    assert "txn-open" in ok(cli("transactions", "list", "-q", servers=servers)).stdout.split()

    producer.commit_transaction(DEADLINE_S)
    done = wait_for_state(servers, "txn-open", "CompleteCommit")
    assert done["Producer id"] == producer_id
    assert ["txn-open", "0", producer_id, "CompleteCommit"] in listed(servers)


def test_list_filters_by_state_producer_id_and_duration(broker: EmbeddedBroker) -> None:
    servers = broker.bootstrap_servers
    committed = open_transaction(servers, "txn-filter-done", [1])
    committed.commit_transaction(DEADLINE_S)
    aborted = open_transaction(servers, "txn-filter-aborted", [0])
    aborted.abort_transaction(DEADLINE_S)
    wait_for_state(servers, "txn-filter-done", "CompleteCommit")
    wait_for_state(servers, "txn-filter-aborted", "CompleteAbort")
    ongoing = open_transaction(servers, "txn-filter-open", [1, 2])
    try:
        everything = {row[0]: row for row in listed(servers) if row[0].startswith("txn-filter-")}
        assert everything["txn-filter-open"][3] == "Ongoing"
        assert everything["txn-filter-done"][3] == "CompleteCommit"
        assert everything["txn-filter-aborted"][3] == "CompleteAbort"

        def ids(*args: str) -> set[str]:
            """The ids of this test's transactions that ``list ARGS`` shows."""
            return {row[0] for row in listed(servers, *args)} & set(everything)

        # States by Kafka's names, in any case; repeated options widen the filter.
        assert ids("--state", "Ongoing") == {"txn-filter-open"}
        assert ids("-s", "completecommit", "-s", "COMPLETEABORT") == {
            "txn-filter-done",
            "txn-filter-aborted",
        }
        assert ids("--state", "PrepareCommit") == set()

        open_pid = everything["txn-filter-open"][2]
        done_pid = everything["txn-filter-done"][2]
        assert ids("--producer-id", open_pid) == {"txn-filter-open"}
        assert ids("--producer-id", open_pid, "--producer-id", done_pid) == {
            "txn-filter-open",
            "txn-filter-done",
        }
        assert ids("--producer-id", open_pid, "--state", "CompleteCommit") == set()
        assert ids("--producer-id", "999999") == set()

        # The open transaction has been running for a while (one CLI run at least).
        assert "txn-filter-open" in ids("--min-duration-ms", "0")
        assert ids("--min-duration-ms", "3600000") == set()

        nothing = ok(cli("transactions", "list", "--producer-id", "999999", servers=servers))
        assert "No transactions." in nothing.stdout
    finally:
        ongoing.abort_transaction(DEADLINE_S)


def test_initialised_producer_without_a_transaction_is_empty(broker: EmbeddedBroker) -> None:
    servers = broker.bootstrap_servers
    transactional_producer(servers, "txn-idle")  # InitProducerId only
    described = facts(servers, "txn-idle")
    assert described["State"] == "Empty"
    assert described["Partitions"] == "-"
    assert ["txn-idle", "0", described["Producer id"], "Empty"] in listed(servers)
