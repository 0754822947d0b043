"""ACL codes as Kafka numbers them (resource types, pattern types, operations,
permissions), and the authorized-operations bit fields.

Kafka answers ``include_*_authorized_operations`` with the operations of the resource
type (``AclEntry.supportedOperations``) the principal may perform: all of them when no
authorizer is configured. The 32-bit field has bit ``AclOperation`` code set per
operation; kafka-python's codec takes the set of those bit numbers, and ``None`` for
"not requested" (bit 31 alone: Integer.MIN_VALUE on the wire).
"""

from __future__ import annotations

from enum import IntEnum


class AclOperation(IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only
    ALL = 2
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
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only
    MATCH = 2  # filters only: every pattern that matches the name
    LITERAL = 3
    PREFIXED = 4


class AclPermission(IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only
    DENY = 2
    ALLOW = 3


def _bits(*ops: AclOperation) -> frozenset[int]:
    return frozenset(int(op) for op in ops)


_O = AclOperation
TOPIC_OPERATIONS = _bits(_O.READ, _O.WRITE, _O.CREATE, _O.DESCRIBE, _O.DELETE, _O.ALTER,
                         _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS)
GROUP_OPERATIONS = _bits(_O.READ, _O.DESCRIBE, _O.DELETE, _O.DESCRIBE_CONFIGS,
                         _O.ALTER_CONFIGS)
CLUSTER_OPERATIONS = _bits(_O.CREATE, _O.CLUSTER_ACTION, _O.DESCRIBE_CONFIGS,
                           _O.ALTER_CONFIGS, _O.IDEMPOTENT_WRITE, _O.ALTER, _O.DESCRIBE)


TRANSACTIONAL_ID_OPERATIONS = _bits(_O.DESCRIBE, _O.WRITE)
SUPPORTED_OPERATIONS = {ResourceType.TOPIC: TOPIC_OPERATIONS,
                        ResourceType.GROUP: GROUP_OPERATIONS,
                        ResourceType.CLUSTER: CLUSTER_OPERATIONS,
                        ResourceType.TRANSACTIONAL_ID: TRANSACTIONAL_ID_OPERATIONS}
CLUSTER_NAME = "kafka-cluster"  # the one cluster resource's name
