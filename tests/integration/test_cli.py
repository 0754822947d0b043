"""The ``headrace`` CLI, run as a subprocess against a real broker process (EmbeddedBroker).

Placement of keyed records is checked against a reference murmur2 written here from Kafka's
Java ``Utils.murmur2``, independently of ``headrace.protocol.partitioner``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

import headrace
from headrace.testing import EmbeddedBroker, scaled

SRC_DIR = Path(headrace.__file__).resolve().parent.parent
CLI_TIMEOUT = 60.0


# --- reference partitioner: Kafka's Utils.murmur2 and BuiltInPartitioner ------------------


def java_murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2``, returning Java's signed 32-bit int."""
    m, r, mask = 0x5BD1E995, 24, 0xFFFFFFFF
    length = len(data)
    h = (0x9747B28C ^ length) & mask
    for i in range(length // 4):
        i4 = i * 4
        k = data[i4] | data[i4 + 1] << 8 | data[i4 + 2] << 16 | data[i4 + 3] << 24
        k = (k * m) & mask
        k ^= k >> r  # Java's >>> on an int
        k = (k * m) & mask
        h = (h * m) & mask
        h ^= k
    rest = length % 4
    base = length & ~3
    if rest == 3:
        h ^= data[base + 2] << 16
    if rest >= 2:
        h ^= data[base + 1] << 8
    if rest >= 1:
        h ^= data[base]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def java_partition(key: bytes, partitions: int) -> int:
    """``Utils.toPositive(Utils.murmur2(key)) % numPartitions``."""
    return (java_murmur2(key) & 0x7FFFFFFF) % partitions


@pytest.mark.parametrize(
    ("text", "expected"),
    [  # the vectors of Kafka's UtilsTest.testMurmur2
        ("21", -973932308),
        ("foobar", -790332482),
        ("a-little-bit-long-string", -985981536),
        ("a-little-bit-longer-string", -1486304829),
        ("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
        ("abc", 479470107),
    ],
)
def test_reference_murmur2_matches_kafka(text: str, expected: int) -> None:
    assert java_murmur2(text.encode()) == expected


# --- fixtures and helpers -------------------------------------------------------------------


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    # Without auto-creation, producing to a missing topic is an error we can test.
    with EmbeddedBroker(extra_args=["--no-auto-create-topics"]) as b:
        yield b


def cli(
    *args: str, servers: str | None = None, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m headrace ARGS``; ``servers`` goes in via HEADRACE_BOOTSTRAP_SERVERS."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SRC_DIR), env.get("PYTHONPATH")]))
    env.pop("HEADRACE_BOOTSTRAP_SERVERS", None)
    # tables at a fixed width wider than any row: rich otherwise sizes them to whatever
    # terminal (or none, in an xdist worker) the test run happens to have
    env["COLUMNS"] = "250"
    if servers is not None:
        env["HEADRACE_BOOTSTRAP_SERVERS"] = servers
    return subprocess.run(
        [sys.executable, "-m", "headrace", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=scaled(CLI_TIMEOUT),
    )


def ok(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result


def failed(result: subprocess.CompletedProcess[str], code: int = 1) -> str:
    """Assert a clean failure: exit ``code``, no traceback; return stderr."""
    assert result.returncode == code, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    assert "Traceback" not in result.stderr
    return result.stderr


def create_topic(broker: EmbeddedBroker, name: str, partitions: int) -> None:
    ok(
        cli(
            "topics",
            "create",
            name,
            "--partitions",
            str(partitions),
            servers=broker.bootstrap_servers,
        )
    )


def read_all(
    servers: str, topic: str, partitions: int, expected: int
) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """(partition, offset, key, value) of ``expected`` records, read by a plain Consumer."""
    consumer = Consumer(
        {"bootstrap.servers": servers, "group.id": "test-cli-unused", "enable.auto.commit": False}
    )
    out = []
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        deadline = time.monotonic() + scaled(20)
        while len(out) < expected and time.monotonic() < deadline:
            for m in consumer.consume(num_messages=1000, timeout=0.2):
                assert m.error() is None, m.error()
                out.append((m.partition() or 0, m.offset() or 0, m.key(), m.value()))
    finally:
        consumer.close()
    assert len(out) == expected
    return out


def table_rows(text: str) -> list[list[str]]:
    """The body rows of the rich tables in ``text``, as lists of stripped cells."""
    return [
        [cell.strip() for cell in line.split("│")[1:-1]]
        for line in text.splitlines()
        if line.startswith("│")
    ]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- help -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [[], ["broker"], ["topics"], ["topics", "create"], ["topics", "list"], ["topics", "describe"],
     ["topics", "delete"], ["topics", "alter-config"], ["produce"], ["consume"], ["demo"],
     ["capacity"]],
)  # fmt: skip
def test_every_command_has_help(command: list[str]) -> None:
    result = ok(cli(*command, "--help"))
    assert "Usage" in result.stdout


ALL_COMMANDS = ("broker", "produce", "consume", "demo", "registry", "capacity", "console",
                "topics", "groups", "transactions", "schemas", "cdc", "bank", "users", "acls",
                "savepoint", "cluster")


def test_root_help_lists_every_command() -> None:
    """A command's module is loaded only when it runs (``headrace.cli.app.main``); the root
    help still names every one."""
    listed = {line.split()[1] for line in ok(cli("--help")).stdout.splitlines()
              if line.startswith("│ ") and len(line.split()) > 2}
    assert set(ALL_COMMANDS) <= listed


def test_a_command_after_root_options_and_a_misspelt_one() -> None:
    """Root options (and their values) come before the command's name; a name that is no
    command gets click's error, with the hint of the nearest one."""
    assert "--partitions" in ok(cli("-X", "client.id=x", "--verbose", "topics", "create",
                                    "--help")).stdout
    assert "mysql" in ok(cli("-X", "client.id=x", "cdc", "--help")).stdout
    err = cli("topic", "list")
    assert err.returncode == 2
    assert "No such command 'topic'" in err.stderr and "topics" in err.stderr


# --- topics ---------------------------------------------------------------------------------


def test_topic_lifecycle(broker: EmbeddedBroker) -> None:
    servers = broker.bootstrap_servers
    created = ok(
        cli(
            "topics", "create", "orders", "-p", "3", "--config", "retention.ms=60000", "-b", servers
        )
    )
    assert "Created topic orders" in created.stdout

    assert "orders" in ok(cli("topics", "list", "-q", servers=servers)).stdout.split()
    listing = table_rows(ok(cli("topics", "list", servers=servers)).stdout)
    assert ["orders", "3"] in listing

    described = ok(cli("topics", "describe", "orders", servers=servers)).stdout
    assert "orders: 3 partitions, replication factor 1" in described
    rows = table_rows(described)
    # Partition, leader, replicas, in-sync replicas: all on the one broker, node id 0.
    assert [row for row in rows if len(row) == 4] == [[str(p), "0", "0", "0"] for p in range(3)]
    configs = {row[0]: row[1:] for row in rows if len(row) == 3}
    assert configs["retention.ms"] == ["60000", "topic"]

    assert "Deleted topic orders" in ok(cli("topics", "delete", "orders", servers=servers)).stdout
    assert "orders" not in ok(cli("topics", "list", "-q", servers=servers)).stdout.split()


def test_create_existing_topic_fails_clearly(broker: EmbeddedBroker) -> None:
    create_topic(broker, "twice", 1)
    err = failed(cli("topics", "create", "twice", servers=broker.bootstrap_servers))
    assert "topic 'twice' already exists" in err


def test_describe_unknown_topic_fails_clearly(broker: EmbeddedBroker) -> None:
    result = cli("topics", "describe", "no-such-topic", servers=broker.bootstrap_servers)
    assert "topic 'no-such-topic' does not exist" in failed(result)
    assert result.stdout == ""


def test_delete_unknown_topic_fails_clearly(broker: EmbeddedBroker) -> None:
    err = failed(cli("topics", "delete", "no-such-topic", servers=broker.bootstrap_servers))
    assert "topic 'no-such-topic' does not exist" in err


def test_malformed_config_is_a_usage_error(broker: EmbeddedBroker) -> None:
    err = failed(
        cli("topics", "create", "x", "--config", "oops", servers=broker.bootstrap_servers), code=2
    )
    assert "NAME=VALUE" in err


@pytest.mark.parametrize(
    "command",
    [["topics", "list"], ["topics", "describe", "t"], ["consume", "t", "-n", "1"]],
)
def test_unreachable_broker_fails_fast_and_clearly(command: list[str]) -> None:
    servers = f"127.0.0.1:{closed_port()}"
    err = failed(cli(*command, "-b", servers))
    assert f"cannot reach a broker at {servers}" in err


def test_produce_to_unreachable_broker_fails(broker: EmbeddedBroker) -> None:
    servers = f"127.0.0.1:{closed_port()}"
    assert "cannot reach a broker" in failed(cli("produce", "t", "-b", servers, stdin="x\n"))


# --- produce and consume --------------------------------------------------------------------


def test_keyed_records_land_where_java_murmur2_puts_them(broker: EmbeddedBroker) -> None:
    servers, partitions = broker.bootstrap_servers, 6
    create_topic(broker, "keyed", partitions)
    keys = [f"user-{i}" for i in range(60)] + ["", "ü-utf8", "a", "ab", "abc"]
    lines = "".join(f"{k}:value of {k}\n" for k in keys)
    result = ok(cli("produce", "keyed", "--key-separator", ":", servers=servers, stdin=lines))
    assert f"Produced {len(keys)} records to keyed" in result.stdout

    records = read_all(servers, "keyed", partitions, len(keys))
    for partition, _, key, value in records:
        assert key is not None and value is not None
        assert partition == java_partition(key, partitions), key
        assert value == b"value of " + key
    assert len({p for p, *_ in records}) == partitions  # 65 keys spread over all 6


def test_consume_partition_offset_and_max_messages(broker: EmbeddedBroker) -> None:
    servers, partitions = broker.bootstrap_servers, 3
    create_topic(broker, "ledger", partitions)
    keys = [f"acct-{i % 7}" for i in range(40)]
    lines = [f"{k}=entry-{n}" for n, k in enumerate(keys)]
    ok(cli("produce", "ledger", "--key-separator", "=", servers=servers, stdin="\n".join(lines)))
    # One producer: each partition holds its keys' lines in input order.
    by_partition = {p: [line for line, k in zip(lines, keys, strict=True) if java_partition(k.encode(), partitions) == p]
                    for p in range(partitions)}  # fmt: skip
    p = max(by_partition, key=lambda q: len(by_partition[q]))
    assert len(by_partition[p]) >= 4

    got = ok(cli("consume", "ledger", "--partition", str(p), "--offset", "1", "--max-messages", "3",
                 "--print-key", "--key-separator", "=", servers=servers))  # fmt: skip
    assert got.stdout.splitlines() == by_partition[p][1:4]
    assert "Consumed 3 records" in got.stderr

    values = ok(
        cli("consume", "ledger", "-p", str(p), "--from-beginning", "-n", "2", servers=servers)
    )
    assert values.stdout.splitlines() == [line.split("=", 1)[1] for line in by_partition[p][:2]]

    everything = ok(
        cli("consume", "ledger", "--from-beginning", "-n", str(len(lines)), servers=servers)
    )
    assert sorted(everything.stdout.splitlines()) == sorted(f"entry-{n}" for n in range(len(lines)))


def test_produce_to_explicit_partition_without_keys(broker: EmbeddedBroker) -> None:
    servers = broker.bootstrap_servers
    create_topic(broker, "manual", 3)
    ok(
        cli(
            "produce",
            "manual",
            "--partition",
            "2",
            "--acks",
            "1",
            servers=servers,
            stdin="one\r\ntwo\nthree",
        )
    )
    records = read_all(servers, "manual", 3, 3)
    assert [(p, o, k, v) for p, o, k, v in records] == [
        (2, 0, None, b"one"), (2, 1, None, b"two"), (2, 2, None, b"three")
    ]  # fmt: skip
    keyed = ok(
        cli(
            "consume",
            "manual",
            "-p",
            "2",
            "--from-beginning",
            "-n",
            "1",
            "--print-key",
            servers=servers,
        )
    )
    assert keyed.stdout == "null\tone\n"


def test_consume_timeout_stops_when_idle(broker: EmbeddedBroker) -> None:
    create_topic(broker, "quiet", 2)
    result = ok(cli("consume", "quiet", "--timeout", "0.5", servers=broker.bootstrap_servers))
    assert result.stdout == ""
    assert "Consumed 0 records" in result.stderr


def test_consume_errors(broker: EmbeddedBroker) -> None:
    servers = broker.bootstrap_servers
    create_topic(broker, "small", 2)
    ok(cli("produce", "small", "-p", "0", servers=servers, stdin="a\nb\n"))
    assert "does not exist" in failed(cli("consume", "missing", "-n", "1", servers=servers))
    assert "has no partition 5" in failed(
        cli("consume", "small", "-p", "5", "-n", "1", servers=servers)
    )
    assert "out of range" in failed(
        cli("consume", "small", "-p", "0", "--offset", "50", "-n", "1", servers=servers)
    )
    assert "--offset needs --partition" in failed(
        cli("consume", "small", "--offset", "1", servers=servers), code=2
    )


def test_produce_errors(broker: EmbeddedBroker) -> None:
    servers = broker.bootstrap_servers
    assert "topic 'absent' does not exist" in failed(
        cli("produce", "absent", servers=servers, stdin="x\n")
    )
    create_topic(broker, "strict", 1)
    assert "has no partition 3" in failed(
        cli("produce", "strict", "-p", "3", servers=servers, stdin="x\n")
    )
    err = failed(
        cli("produce", "strict", "--key-separator", ":", servers=servers, stdin="k:v\nnokey\nk:w\n")
    )
    assert "line 2 has no key separator ':'" in err
    # The line before the bad one was delivered, the one after it was not.
    assert read_all(servers, "strict", 1, 1)[0][2:] == (b"k", b"v")


# --- demo -------------------------------------------------------------------------------------


def test_demo_runs_and_verifies() -> None:
    result = ok(cli("demo", "payments", "--records", "1000"))
    assert "OK" in result.stdout
    assert "1000 of 1000 records read back" in result.stdout
    assert "✗" not in result.stdout
