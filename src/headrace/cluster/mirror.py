"""Apache Kafka's MirrorMaker 2 between two clusters, e.g. from an embedded headrace
broker onto a replicated Kafka cluster: the path a team takes when it outgrows one
machine. ``MirrorMaker(source, target, topics="orders|payments").start()``, or
``headrace cluster mirror --from B1 --to B2``.

MirrorMaker 2 (``org.apache.kafka.connect.mirror.MirrorMaker``, dedicated mode, from the
same jars as the reference broker) copies the matching topics (records, partitions and
topic configs) and translates the committed offsets of the matching consumer groups
onto the target, where a group with no live members there gets them committed. Topic
names are kept (``IdentityReplicationPolicy``): this is a migration path, one way, not
an active-active pair. Offsets on the target need not equal the source's; MirrorMaker
translates a group's offset from the offset syncs it records, so a group that had read
everything replicated resumes exactly at its next record, and a group further behind
resumes at or before where it was (records again, never a record skipped).

Every replication factor is -1, the cluster's own default (``default.replication.factor``):
an embedded broker keeps one copy, a replicated cluster its three. Only herders that
target ``target`` run (``--clusters target``). ``start()`` returns once MirrorMaker has
started its herders; the copying runs in the background until ``stop()``.
"""

from __future__ import annotations

from pathlib import Path
from types import TracebackType

from headrace.cluster.process import NodeProcess
from headrace.testing import kafka_java_command

MAIN = "org.apache.kafka.connect.mirror.MirrorMaker"
READY_MARKER = "Kafka MirrorMaker started"
SOURCE, TARGET = "source", "target"


def mirror_properties(source: str, target: str, topics: str, groups: str,
                      interval_s: int) -> dict[str, str]:
    """MirrorMaker 2's configuration for a one-way copy from the cluster at ``source`` to
    the one at ``target`` (bootstrap servers) of the topics and groups matching the
    regular expressions ``topics`` and ``groups``, syncing every ``interval_s`` seconds."""
    every = str(interval_s)
    props = {
        "clusters": f"{SOURCE}, {TARGET}",
        f"{SOURCE}.bootstrap.servers": source,
        f"{TARGET}.bootstrap.servers": target,
        f"{SOURCE}->{TARGET}.enabled": "true",
        f"{SOURCE}->{TARGET}.topics": topics,
        f"{SOURCE}->{TARGET}.groups": groups,
        f"{TARGET}->{SOURCE}.enabled": "false",
        "replication.policy.class":
            "org.apache.kafka.connect.mirror.IdentityReplicationPolicy",
        "sync.group.offsets.enabled": "true",
        "sync.group.offsets.interval.seconds": every,
        "emit.checkpoints.interval.seconds": every,
        "emit.heartbeats.interval.seconds": every,
        "refresh.topics.interval.seconds": every,
        "refresh.groups.interval.seconds": every,
        "sync.topic.configs.interval.seconds": every,
        # An offset sync for every record copied: a group's offset translates to the
        # record it stopped at, not to the last of a sparse set of syncs before it. The
        # last sync of a batch is written when the task commits, every flush interval
        # (Kafka's default, 60 s, would hold a group's exact offset back that long). A
        # worker setting: MirrorMaker ignores it at the top level and gives its herders'
        # workers only the target cluster's settings ("target.").
        "offset.lag.max": "0",
        f"{TARGET}.offset.flush.interval.ms": str(interval_s * 1000),
        # ACLs are not copied: the embedded broker runs without an authorizer by default.
        "sync.topic.acls.enabled": "false",
    }
    for setting in ("replication.factor", "offset-syncs.topic.replication.factor",
                    "checkpoints.topic.replication.factor",
                    "heartbeats.topic.replication.factor",
                    "offset.storage.replication.factor", "status.storage.replication.factor",
                    "config.storage.replication.factor"):
        props[setting] = "-1"
    return props


class MirrorMaker:
    """MirrorMaker 2 copying ``topics`` and ``groups`` (regular expressions) from
    ``source`` to ``target`` (module docstring). Its configuration and log are in
    ``work_dir``. Not thread-safe; ``ClusterError`` on a failed start."""

    def __init__(self, source: str, target: str, work_dir: str | Path, topics: str = ".*",
                 groups: str = ".*", interval_s: int = 1, heap: str = "384m",
                 start_timeout: float = 120.0) -> None:
        self.work_dir = Path(work_dir)
        self.properties = mirror_properties(source, target, topics, groups, interval_s)
        self.start_timeout = start_timeout
        config = self.work_dir / "mm2.properties"
        cmd = kafka_java_command(MAIN, str(config), "--clusters", TARGET,
                                 jvm_options=[f"-Xmx{heap}", "-XX:+UseSerialGC"])
        self._process = NodeProcess("MirrorMaker", cmd, self.work_dir / "mm2.log", str(config))

    def start(self, detach: bool = False) -> MirrorMaker:
        """Write the configuration, start the JVM, block until its herders run."""
        self.work_dir.mkdir(parents=True, exist_ok=True)
        (self.work_dir / "mm2.properties").write_text(
            "".join(f"{k} = {v}\n" for k, v in self.properties.items()))
        self._process.start(detach)
        self._process.wait_ready(READY_MARKER, self.start_timeout)
        return self

    def alive(self) -> bool:
        return self._process.alive()

    def output(self) -> str:
        """What MirrorMaker logged (warnings and errors) since it started."""
        return self._process.output()

    def stop(self) -> None:
        """A clean shutdown (SIGTERM; SIGKILL if it hangs). Idempotent."""
        self._process.stop()

    def __enter__(self) -> MirrorMaker:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
