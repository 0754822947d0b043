"""Which topics clients may read but never change, and which names no client may create:
one place, used by every handler that writes, truncates, deletes, repartitions or
creates a topic by name.

Broker-private state (SCRAM credentials, ACLs) is not in a topic at all: it lives in the
metadata log (``storage.metadata_log``), which no request can name.

- **Internal topics**, Kafka's ``Topic.isInternal``: ``__consumer_offsets`` and
  ``__transaction_state``, written by the broker's coordinators only. Clients may read and
  describe them with the ACLs Kafka asks for (Fetch, ListOffsets, OffsetForLeaderEpoch,
  Metadata, DescribeConfigs, DescribeLogDirs) and change their configs with ALTER_CONFIGS,
  as in Kafka. No client, super users included, may
  append to them (Produce: INVALID_TOPIC_EXCEPTION "Cannot append to internal topic", as
  Kafka; Kafka lets the client id ``__admin_client`` through, headrace lets nobody),
  truncate them (DeleteRecords: INVALID_TOPIC_EXCEPTION, as Kafka), add them to a
  transaction (AddPartitionsToTxn: TOPIC_AUTHORIZATION_FAILED, as Kafka), delete them
  (DeleteTopics) or add partitions (CreatePartitions). Kafka allows those last two to a
  principal with DELETE or ALTER; here they answer INVALID_TOPIC_EXCEPTION, because the
  coordinators hold the partitions open and place groups by partition count.
- **Reserved names**: the legacy topics that held credentials and ACLs before the
  metadata log (``security.legacy_topics``) and Kafka's own metadata log name
  ``__cluster_metadata``. CreateTopics answers INVALID_REQUEST ("Creation of internal
  topic ... is prohibited.", Kafka's answer for ``__cluster_metadata``); auto-creation
  never creates them (UNKNOWN_TOPIC_OR_PARTITION).
"""

from __future__ import annotations

from headrace.broker.groups.offsets import OFFSETS_TOPIC
from headrace.broker.security.legacy_topics import LEGACY_TOPICS
from headrace.broker.txn.log import TXN_TOPIC
from headrace.protocol.errors import ErrorCode, KafkaProtocolError

INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TXN_TOPIC})
RESERVED_TOPICS = frozenset({*LEGACY_TOPICS, "__cluster_metadata"})


def is_internal(name: str) -> bool:
    """Kafka's ``Topic.isInternal`` (what Metadata's ``is_internal`` says)."""
    return name in INTERNAL_TOPICS


def refuse_change(name: str, action: str) -> None:
    """Raise INVALID_TOPIC_EXCEPTION ("Cannot ``action`` internal topic ``name``", Kafka's
    wording) if ``name`` is an internal topic; ``action`` e.g. ``append to``. Call after
    the authorization check, as Kafka refuses an unauthorized client first."""
    if name in INTERNAL_TOPICS:
        raise KafkaProtocolError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                                 f"Cannot {action} internal topic {name}")


def refuse_creation(name: str) -> None:
    """Raise INVALID_REQUEST if ``name`` is reserved (CreateTopics)."""
    if name in RESERVED_TOPICS:
        raise KafkaProtocolError(ErrorCode.INVALID_REQUEST,
                                 f"Creation of internal topic {name} is prohibited.")


def may_auto_create(name: str) -> bool:
    """Whether auto-creation may create ``name`` (never a reserved name)."""
    return name not in RESERVED_TOPICS
