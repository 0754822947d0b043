"""Authorized-operations bit fields, as a Kafka broker without an authorizer reports them.

Kafka answers ``include_*_authorized_operations`` with every operation the resource type
supports (``AclEntry.supportedOperations``) when no authorizer is configured; headrace has
no ACLs, so it does the same. The 32-bit field has bit ``AclOperation`` code set per
operation; kafka-python's codec takes the set of those bit numbers, and ``None`` for
"not requested" (bit 31 alone: Integer.MIN_VALUE on the wire).
"""

from __future__ import annotations

from enum import IntEnum


class AclOperation(IntEnum):
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12


def _bits(*ops: AclOperation) -> frozenset[int]:
    return frozenset(int(op) for op in ops)


_O = AclOperation
TOPIC_OPERATIONS = _bits(_O.READ, _O.WRITE, _O.CREATE, _O.DESCRIBE, _O.DELETE, _O.ALTER,
                         _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS)
GROUP_OPERATIONS = _bits(_O.READ, _O.DESCRIBE, _O.DELETE, _O.DESCRIBE_CONFIGS,
                         _O.ALTER_CONFIGS)
CLUSTER_OPERATIONS = _bits(_O.CREATE, _O.CLUSTER_ACTION, _O.DESCRIBE_CONFIGS,
                           _O.ALTER_CONFIGS, _O.IDEMPOTENT_WRITE, _O.ALTER, _O.DESCRIBE)


def authorized(requested: object, operations: frozenset[int]) -> set[int] | None:
    """``operations`` (bit numbers) when the client asked for them, else None."""
    return set(operations) if requested else None
