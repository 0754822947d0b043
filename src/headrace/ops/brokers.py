"""The brokers of a cluster and the health of its replicas, as the console's brokers page
shows them: who is live, who is the controller, how many partitions each broker leads and
hosts, and which partitions are under-replicated (ISR smaller than the replica set) or
offline (no leader).

One Metadata request (``AdminSession.metadata``); blocking and error contracts:
``headrace.ops.admin``. A broker that a partition names as a replica but Metadata does not
list is reported as not live (Kafka lists live brokers only).
"""

from __future__ import annotations

from dataclasses import dataclass

from headrace.ops.admin import AdminSession


@dataclass(frozen=True)
class BrokerLoad:
    """One broker: its address (empty when not live), and the partitions it leads and
    holds a replica of, internal topics included."""

    id: int
    host: str
    port: int
    live: bool
    leaders: int
    replicas: int


@dataclass(frozen=True)
class PartitionHealth:
    """A partition whose ISR is smaller than its replica set (``leader`` -1: offline)."""

    topic: str
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True)
class ClusterView:
    """The brokers by id, the controller's id (-1 if unknown), and the partitions not
    fully replicated, by topic and partition."""

    controller: int
    brokers: tuple[BrokerLoad, ...]
    under_replicated: tuple[PartitionHealth, ...]

    @property
    def offline(self) -> tuple[PartitionHealth, ...]:
        return tuple(p for p in self.under_replicated if p.leader < 0)


def cluster_view(admin: AdminSession) -> ClusterView:
    """The cluster as one Metadata response describes it (module docstring)."""
    metadata = admin.metadata()
    leaders: dict[int, int] = {}
    replicas: dict[int, int] = {}
    unhealthy = []
    for name, topic in metadata.topics.items():
        for p in topic.partitions.values():
            if p.leader >= 0:
                leaders[p.leader] = leaders.get(p.leader, 0) + 1
            for r in p.replicas:
                replicas[r] = replicas.get(r, 0) + 1
            if p.leader < 0 or len(p.isrs) < len(p.replicas):
                unhealthy.append(PartitionHealth(name, p.id, p.leader, tuple(p.replicas),
                                                 tuple(p.isrs)))
    ids = sorted(set(metadata.brokers) | set(replicas))
    live = metadata.brokers
    brokers = tuple(
        BrokerLoad(i, (live[i].host or "") if i in live else "",
                   int(live[i].port) if i in live else 0,
                   i in live, leaders.get(i, 0), replicas.get(i, 0))
        for i in ids)
    controller = metadata.controller_id if metadata.controller_id is not None else -1
    return ClusterView(controller, brokers,
                       tuple(sorted(unhealthy, key=lambda h: (h.topic, h.partition))))
