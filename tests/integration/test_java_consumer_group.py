"""The Java Kafka 4.4 consumer with ``group.protocol=consumer`` (KIP-848) against the real
broker: it joins through ConsumerGroupHeartbeat, resolves its assignment's topic ids,
fetches by topic id (Fetch v13+), commits with its member epoch (OffsetCommit v9) and
leaves. The program (tests/integration/java/Kip848Consumer.java) is compiled with
``javac`` into a temporary directory against the client jars."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from headrace import jvm
from headrace.testing import EmbeddedBroker, scaled
from tests.integration.kip848_members import Member, produce
from tests.integration.test_groups import wait_until

SOURCE = Path(__file__).parent / "java" / "Kip848Consumer.java"


def _client_classpath() -> str:
    if shutil.which("javac") is None or not jvm.available("clients"):
        pytest.skip("javac or the Java Kafka client jars (jvm/lib/clients) are missing")
    return jvm.classpath("clients")


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> str:
    classpath = _client_classpath()
    out = tmp_path_factory.mktemp("java")
    subprocess.run(["javac", "-d", str(out), "-cp", classpath, str(SOURCE)], check=True,
                   capture_output=True, timeout=scaled(120))
    return f"{out}{os.pathsep}{classpath}"


def test_java_consumer_with_consumer_protocol(compiled: str, broker: EmbeddedBroker,
                                              topic_name: str) -> None:
    bs = broker.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic(topic_name, 3, 1)])[topic_name].result(timeout=scaled(10))
    producer = Producer({"bootstrap.servers": bs})
    for i in range(30):
        producer.produce(topic_name, value=f"v{i}".encode(), partition=i % 3)
    assert producer.flush(scaled(10)) == 0
    group = f"java-{uuid.uuid4().hex[:8]}"
    run = subprocess.run([jvm.java_executable(), *jvm.extra_options(), "-cp", compiled,
                          "Kip848Consumer", bs, group,
                          topic_name, "30", str(scaled(60))], capture_output=True, text=True,
                         timeout=scaled(120))
    assert run.returncode == 0, run.stderr[-3000:]
    lines = run.stdout.splitlines()
    assert "committed" in lines, run.stdout[-2000:] + run.stderr[-3000:]
    records = sorted((int(p), int(o), v) for _, p, o, v in
                     (line.split(" ") for line in lines if line.startswith("record ")))
    assert records == sorted((i % 3, i // 3, f"v{i}") for i in range(30))
    assert "assigned [0, 1, 2]" in lines
    check = Consumer({"bootstrap.servers": bs, "group.id": group})
    try:
        committed = check.committed([TopicPartition(topic_name, p) for p in range(3)],
                                    timeout=scaled(10))
        assert [tp.offset for tp in committed] == [10, 10, 10]
    finally:
        check.close()


def test_java_and_librdkafka_members_share_a_group(compiled: str, broker: EmbeddedBroker,
                                                   topic_name: str) -> None:
    """A librdkafka member owns all four partitions; the Java member joins and the
    coordinator moves two to it through the revocation handshake; every record is
    consumed exactly once across the two; when Java leaves, its partitions come back."""
    bs = broker.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic(topic_name, 4, 1)])[topic_name].result(timeout=scaled(10))
    group = f"mixed-{uuid.uuid4().hex[:8]}"
    journal: list[Any] = []
    a = Member(bs, group, [topic_name], journal, "a")
    java: subprocess.Popen[str] | None = None
    try:
        wait_until(lambda: len(a.owned) == 4, 30, "librdkafka owns all four partitions")
        java = subprocess.Popen([jvm.java_executable(), *jvm.extra_options(), "-cp", compiled,
                                 "Kip848Consumer", bs,
                                 group, topic_name, "20", str(scaled(60))], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True)
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(java.stdout or []), daemon=True)
        reader.start()
        wait_until(lambda: len(a.owned) == 2 and any(
            line.startswith("owned ") and line.count(",") == 1 for line in lines), 60,
            "two partitions each")
        produce(bs, topic_name, 4, 10)
        assert java.wait(scaled(90)) == 0
        reader.join(scaled(10))
        assert "committed" in [line.strip() for line in lines]
        java_records = [(topic_name, int(p), int(o)) for _, p, o, _ in
                        (line.split(" ") for line in lines if line.startswith("record "))]
        wait_until(lambda: len(a.owned) == 4, 30, "librdkafka owns all four again")
        wait_until(lambda: len(a.records) >= 20, 30, "librdkafka's twenty records")
        assert len(java_records) == 20
        assert sorted(a.records + java_records) == sorted(
            (topic_name, p, o) for p in range(4) for o in range(10))
    finally:
        if java is not None and java.poll() is None:
            java.kill()
        a.stop()
