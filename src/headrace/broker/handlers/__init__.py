"""One module per Kafka API key. Importing a module registers its handler."""

from __future__ import annotations

import importlib

MODULES = (
    "api_versions",
    "metadata",
    "produce",
    "fetch",
    "list_offsets",
    "offset_for_leader_epoch",
    "init_producer_id",
    "find_coordinator",
    "join_group",
    "sync_group",
    "heartbeat",
    "leave_group",
    "offset_commit",
    "offset_fetch",
    "list_groups",
    "describe_groups",
    "delete_groups",
    "offset_delete",
    "add_partitions_to_txn",
    "add_offsets_to_txn",
    "end_txn",
    "txn_offset_commit",
    "list_transactions",
    "describe_transactions",
    "describe_producers",
    "write_txn_markers",
    "create_topics",
    "delete_topics",
    "create_partitions",
    "describe_cluster",
    "describe_configs",
    "alter_configs",
    "delete_records",
    "describe_log_dirs",
    "consumer_group_heartbeat",
    "consumer_group_describe",
    "sasl_handshake",
    "sasl_authenticate",
    "describe_user_scram_credentials",
    "alter_user_scram_credentials",
    "describe_acls",
    "create_acls",
    "delete_acls",
)


def load_all() -> None:
    """Import every handler module (idempotent)."""
    for name in MODULES:
        importlib.import_module(f"{__name__}.{name}")
