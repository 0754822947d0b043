"""Which API versions each real client actually sends to the broker (for COMPATIBILITY.md).

Starts an ``EmbeddedBroker`` on 127.0.0.1 that advertises 127.0.0.2, and a recording TCP
proxy on 127.0.0.2 (same port) in front of it, so every client connection, bootstrap and
leader alike, passes through the proxy. The proxy reads each request's header
(``api_key``, ``api_version``) and forwards bytes untouched. Each client then runs a small
workload: admin create/describe topics and configs, produce (zstd), ListOffsets, consume
with assign, delete. The Java client (kafka-clients 4.4.0 and 3.9.2) runs the scenarios of
``tests/compat/test_java_client.py`` (needs ``make setup``'s ``jvm/lib``). Prints a markdown
table. Linux only (127.0.0.0/8 is all loopback).
Run: ``.venv/bin/python scripts/client_api_versions.py``.
"""

from __future__ import annotations

import asyncio
import struct
import subprocess
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable

import aiokafka
import confluent_kafka
import kafka
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin import NewPartitions as AioNewPartitions
from aiokafka.admin.config_resource import ConfigResource as AioConfigResource
from aiokafka.admin.config_resource import ConfigResourceType as AioConfigResourceType
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicCollection
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import (
    AdminClient,
    ConfigResource,
    NewPartitions,
    OffsetSpec,
    ResourceType,
)
from confluent_kafka.admin import NewTopic as CkNewTopic
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType as KpConfigResourceType
from kafka.protocol.api_key import ApiKey

from headrace import jvm
from headrace.testing import EmbeddedBroker

PROXY_HOST = "127.0.0.2"
TIMEOUT = 30.0

Seen = dict[str, dict[int, set[int]]]


class RecordingProxy:
    """Forward ``PROXY_HOST:port`` to ``127.0.0.1:port``, noting each request's API key and
    version under the current ``label``. Runs its own event loop in a daemon thread."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.label = "?"
        self.seen: Seen = defaultdict(lambda: defaultdict(set))
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()
        threading.Thread(target=self._run, args=(ready,), daemon=True).start()
        ready.wait(TIMEOUT)

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(asyncio.start_server(self._serve, PROXY_HOST, self.port))
        ready.set()
        self.loop.run_forever()

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        broker_r, broker_w = await asyncio.open_connection("127.0.0.1", self.port)
        back = asyncio.create_task(self._pipe(broker_r, client_w))
        try:
            while True:
                size_bytes = await client_r.readexactly(4)
                frame = await client_r.readexactly(struct.unpack(">i", size_bytes)[0])
                api_key, api_version = struct.unpack(">hh", frame[:4])
                self.seen[self.label][api_key].add(api_version)
                broker_w.write(size_bytes + frame)
                await broker_w.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            broker_w.close()
            back.cancel()

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while chunk := await reader.read(1 << 16):
                writer.write(chunk)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()


def _topic() -> str:
    return f"versions-{uuid.uuid4().hex[:8]}"


def confluent_workload(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = _topic()
    admin.create_topics([CkNewTopic(topic, 2, 1)])[topic].result(TIMEOUT)
    admin.describe_topics(TopicCollection([topic]))[topic].result(TIMEOUT)
    resource = ConfigResource(ResourceType.TOPIC, topic)
    admin.describe_configs([resource])[resource].result(TIMEOUT)
    admin.create_partitions([NewPartitions(topic, 3)])[topic].result(TIMEOUT)
    admin.describe_cluster().result(TIMEOUT)
    producer = Producer(
        {"bootstrap.servers": bootstrap, "compression.type": "zstd", "enable.idempotence": True}
    )
    for i in range(10):
        producer.produce(topic, key=b"k%d" % i, value=b"v%d" % i)
    assert producer.flush(TIMEOUT) == 0
    tp = CkTopicPartition(topic, 0)
    admin.list_offsets({tp: OffsetSpec.latest()})[tp].result(TIMEOUT)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([CkTopicPartition(topic, p, OFFSET_BEGINNING) for p in range(2)])
    consumer.offsets_for_times([CkTopicPartition(topic, 0, 0)], timeout=TIMEOUT)
    eofs, deadline = 0, time.monotonic() + TIMEOUT
    while eofs < 2 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is not None:
            eofs += 1
    consumer.close()
    admin.delete_topics([topic])[topic].result(TIMEOUT)


def kafka_python_workload(bootstrap: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    topic = _topic()
    admin.create_topics({topic: {"num_partitions": 2}})
    admin.describe_topics([topic])
    admin.describe_configs([KpConfigResource(KpConfigResourceType.TOPIC, topic)])
    admin.create_partitions({topic: 3})
    admin.describe_cluster()
    producer = KafkaProducer(bootstrap_servers=bootstrap, compression_type="zstd")
    for f in [producer.send(topic, key=b"k%d" % i, value=b"v%d" % i) for i in range(10)]:
        f.get(TIMEOUT)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    tps = [KpTopicPartition(topic, p) for p in range(2)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    end = consumer.end_offsets(tps)
    consumer.offsets_for_times({tps[0]: 0})
    deadline = time.monotonic() + TIMEOUT
    while any(consumer.position(tp) < end[tp] for tp in tps) and time.monotonic() < deadline:
        consumer.poll(timeout_ms=500)
    consumer.close()
    admin.delete_topics([topic])
    admin.close()


async def _aiokafka_workload(bootstrap: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    topic = _topic()
    await admin.create_topics([NewTopic(topic, 2, 1)])
    await admin.describe_topics([topic])
    await admin.describe_configs([AioConfigResource(AioConfigResourceType.TOPIC, topic)])
    await admin.create_partitions({topic: AioNewPartitions(3)})
    await admin.describe_cluster()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, compression_type="zstd")
    await producer.start()
    for i in range(10):
        await producer.send_and_wait(topic, key=b"k%d" % i, value=b"v%d" % i)
    await producer.stop()
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    await consumer.start()
    tps = [aiokafka.TopicPartition(topic, p) for p in range(2)]
    consumer.assign(tps)
    await consumer.seek_to_beginning(*tps)
    end = await consumer.end_offsets(tps)
    await consumer.offsets_for_times({tps[0]: 0})
    while any([await consumer.position(tp) < end[tp] for tp in tps]):
        await consumer.getmany(timeout_ms=500)
    await consumer.stop()
    await admin.delete_topics([topic])
    await admin.close()


def aiokafka_workload(bootstrap: str) -> None:
    asyncio.run(asyncio.wait_for(_aiokafka_workload(bootstrap), TIMEOUT))


def kcat_workload(bootstrap: str) -> None:
    topic = _topic()

    def run(*args: str, stdin: bytes | None = None) -> None:
        subprocess.run(
            ["kcat", "-q", "-b", bootstrap, *args],
            input=stdin,
            check=True,
            capture_output=True,
            timeout=TIMEOUT,
        )

    run("-P", "-t", topic, "-z", "zstd", "-K", ":", stdin=b"k1:v1\nk2:v2\n")
    run("-C", "-t", topic, "-o", "beginning", "-e")
    run("-L", "-t", topic)
    run("-Q", "-t", f"{topic}:0:0")


# The Java client runs the scenario driver of tests/compat/test_java_client.py (jvm/clients);
# group.protocol=consumer is left out (headrace serves the classic protocol only).
JAVA_SCENARIOS = (
    "produce",
    "transactions",
    "positions",
    "commits",
    "assignors",
    "static-membership",
    "admin",
)


def java_workload(kafka_clients_version: str | None) -> Callable[[str], None]:
    """Every scenario with kafka-clients 4.4.0 (``None``), all but Admin with another."""
    scenarios = JAVA_SCENARIOS if kafka_clients_version is None else JAVA_SCENARIOS[:-1]

    def run(bootstrap: str) -> None:
        cp = jvm.clients_classpath(kafka_clients_version)
        for scenario in scenarios:
            subprocess.run(
                [
                    jvm.java_executable(),
                    "-cp",
                    cp,
                    "io.headrace.clients.Main",
                    scenario,
                    "--bootstrap",
                    bootstrap,
                    "--topic",
                    _topic(),
                ],
                check=True,
                capture_output=True,
                timeout=120,
            )

    return run


def _kcat_version() -> str:
    out = subprocess.run(["kcat", "-V"], capture_output=True, text=True, check=True).stdout
    line = next(x for x in out.splitlines() if x.startswith("Version "))
    # "Version 1.7.1 (JSON, ..., librdkafka 2.0.2 builtin.features=...)"
    kcat_version = line.split()[1]
    librdkafka = line.split("librdkafka ", 1)[1].split()[0]
    return f"{kcat_version} (librdkafka {librdkafka})"


def _versions(found: set[int]) -> str:
    return ", ".join(str(v) for v in sorted(found))


def main() -> None:
    clients: dict[str, tuple[str, Callable[[str], None]]] = {
        "confluent-kafka": (
            f"{confluent_kafka.__version__} (librdkafka {confluent_kafka.libversion()[0]})",
            confluent_workload,
        ),
        "kafka-python": (kafka.__version__, kafka_python_workload),
        "aiokafka": (aiokafka.__version__, aiokafka_workload),
        "kcat": (_kcat_version(), kcat_workload),
        "Java 4.4.0": ("kafka-clients 4.4.0", java_workload(None)),
        "Java 3.9.2": ("kafka-clients 3.9.2 (no Admin scenario)", java_workload("3.9.2")),
    }
    with EmbeddedBroker(extra_args=["--advertised-host", PROXY_HOST]) as broker:
        proxy = RecordingProxy(broker.port)
        bootstrap = f"{PROXY_HOST}:{broker.port}"
        for label, (_, workload) in clients.items():
            proxy.label = label
            workload(bootstrap)
        proxy.loop.call_soon_threadsafe(proxy.loop.stop)
    keys = sorted({k for per in proxy.seen.values() for k in per})
    names = list(clients)
    print("| API key | Name | " + " | ".join(names) + " |")
    print("|---:|---|" + "---|" * len(names))
    for key in keys:
        cells = [_versions(proxy.seen[n].get(key, set())) or "-" for n in names]
        print(f"| {key} | {ApiKey(key).name} | " + " | ".join(cells) + " |")
    print()
    for name, (version, _) in clients.items():
        print(f"- {name} {version}")


if __name__ == "__main__":
    main()
