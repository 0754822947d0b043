"""Tiered storage (KIP-405) through real clients, a real broker process and a real S3
object store (SeaweedFS): segments are copied to the store and deleted locally, and every
record is read back by offset and by time, with transactions (aborted batches in the
tiered part, read_committed and read_uncommitted), ListOffsets' earliest / earliest-local
/ latest-tiered specs, DeleteRecords into the tiered part; ``kill -9`` of the broker in
the middle of a copy and of a remote deletion loses, duplicates and orphans nothing; the
store unreachable for a while: copies wait and retry, hot reads go on, cold reads answer the
retriable KAFKA_STORAGE_ERROR and then succeed.
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest

from headrace.testing import ConsoleProcess, EmbeddedBroker, SeaweedS3, scaled
from tests.integration.kafka_tools import kafka_tool
from tests.integration.rawclient import RawClient
from tests.integration.tcp_gate import TcpGate
from tests.integration.test_cli import cli, ok
from tests.integration.txn_support import wait_for

SEGMENT = {"segment.bytes": "3000", "remote.storage.enable": "true",
           "local.retention.bytes": "1"}
VALUE = b"v" * 200
EARLIEST, EARLIEST_LOCAL, LATEST_TIERED, LATEST = -2, -4, -5, -1
EARLIEST_PENDING_UPLOAD = -6


@pytest.fixture(scope="module")
def s3() -> Iterator[SeaweedS3]:
    with SeaweedS3() as store:
        yield store


def tiered_broker(store: SeaweedS3, bucket: str, endpoint: str | None = None) -> EmbeddedBroker:
    endpoint = endpoint or store.endpoint
    return EmbeddedBroker(extra_args=[
        "--log-retention-check-interval-ms", "100",
        "--config", "remote.log.storage.system.enable=true",
        "--config", "headrace.remote.storage.kind=s3",
        "--config", f"headrace.remote.storage.s3.endpoint={endpoint}",
        "--config", f"headrace.remote.storage.s3.bucket={bucket}",
        "--config", "headrace.remote.storage.s3.access.key=any",
        "--config", "headrace.remote.storage.s3.secret.key=any",
        "--config", "headrace.remote.storage.s3.timeout.ms=2000",
        "--config", "remote.log.manager.task.interval.ms=100", "--metrics-port", "0"])


def metric(broker: EmbeddedBroker, name: str) -> float:
    """The value of an unlabelled (or the first labelled) sample of ``name``."""
    assert broker.metrics_url is not None
    with urllib.request.urlopen(broker.metrics_url, timeout=scaled(10)) as r:
        text = r.read().decode()
    found = re.search(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.MULTILINE)
    assert found is not None, name
    return float(found.group(1))


def objects(store: SeaweedS3, bucket: str) -> list[str]:
    client = boto3.session.Session().client(
        "s3", endpoint_url=store.endpoint, region_name="us-east-1",
        aws_access_key_id="any", aws_secret_access_key="any")
    try:
        keys: list[str] = []
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            keys += [o["Key"] for o in page.get("Contents", [])]
        return keys
    except client.exceptions.NoSuchBucket:
        return []
    finally:
        client.close()


def remote_segments(store: SeaweedS3, bucket: str,
                    complete: bool = False) -> dict[int, set[str]]:
    """Base offset -> the ids of the segments with objects under it (with ``complete``:
    each checked to have all its objects)."""
    found: dict[tuple[int, str], set[str]] = {}
    for key in objects(store, bucket):
        name = key.rsplit("/", 1)[1]
        stem, suffix = name.split(".", 1)
        base, seg_id = stem.split("-")
        found.setdefault((int(base), seg_id), set()).add(suffix)
    by_base: dict[int, set[str]] = {}
    for (base, seg_id), suffixes in found.items():
        assert not complete or suffixes == {"log", "index", "timeindex", "snapshot", "leader_epoch",
                            "txnindex"}, (base, suffixes)
        by_base.setdefault(base, set()).add(seg_id)
    return by_base


def list_offset(bootstrap: str, topic: str, spec: int, version: int = 9) -> int:
    client = RawClient(bootstrap)
    try:
        Topic = ListOffsetsRequest[version].ListOffsetsTopic
        req = ListOffsetsRequest[version](replica_id=-1, isolation_level=0, topics=[
            Topic(name=topic, partitions=[Topic.ListOffsetsPartition(
                partition_index=0, timestamp=spec, current_leader_epoch=-1)])],
            timeout_ms=5000)
        part = client.request(req, version).topics[0].partitions[0]
        assert part.error_code == 0, part
        return int(part.offset)
    finally:
        client.sock.close()


def create(bootstrap: str, topic: str, configs: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config=configs)])[topic].result(scaled(10))


def consume(bootstrap: str, topic: str, start: int, end: int,
            isolation: str = "read_uncommitted") -> list[tuple[int, bytes]]:
    """``(offset, value)`` of every data record from ``start`` until ``end`` is reached."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "tiered-reader",
                         "enable.auto.commit": False, "isolation.level": isolation,
                         "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, 0, start)])
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + scaled(30)
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF and msg.offset() >= end:
                    return got
                if msg.error().code() != KafkaError._PARTITION_EOF:
                    raise AssertionError(msg.error())
                continue
            got.append((msg.offset(), msg.value()))
        raise AssertionError(f"read {len(got)} records, not to offset {end}")
    finally:
        consumer.close()


def produce_plain(bootstrap: str, topic: str, count: int, first: int = 0) -> list[int]:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "linger.ms": 0})
    offsets: list[int] = []
    for i in range(first, first + count):
        producer.produce(topic, VALUE + str(i).encode(),
                         on_delivery=lambda err, msg: offsets.append(msg.offset()))
        producer.poll(0)
        if i % 4 == 3:
            producer.flush(scaled(10))
    assert producer.flush(scaled(10)) == 0
    return offsets


def wait_tiered(bootstrap: str, topic: str, at_least: int) -> None:
    """Until offsets below ``at_least`` are in the store and deleted locally."""
    wait_for(f"{topic} tiered up to {at_least}",
             lambda: list_offset(bootstrap, topic, EARLIEST_LOCAL) >= at_least
             and list_offset(bootstrap, topic, LATEST_TIERED) >= at_least - 1)


def wait_settled(broker: EmbeddedBroker, topic: str) -> None:
    """Until every closed segment is in the store (no copy half done) and gone locally."""
    bootstrap = broker.bootstrap_servers
    wait_for("every closed segment tiered", lambda: metric(
        broker, "headrace_remote_copy_lag_segments") == 0 and list_offset(
        bootstrap, topic, EARLIEST_LOCAL) == list_offset(bootstrap, topic, LATEST_TIERED) + 1)


def test_tiered_reads_by_offset_time_and_transaction(s3: SeaweedS3) -> None:
    with tiered_broker(s3, "reads") as broker:
        bootstrap = broker.bootstrap_servers
        create(bootstrap, "cold", SEGMENT)
        producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "tiered-tx",
                             "linger.ms": 0})
        producer.init_transactions(scaled(10))
        # Ahead of the broker's clock, so no transaction marker (stamped by the broker)
        # is as late as the record after it: by-time lookups land on records.
        base_ts = int(time.time() * 1000) + 20 * 60_000
        sent: list[tuple[int, int, bytes, bool]] = []  # offset, timestamp, value, committed
        delivered: list[int] = []
        for txn in range(16):
            producer.begin_transaction()
            batch: list[tuple[int, int, bytes]] = []
            for i in range(5):
                n = txn * 5 + i
                value = VALUE + f"{txn}-{i}".encode()
                producer.produce("cold", value, timestamp=base_ts + n * 10,
                                 on_delivery=lambda err, msg: delivered.append(msg.offset()))
                producer.flush(scaled(10))
                batch.append((delivered[-1], base_ts + n * 10, value))
            committed = txn % 3 != 1
            (producer.commit_transaction if committed else producer.abort_transaction)(
                scaled(10))
            sent += [(offset, ts, value, committed) for offset, ts, value in batch]
        end = list_offset(bootstrap, "cold", LATEST)
        # Most of the log, aborted transactions included, is tiered and gone locally.
        wait_tiered(bootstrap, "cold", sent[60][0])
        wait_settled(broker, "cold")
        assert list_offset(bootstrap, "cold", EARLIEST) == 0
        local_start = list_offset(bootstrap, "cold", EARLIEST_LOCAL)
        assert 0 < local_start < end
        assert sum(1 for o, *_ in sent if o < local_start and not _[2]) >= 10

        # KIP-1023: the first offset not yet in the store, through Kafka's own tool (the
        # Java admin client, ListOffsets v11): the log start while nothing is copied, -1
        # without remote storage (which the tool leaves out, as against Kafka).
        tiered_to = list_offset(bootstrap, "cold", LATEST_TIERED) + 1
        create(bootstrap, "warm", {"remote.storage.enable": "true"})
        create(bootstrap, "local", {})
        tool = kafka_tool("kafka-get-offsets", "--bootstrap-server", bootstrap,
                          "--topic-partitions", "cold:0,warm:0,local:0",
                          "--time", "earliest-pending-upload")
        assert tool.returncode == 0, tool.stderr
        assert sorted(tool.stdout.split()) == [f"cold:0:{tiered_to}", "warm:0:0"], tool.stdout
        assert list_offset(bootstrap, "local", EARLIEST_PENDING_UPLOAD, 11) == -1

        everything = consume(bootstrap, "cold", 0, end)
        assert everything == [(o, v) for o, _, v, _c in sent]
        committed = consume(bootstrap, "cold", 0, end, "read_committed")
        assert committed == [(o, v) for o, _, v, c in sent if c]

        # The operator's view: both tiers' offsets and sizes.
        out = ok(cli("topics", "describe", "cold", servers=bootstrap)).stdout
        assert "Tiered storage" in out
        lines = out.splitlines()
        header = next(i for i, line in enumerate(lines) if "Log start" in line)
        cells = [c.strip() for c in lines[header + 2].split("│") if c.strip()]
        assert cells[:4] == ["0", "0", str(local_start), str(end)], out
        assert cells[5] == str(tiered_to) and int(cells[6]) > 0, out
        assert metric(broker, "headrace_remote_copy_bytes_total") >= int(cells[6])
        # The two reads above fetched the whole tiered part from the store: counted, timed.
        assert metric(broker, "headrace_remote_fetch_bytes_total") >= 2 * int(cells[6])
        assert metric(broker, "headrace_remote_fetch_seconds_total") > 0
        # The same two tiers in the console's topic view and in the capacity planner.
        with ConsoleProcess(bootstrap) as console, urllib.request.urlopen(
                f"{console.url}/topics/cold", timeout=scaled(30)) as page:
            html = page.read().decode()
        tiers = html[html.index('<table id="tiers">'):]
        row = re.findall(r"<td>([^<]*)</td>", tiers[:tiers.index("</table>")])
        assert row[:5] == ["0", "0", str(local_start), str(tiered_to), str(end)], row
        assert row[6] == cells[6], (row, cells)
        live = json.loads(ok(cli("capacity", "--live", "--sample", "0.2s", "--topic", "cold",
                                 "--json", servers=bootstrap)).stdout)
        assert live["topics"][0]["remote_bytes"] == int(cells[6])

        # By time: exact to the record, in the tiered part and in the local one.
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "by-time"})
        try:
            for offset, ts, _, _c in sent[::7]:
                found = consumer.offsets_for_times([TopicPartition("cold", 0, ts)],
                                                   scaled(10))
                assert found[0].offset == offset, (offset, ts)
            late = consumer.offsets_for_times(
                [TopicPartition("cold", 0, base_ts + 10_000)], scaled(10))
            assert late[0].offset == -1
        finally:
            consumer.close()

        # DeleteRecords into the tiered part: the start moves, the store lets go of the
        # segments wholly below it, a read from the new start is exact.
        cut = sent[25][0]
        admin = AdminClient({"bootstrap.servers": bootstrap})
        low = admin.delete_records([TopicPartition("cold", 0, cut)])
        assert next(iter(low.values())).result(scaled(10)).low_watermark == cut
        assert list_offset(bootstrap, "cold", EARLIEST) == cut
        wait_for("remote segments below the cut deleted", lambda: sorted(
            remote_segments(s3, "reads"))[1] > cut)
        assert sorted(remote_segments(s3, "reads"))[0] <= cut
        assert consume(bootstrap, "cold", cut, end) == [(o, v) for o, _, v, _c in sent
                                                        if o >= cut]

        # As Kafka: no remote storage for compacted topics.
        futures = admin.create_topics([NewTopic("compacted", 1, 1, config={
            "remote.storage.enable": "true", "cleanup.policy": "compact"})])
        with pytest.raises(Exception) as info:
            futures["compacted"].result(scaled(10))
        assert "Remote log storage only supports topics with cleanup.policy=delete" in str(
            info.value)

        # A deleted tiered topic's objects go too.
        admin.delete_topics(["cold"])["cold"].result(scaled(10))
        wait_for("the deleted topic's objects removed", lambda: not objects(s3, "reads"))


def wait_dead(broker: EmbeddedBroker) -> None:
    assert broker.process is not None
    try:
        broker.process.wait(scaled(30))
    except subprocess.TimeoutExpired:
        raise AssertionError("the fault-injected broker did not die") from None
    assert broker.process.returncode == -9


def test_kill_9_during_copy_and_during_remote_delete(s3: SeaweedS3) -> None:
    broker = tiered_broker(s3, "crash")
    try:
        broker.env = {"HEADRACE_TIERING_CRASH_AT": "copy:log"}
        broker.start()
        bootstrap = broker.bootstrap_servers
        create(bootstrap, "crashy", SEGMENT)
        offsets = produce_plain(bootstrap, "crashy", 60)
        wait_dead(broker)  # killed with the first segment's objects written, not recorded
        broker.env = {}
        broker.start()
        end = offsets[-1] + 1
        wait_tiered(bootstrap, "crashy", 40)
        wait_settled(broker, "crashy")
        # Every segment stored once, none orphaned, contiguous from 0; every record once.
        stored = remote_segments(s3, "crash", complete=True)
        assert all(len(ids) == 1 for ids in stored.values()), stored
        assert min(stored) == 0
        records = consume(bootstrap, "crashy", 0, end)
        assert [o for o, _ in records] == list(range(end))
        assert [v for _, v in records] == [VALUE + str(i).encode() for i in range(60)]

        broker.stop()
        broker.env = {"HEADRACE_TIERING_CRASH_AT": "delete:objects"}
        broker.start()
        cut = 30
        admin = AdminClient({"bootstrap.servers": bootstrap})
        next(iter(admin.delete_records([TopicPartition("crashy", 0, cut)]).values())).result(
            scaled(10))
        wait_dead(broker)  # killed with one segment's objects deleted, its entry not dropped
        broker.env = {}
        broker.start()
        assert list_offset(bootstrap, "crashy", EARLIEST) == cut
        wait_for("remote segments below the cut deleted",
                 lambda: sorted(remote_segments(s3, "crash"))[1] > cut)
        assert [o for o, _ in consume(bootstrap, "crashy", cut, end)] == list(range(cut, end))
    finally:
        broker.env = {}
        broker.stop()
        broker.__exit__(None, None, None)


def fetch_error(bootstrap: str, topic: str, offset: int) -> tuple[int, int]:
    """``(error code, record bytes)`` of a Fetch v12 of one partition at ``offset``."""
    client = RawClient(bootstrap, timeout=20)  # a hanging store: two 2 s S3 timeouts
    try:
        T = FetchRequest[12].FetchTopic
        req = FetchRequest[12](
            replica_id=-1, max_wait_ms=100, min_bytes=1, max_bytes=100_000,
            isolation_level=0, session_id=0, session_epoch=-1, topics=[T(
                topic=topic, partitions=[T.FetchPartition(
                    partition=0, current_leader_epoch=-1, fetch_offset=offset,
                    last_fetched_epoch=-1, log_start_offset=-1,
                    partition_max_bytes=100_000)])],
            forgotten_topics_data=[], rack_id="")
        part: Any = client.request(req, 12).responses[0].partitions[0]
        return int(part.error_code), len(part.records or b"")
    finally:
        client.sock.close()


def test_object_store_outage(s3: SeaweedS3) -> None:
    """The store unreachable from the broker for a while (a gate between them shut)."""
    gate = TcpGate(("127.0.0.1", int(s3.endpoint.rsplit(":", 1)[1]))).open()
    with tiered_broker(s3, "outage", f"http://127.0.0.1:{gate.port}") as broker:
        bootstrap = broker.bootstrap_servers
        create(bootstrap, "flaky", SEGMENT)
        produce_plain(bootstrap, "flaky", 40)
        wait_tiered(bootstrap, "flaky", 20)
        # No copy half done when the gate shuts: one finishing just after the read below
        # would move the latest tiered offset the outage must hold still.
        wait_settled(broker, "flaky")
        tiered_before = list_offset(bootstrap, "flaky", LATEST_TIERED)
        gate.close()
        try:
            # Appends and hot reads carry on; cold reads fail retriably; copies wait.
            produce_plain(bootstrap, "flaky", 40, first=40)
            hot = list_offset(bootstrap, "flaky", EARLIEST_LOCAL)
            assert [o for o, _ in consume(bootstrap, "flaky", hot, 80)] == list(range(hot, 80))
            assert fetch_error(bootstrap, "flaky", 0) == (56, 0)  # KAFKA_STORAGE_ERROR
            assert list_offset(bootstrap, "flaky", LATEST_TIERED) == tiered_before
            wait_for("a failed copy", lambda: metric(broker, "headrace_remote_copy_errors_total"))
            assert metric(broker, "headrace_remote_copy_lag_segments") > 0
            assert metric(broker, "headrace_remote_fetch_errors_total") >= 1
        finally:
            gate.open()
        # A store that hangs: a cold fetch waits on a reader thread, hot fetches go on.
        gate.hold()
        try:
            cold: list[tuple[int, int]] = []
            waiting = threading.Thread(target=lambda: cold.append(fetch_error(
                bootstrap, "flaky", 0)))
            waiting.start()
            hot = list_offset(bootstrap, "flaky", EARLIEST_LOCAL)
            assert [o for o, _ in consume(bootstrap, "flaky", hot, 80)] == list(range(hot, 80))
            assert not cold, "the cold fetch should still wait on the hanging store"
            waiting.join(scaled(40))
            assert cold == [(56, 0)]
        finally:
            gate.close()
            gate.open()
        wait_tiered(bootstrap, "flaky", 60)
        _code, size = wait_for("a cold read after the outage",
                              lambda: (r := fetch_error(bootstrap, "flaky", 0))[0] == 0 and r)
        assert size > 0
        wait_for("the copies caught up",
                 lambda: metric(broker, "headrace_remote_copy_lag_segments") == 0)
        records = consume(bootstrap, "flaky", 0, 80)
        assert [v for _, v in records] == [VALUE + str(i).encode() for i in range(80)]
