"""Build Apache Kafka's class-data archive: ``python -m headrace.cluster.archive [PATH]``.

Every Kafka JVM started here (the reference broker of the tests and benchmarks, the
cluster's controller and brokers, Kafka's own tools) loads thousands of classes from the
same jars (``jvm/lib/kafka``). Java's application class-data sharing keeps them parsed and
verified in one file that each later JVM maps: on the 2-core development machine a broker
format, start and stop took 4.5 CPU seconds instead of 7.9. ``make setup`` runs this once
(the archive belongs to this Java and these jars; a JVM that finds it stale ignores it);
``headrace.testing.kafka_java_command`` uses it.

The archive is what a JVM loaded before it exited, so the warm-up runs one broker through
what the suite and the cluster ask of Kafka (topics, idempotent and transactional produce,
a consumer group, offsets, configs), then stops it; the broker's JVM writes the archive as
it exits. Written to a temporary name and renamed: a failed build leaves no archive, never
half of one. Needs no network.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from headrace import HeadraceError
from headrace.cluster.errors import ClusterError
from headrace.testing import ApacheKafka, kafka_class_archive, scaled


def _warm_up(bootstrap: str) -> None:
    quiet: dict[str, str | int | float | bool] = {"bootstrap.servers": bootstrap,
                                                  "log_level": 0}
    admin = AdminClient(quiet)
    admin.create_topics([NewTopic("warm-up", 2, 1)])["warm-up"].result(scaled(60))
    admin.describe_configs([ConfigResource("topic", "warm-up")])
    producer = Producer({**quiet, "transactional.id": "warm-up"})
    producer.init_transactions(scaled(60))
    producer.begin_transaction()
    for i in range(100):
        producer.produce("warm-up", str(i).encode(), key=str(i % 7).encode())
    producer.commit_transaction(scaled(60))
    consumer = Consumer({**quiet, "group.id": f"warm-up-{uuid.uuid4()}",
                         "group.protocol": "consumer", "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.subscribe(["warm-up"])
    seen = 0
    for _ in range(int(scaled(60))):
        seen += len([m for m in consumer.consume(100, 1.0) if m.error() is None])
        if seen >= 100:
            break
    consumer.commit(asynchronous=False)
    consumer.close()
    if seen < 100:
        raise ClusterError(f"the warm-up read {seen} of 100 records back")


def build(target: Path) -> None:
    """Write the archive to ``target`` (replacing it). Blocks for a minute or so; raises
    ``ClusterError`` if the warm-up fails or the JVM writes no archive."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        partial = Path(tmp) / "classes.jsa"
        with ApacheKafka(jvm_options=[f"-XX:ArchiveClassesAtExit={partial}"]) as kafka:
            _warm_up(kafka.bootstrap_servers)
        if not partial.is_file():
            raise ClusterError("Kafka's JVM exited without writing the class-data archive")
        partial.replace(target)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    target = Path(args[0]) if args else kafka_class_archive()
    try:
        print("building Apache Kafka's class-data archive (once, about a minute) ...")
        build(target)
    except (HeadraceError, KafkaException, subprocess.SubprocessError, OSError) as e:
        print(f"warning: Kafka's JVMs start without a class-data archive: {e}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
