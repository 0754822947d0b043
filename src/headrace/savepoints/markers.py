"""The exactly-once sink's markers of a query (``headrace.spark.sink``): the committed
offset of each of its transactional ids' groups on the marker topic, i.e. the next batch
each sink task (and dead-letter writer) of the query will write."""

from __future__ import annotations

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition

from headrace.savepoints.errors import SavepointError
from headrace.spark import metadata
from headrace.spark.sink import MARKER_TOPIC


def sink_markers(bootstrap_servers: str, query_id: str,
                 client_configs: dict[str, str] | None = None) -> dict[str, int]:
    """Transactional id -> next batch, for every sink and dead-letter writer of query
    ``query_id``. Blocks; raises ``SavepointError`` when the broker cannot be read."""
    admin = metadata.admin_client(bootstrap_servers, dict(client_configs or {}))
    prefix = f"headrace-sink-{query_id}-"
    try:
        listed = admin.list_consumer_groups(request_timeout=metadata.TIMEOUT) \
            .result(metadata.TIMEOUT)
        ids = sorted(g.group_id for g in listed.valid or [] if g.group_id.startswith(prefix))
        markers: dict[str, int] = {}
        for group in ids:
            request = ConsumerGroupTopicPartitions(group, [TopicPartition(MARKER_TOPIC, 0)])
            found = admin.list_consumer_group_offsets(
                [request], request_timeout=metadata.TIMEOUT)[group].result(metadata.TIMEOUT)
            for tp in found.topic_partitions or []:
                if tp.offset >= 0:
                    markers[group] = tp.offset
        return markers
    except KafkaException as e:
        raise SavepointError(f"cannot read the sink's markers at {bootstrap_servers}: "
                             f"{e.args[0].str()}") from e
