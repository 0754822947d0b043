"""``headrace groups ...`` and ``headrace consume --group``, run as subprocesses against a real
broker process (EmbeddedBroker), checked against what a confluent-kafka client in this process
produced, committed and reads back through the AdminClient.

No fixed sleeps: waits poll with deadlines (a group's first rebalance takes the coordinator's
initial delay, 300 ms).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from headrace.testing import EmbeddedBroker, scaled
from tests.integration.test_cli import cli, closed_port, failed, ok, table_rows

DEADLINE_S = scaled(30.0)
# Records of the reset test are stamped BASE_TIME + i seconds (CreateTime), i = offset.
BASE_TIME = datetime(2024, 1, 1, tzinfo=UTC)


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(extra_args=["--no-auto-create-topics"]) as b:
        yield b


@pytest.fixture(scope="module")
def admin(broker: EmbeddedBroker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap_servers})


# --- helpers ----------------------------------------------------------------------------------


def create_topic(admin: AdminClient, name: str, partitions: int) -> None:
    admin.create_topics([NewTopic(name, partitions)])[name].result(timeout=DEADLINE_S)


def produce(servers: str, topic: str, counts: dict[int, int], timed: bool = False) -> None:
    """``counts[p]`` records to partition ``p``, valued ``p-i``; with ``timed``, record ``i``
    of each partition is stamped ``BASE_TIME + i`` seconds."""
    producer = Producer({"bootstrap.servers": servers})
    base_ms = int(BASE_TIME.timestamp() * 1000)
    for partition, count in counts.items():
        for i in range(count):
            extra = {"timestamp": base_ms + i * 1000} if timed else {}
            producer.produce(topic, f"{partition}-{i}".encode(), partition=partition, **extra)
    assert producer.flush(DEADLINE_S) == 0


def join(servers: str, group: str, topic: str, client_id: str) -> Consumer:
    """A consumer subscribed to ``topic`` in ``group``, returned once it has its assignment
    (the group is then Stable). It commits nothing by itself."""
    consumer = Consumer(
        {
            "bootstrap.servers": servers,
            "group.id": group,
            "client.id": client_id,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    deadline = time.monotonic() + DEADLINE_S
    while not consumer.assignment():
        assert time.monotonic() < deadline, f"{client_id} got no assignment in {group}"
        consumer.poll(0.1)
    return consumer


def commit(consumer: Consumer, topic: str, offsets: dict[int, int]) -> None:
    consumer.commit(
        offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False
    )


def committed(admin: AdminClient, group: str, topic: str) -> dict[int, int]:
    """The group's committed offsets on ``topic`` as the AdminClient reads them."""
    request = [ConsumerGroupTopicPartitions(group)]
    result = admin.list_consumer_group_offsets(request)[group].result(timeout=DEADLINE_S)
    return {
        tp.partition: tp.offset
        for tp in result.topic_partitions
        if tp.topic == topic and tp.offset >= 0
    }


def wait_for_state(admin: AdminClient, group: str, state: ConsumerGroupState) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while admin.describe_consumer_groups([group])[group].result(timeout=DEADLINE_S).state != state:
        assert time.monotonic() < deadline, f"group {group} never became {state}"
        time.sleep(0.05)  # polling the broker, not waiting for time to pass


# --- help -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [["groups"], ["groups", "list"], ["groups", "describe"], ["groups", "reset-offsets"],
     ["groups", "delete"]],
)  # fmt: skip
def test_every_groups_command_has_help(command: list[str]) -> None:
    assert "Usage" in ok(cli(*command, "--help")).stdout


@pytest.mark.parametrize(
    "command",
    [
        ["list"],
        ["describe", "g"],
        ["delete", "g"],
        ["reset-offsets", "g", "-t", "t", "--to-earliest"],
    ],
)
def test_unreachable_broker_fails_fast_and_clearly(command: list[str]) -> None:
    servers = f"127.0.0.1:{closed_port()}"
    assert f"cannot reach a broker at {servers}" in failed(cli("groups", *command, "-b", servers))


# --- list and describe ------------------------------------------------------------------------


def test_live_group_is_listed_and_described_with_lag(
    broker: EmbeddedBroker, admin: AdminClient
) -> None:
    servers = broker.bootstrap_servers
    create_topic(admin, "lag-orders", 3)
    create_topic(admin, "lag-audit", 1)
    produce(servers, "lag-orders", {0: 10, 1: 6, 2: 4})
    produce(servers, "lag-audit", {0: 3})
    consumer = join(servers, "lag-group", "lag-orders", "lag-client")
    try:
        member_id = consumer.memberid()
        # Nothing committed on partition 2; lag-audit is committed but owned by nobody.
        commit(consumer, "lag-orders", {0: 7, 1: 6})
        commit(consumer, "lag-audit", {0: 1})

        listing = table_rows(ok(cli("groups", "list", servers=servers)).stdout)
        assert ["lag-group", "Stable", "consumer"] in listing
        assert "lag-group" in ok(cli("groups", "list", "-q", servers=servers)).stdout.split()

        described = ok(cli("groups", "describe", "lag-group", servers=servers)).stdout
        assert "Group lag-group: Stable, consumer, assignor range, 1 member" in described
        rows = table_rows(described)
        assert [r for r in rows if len(r) == 4] == [
            [member_id, "lag-client", "/127.0.0.1", "lag-orders:0,1,2"]
        ]
        assert [r for r in rows if len(r) == 6] == [
            ["lag-audit", "0", "1", "3", "2", "-"],
            ["lag-orders", "0", "7", "10", "3", member_id],
            ["lag-orders", "1", "6", "6", "0", member_id],
            ["lag-orders", "2", "-", "4", "-", member_id],
        ]
        assert "Total lag: 5" in described

        err = failed(cli("groups", "delete", "lag-group", servers=servers))
        assert "group 'lag-group' has live members" in err
    finally:
        consumer.close()
    wait_for_state(admin, "lag-group", ConsumerGroupState.EMPTY)
    described = ok(cli("groups", "describe", "lag-group", servers=servers)).stdout
    assert "Group lag-group: Empty, consumer, 0 members" in described
    assert "Total lag: 5" in described  # the offsets outlive the members
    assert ["lag-group", "Empty", "consumer"] in table_rows(
        ok(cli("groups", "list", servers=servers)).stdout
    )


def test_describe_unknown_group_fails_clearly(broker: EmbeddedBroker) -> None:
    result = cli("groups", "describe", "no-such-group", servers=broker.bootstrap_servers)
    assert "group 'no-such-group' does not exist" in failed(result)
    assert result.stdout == ""


# --- reset-offsets ----------------------------------------------------------------------------


def test_reset_offsets_dry_run_refusal_and_every_mode(
    broker: EmbeddedBroker, admin: AdminClient
) -> None:
    servers, topic, group = broker.bootstrap_servers, "reset-events", "reset-group"
    create_topic(admin, topic, 2)
    produce(servers, topic, {0: 10, 1: 10}, timed=True)

    def reset(*args: str) -> str:
        return ok(
            cli("groups", "reset-offsets", group, "--topic", topic, *args, servers=servers)
        ).stdout

    consumer = join(servers, group, topic, "reset-client")
    try:
        commit(consumer, topic, {0: 4, 1: 8})
        dry = cli("groups", "reset-offsets", group, "-t", topic, "--to-earliest", servers=servers)
        assert table_rows(ok(dry).stdout) == [
            [topic, "0", "4", "0"], [topic, "1", "8", "0"]
        ]  # fmt: skip
        assert "Dry run: nothing changed" in dry.stdout
        assert "--execute is refused" in dry.stderr  # the group is live
        assert committed(admin, group, topic) == {0: 4, 1: 8}

        refused = cli("groups", "reset-offsets", group, "-t", topic, "--to-earliest", "--execute",
                      servers=servers)  # fmt: skip
        assert "group 'reset-group' is Stable" in failed(refused)
        assert "no live members" in refused.stderr
        assert committed(admin, group, topic) == {0: 4, 1: 8}
    finally:
        consumer.close()
    wait_for_state(admin, group, ConsumerGroupState.EMPTY)

    out = reset("--to-earliest", "--execute")
    assert "Reset the offsets of group reset-group on 2 partitions" in out
    assert committed(admin, group, topic) == {0: 0, 1: 0}

    reset("--to-latest", "--execute")
    assert committed(admin, group, topic) == {0: 10, 1: 10}

    reset("--to-offset", "3", "--partition", "1", "--execute")
    assert committed(admin, group, topic) == {0: 10, 1: 3}

    reset("--shift-by", "-2", "--execute")
    assert committed(admin, group, topic) == {0: 8, 1: 1}

    clamped = reset("--shift-by", "-5", "-p", "1", "--execute")
    assert table_rows(clamped) == [[topic, "1", "1", "0", "-4 is before the log start: clamped"]]
    assert committed(admin, group, topic) == {0: 8, 1: 0}

    # Record i carries BASE_TIME + i s: 5.5 s in (given in another zone) lands on offset 6.
    when = (BASE_TIME + timedelta(seconds=5.5)).astimezone(timezone(timedelta(hours=2)))
    reset("--to-datetime", when.isoformat(), "--execute")
    assert committed(admin, group, topic) == {0: 6, 1: 6}

    future = table_rows(reset("--to-datetime", "2999-01-01T00:00:00Z", "--execute"))
    assert [r[:4] for r in future] == [[topic, "0", "6", "10"], [topic, "1", "6", "10"]]
    assert committed(admin, group, topic) == {0: 10, 1: 10}

    # Dry runs change nothing, even when the target is out of range (clamped to the log end).
    past_end = table_rows(reset("--to-offset", "50"))
    assert [r[:4] for r in past_end] == [[topic, "0", "10", "10"], [topic, "1", "10", "10"]]
    assert committed(admin, group, topic) == {0: 10, 1: 10}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "exactly one of"),
        (["--to-earliest", "--to-latest"], "exactly one of"),
        (["--to-offset", "1", "--shift-by", "1"], "exactly one of"),
        (["--to-datetime", "yesterday"], "ISO 8601"),
    ],
)
def test_reset_offsets_needs_exactly_one_valid_target(
    broker: EmbeddedBroker, args: list[str], message: str
) -> None:
    result = cli("groups", "reset-offsets", "g", "--topic", "t", *args,
                 servers=broker.bootstrap_servers)  # fmt: skip
    assert message in failed(result, code=2)


def test_reset_offsets_errors(broker: EmbeddedBroker, admin: AdminClient) -> None:
    servers = broker.bootstrap_servers
    create_topic(admin, "reset-errors", 2)

    def reset(*args: str) -> str:
        return failed(cli("groups", "reset-offsets", "err-group", *args, servers=servers))

    assert "topic 'missing' does not exist" in reset("-t", "missing", "--to-earliest")
    assert "topic 'reset-errors' has no partition 7" in reset(
        "-t", "reset-errors", "-p", "7", "--to-earliest"
    )
    assert "cannot shift reset-errors-0: group 'err-group' has no committed offset" in reset(
        "-t", "reset-errors", "--shift-by", "1"
    )


# --- delete -----------------------------------------------------------------------------------


def test_delete_group(broker: EmbeddedBroker, admin: AdminClient) -> None:
    servers = broker.bootstrap_servers
    create_topic(admin, "delete-me", 1)
    produce(servers, "delete-me", {0: 2})
    # A reset may create a group: a "simple" one, offsets without members or protocol.
    ok(cli("groups", "reset-offsets", "doomed", "-t", "delete-me", "--to-latest", "--execute",
           servers=servers))  # fmt: skip
    assert ["doomed", "Empty", "-"] in table_rows(ok(cli("groups", "list", servers=servers)).stdout)

    assert "Deleted group doomed" in ok(cli("groups", "delete", "doomed", servers=servers)).stdout
    assert "doomed" not in ok(cli("groups", "list", "-q", servers=servers)).stdout.split()
    assert committed(admin, "doomed", "delete-me") == {}
    err = failed(cli("groups", "delete", "doomed", servers=servers))
    assert "group 'doomed' does not exist" in err


# --- consume --group --------------------------------------------------------------------------


def test_consume_in_a_group_continues_from_the_committed_position(
    broker: EmbeddedBroker, admin: AdminClient
) -> None:
    servers, topic = broker.bootstrap_servers, "grouped"
    create_topic(admin, topic, 2)
    produce(servers, topic, {0: 5, 1: 5})
    expected = sorted(f"{p}-{i}" for p in range(2) for i in range(5))

    def consume(*stop: str) -> tuple[list[str], str]:
        result = ok(cli("consume", topic, "--group", "readers", "--from-beginning", *stop,
                        servers=servers))  # fmt: skip
        return result.stdout.splitlines(), result.stderr

    first, err = consume("-n", "6")
    assert "Consumed 6 records" in err
    # Committed on exit: exactly what was printed, per partition the next offset to read.
    after_first = committed(admin, "readers", topic)
    assert sum(after_first.values()) == 6
    for p, offset in after_first.items():
        assert [line for line in first if line.startswith(f"{p}-")] == [
            f"{p}-{i}" for i in range(offset)
        ]
    # The idle timeout runs from the assignment on, so the group's join does not eat it.
    # (Also how long the fetch of the 4 records may take after it: the machine's, scaled.)
    second, err = consume("--timeout", str(scaled(1.0)))
    assert "Consumed 4 records" in err
    assert sorted(first + second) == expected  # nothing twice, nothing skipped
    assert committed(admin, "readers", topic) == {0: 5, 1: 5}
    assert "Total lag: 0" in ok(cli("groups", "describe", "readers", servers=servers)).stdout
