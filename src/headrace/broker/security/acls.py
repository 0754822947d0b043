"""ACLs and the authorizer, with Kafka's semantics (StandardAuthorizer).

A binding allows or denies one principal (``User:alice``, or ``User:*`` for everyone) from
one host (an IP, or ``*``) one operation on the resources of one type whose name equals
the pattern (LITERAL; the literal ``*`` is every resource of the type) or starts with it
(PREFIXED). A request is authorized when:

- the authorizer is off (no ``--authorizer``: every request is, as Kafka without
  ``authorizer.class.name``), or the principal is a super user; else
- no binding at all matches the resource: ``allow.everyone.if.no.acl.found`` decides
  (default: deny); else
- no matching DENY binding names the principal, host and the operation (or ALL), and
- a matching ALLOW binding does: for the operation itself or ALL, and for DESCRIBE also
  any of READ, WRITE, DELETE, ALTER, for DESCRIBE_CONFIGS also ALTER_CONFIGS (Kafka's
  implied operations).

Bindings live in the broker's metadata log (``storage.metadata_log``: no Kafka request
can read or write them), one ``acl`` record per binding (its key the binding as canonical
JSON, a null value deletes it), replayed at start. Replay checks each record as CreateAcls
checks a new binding (``validate_binding``: no ANY or MATCH pattern, no ANY or UNKNOWN
operation or resource type, a ``TYPE:NAME`` principal...) and refuses, logging it, any
record of the wrong shape. Event loop only.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields
from typing import Any

from headrace.errors import HeadraceError
from headrace.protocol.acl_operations import (
    CLUSTER_NAME,
    AclOperation,
    AclPermission,
    PatternType,
    ResourceType,
)
from headrace.protocol.errors import ErrorCode, KafkaProtocolError
from headrace.storage.metadata_log import MetadataLog, MetadataRecord

log = logging.getLogger(__name__)

KIND = "acl"
WILDCARD = "*"
_O = AclOperation
_IMPLIED = {_O.DESCRIBE: frozenset({_O.DESCRIBE, _O.READ, _O.WRITE, _O.DELETE, _O.ALTER}),
            _O.DESCRIBE_CONFIGS: frozenset({_O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS})}
_CONCRETE_RESOURCES = frozenset(ResourceType) - {ResourceType.UNKNOWN, ResourceType.ANY}


@dataclass(frozen=True, slots=True)
class AclBinding:
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission: int

    def matches_resource(self, name: str) -> bool:
        if self.pattern_type == PatternType.PREFIXED:
            return name.startswith(self.resource_name)
        return self.resource_name in (name, WILDCARD)

    def applies_to(self, principal: str, host: str) -> bool:
        return (self.principal in (principal, "User:*")
                and self.host in (host, WILDCARD))


@dataclass(frozen=True, slots=True)
class AclFilter:
    """What DescribeAcls and DeleteAcls select: None / ANY fields match everything;
    pattern type MATCH selects every binding that would apply to the named resource."""

    resource_type: int
    resource_name: str | None
    pattern_type: int
    principal: str | None
    host: str | None
    operation: int
    permission: int

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type not in (ResourceType.ANY, b.resource_type):
            return False
        if self.principal is not None and self.principal != b.principal:
            return False
        if self.host is not None and self.host != b.host:
            return False
        if self.operation not in (AclOperation.ANY, b.operation):
            return False
        if self.permission not in (AclPermission.ANY, b.permission):
            return False
        if self.pattern_type == PatternType.MATCH:
            return self.resource_name is None or b.matches_resource(self.resource_name)
        if self.pattern_type not in (PatternType.ANY, b.pattern_type):
            return False
        return self.resource_name is None or self.resource_name == b.resource_name


def validate_binding(b: AclBinding) -> None:
    """Kafka's checks of a new binding; raises INVALID_REQUEST saying what is wrong."""

    def bad(why: str) -> KafkaProtocolError:
        return KafkaProtocolError(ErrorCode.INVALID_REQUEST, why)

    if b.resource_type not in _CONCRETE_RESOURCES:
        raise bad(f"invalid resource type {b.resource_type}")
    if b.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise bad(f"invalid pattern type {b.pattern_type}: LITERAL or PREFIXED")
    if b.operation in (AclOperation.UNKNOWN, AclOperation.ANY) or b.operation not in set(
            AclOperation):
        raise bad(f"invalid operation {b.operation}")
    if b.permission not in (AclPermission.ALLOW, AclPermission.DENY):
        raise bad(f"invalid permission type {b.permission}: ALLOW or DENY")
    kind, sep, name = b.principal.partition(":")
    if not sep or not kind or not name:
        raise bad(f"could not parse principal from {b.principal!r} (expected TYPE:NAME)")
    if not b.resource_name:
        raise bad("the resource name must not be empty")
    if b.resource_type == ResourceType.CLUSTER and b.resource_name != CLUSTER_NAME:
        raise bad(f"the cluster resource is named {CLUSTER_NAME}")
    if not b.host:
        raise bad("the host must be an address or *")


class InvalidAclRecord(HeadraceError):
    """A stored ACL record has the wrong shape; the message says what is wrong."""


_FIELD_TYPES = {f.name: (int if f.type == "int" else str) for f in fields(AclBinding)}


def record_key(b: AclBinding) -> str:
    return json.dumps(asdict(b), sort_keys=True, separators=(",", ":"))


def decode(key: str, value: Any) -> tuple[AclBinding, bool]:
    """``(binding, present)`` of a record (``present`` False: a deletion); raises
    ``InvalidAclRecord`` for any record of the wrong shape."""
    try:
        doc = json.loads(key)
    except ValueError as e:
        raise InvalidAclRecord(f"undecodable key: {e}") from e
    if not isinstance(doc, dict) or set(doc) != set(_FIELD_TYPES):
        raise InvalidAclRecord(f"the key must hold exactly {sorted(_FIELD_TYPES)}")
    for name, kind in _FIELD_TYPES.items():
        if type(doc[name]) is not kind:
            raise InvalidAclRecord(f"{name} is not a{'n int' if kind is int else ' string'}")
    binding = AclBinding(**doc)
    try:
        validate_binding(binding)
    except KafkaProtocolError as e:
        raise InvalidAclRecord(str(e)) from e
    if value not in (True, None):
        raise InvalidAclRecord(f"value {value!r} is neither true nor null")
    return binding, value is True


@dataclass(frozen=True)
class AuthorizerConfig:
    """``enabled``: Kafka's ``authorizer.class.name`` set; ``super_users``: principals
    allowed everything (``super.users``); ``allow_everyone_if_no_acl_found``."""

    enabled: bool = False
    super_users: tuple[str, ...] = ()
    allow_everyone_if_no_acl_found: bool = False


def parse_super_users(text: str) -> tuple[str, ...]:
    """Kafka's ``super.users`` format: ``User:alice;User:bob``."""
    return tuple(p.strip() for p in text.split(";") if p.strip())


class Authorizer:
    """The ACLs of the cluster and the decision for one (principal, host, operation,
    resource). Decisions are cached until the ACLs change."""

    def __init__(self, metadata: MetadataLog, config: AuthorizerConfig) -> None:
        self.config = config
        self.enabled = config.enabled
        self._super = frozenset(config.super_users)
        self._log = metadata
        self._bindings: dict[int, set[AclBinding]] = {}
        self._cache: dict[tuple[str, str, int, int, str], bool] = {}

    def load(self) -> None:
        """Replay the ACL records; each record of the wrong shape is refused with an
        error naming it, never applied."""
        self._log.replay(KIND, self._replayed)

    def _replayed(self, record: MetadataRecord) -> bool:
        try:
            binding, present = decode(record.key, record.value)
        except InvalidAclRecord as e:
            log.error("metadata log: refused %s: %s", record.describe(), e)
            return False
        self._apply(binding, present)
        return True

    def _apply(self, binding: AclBinding, present: bool) -> None:
        group = self._bindings.setdefault(binding.resource_type, set())
        if present:
            group.add(binding)
        else:
            group.discard(binding)
        self._cache.clear()

    def bindings(self) -> list[AclBinding]:
        return sorted((b for group in self._bindings.values() for b in group),
                      key=lambda b: tuple(asdict(b).values()))

    def create(self, bindings: Iterable[AclBinding]) -> None:
        self._write([(b, True) for b in bindings])

    def delete(self, flt: AclFilter) -> list[AclBinding]:
        """Delete and return the bindings ``flt`` selects."""
        doomed = [b for b in self.bindings() if flt.matches(b)]
        self._write([(b, False) for b in doomed])
        return doomed

    def _write(self, changes: list[tuple[AclBinding, bool]]) -> None:
        """Durably in one write, then applied; each record checked as replay checks it."""
        records = [MetadataRecord(KIND, record_key(b), True if keep else None)
                   for b, keep in changes]
        for r in records:
            decode(r.key, r.value)
        self._log.append(records)
        for b, keep in changes:
            self._apply(b, keep)

    def authorize(self, principal: str, host: str, operation: int, resource_type: int,
                  name: str) -> bool:
        if not self.enabled or principal in self._super:
            return True
        key = (principal, host, operation, resource_type, name)
        found = self._cache.get(key)
        if found is None:
            found = self._cache[key] = self._decide(principal, host, operation,
                                                    resource_type, name)
        return found

    def _decide(self, principal: str, host: str, operation: int, resource_type: int,
                name: str) -> bool:
        on_resource = [b for b in self._bindings.get(resource_type, ())
                       if b.matches_resource(name)]
        if not on_resource:
            return self.config.allow_everyone_if_no_acl_found
        mine = [b for b in on_resource if b.applies_to(principal, host)]
        if any(b.permission == AclPermission.DENY and b.operation in (operation, _O.ALL)
               for b in mine):
            return False
        allowed_by = _IMPLIED.get(AclOperation(operation), frozenset({operation}))
        return any(b.permission == AclPermission.ALLOW
                   and (b.operation == _O.ALL or b.operation in allowed_by) for b in mine)

    def authorize_any(self, principal: str, host: str, operation: int,
                      resource_type: int) -> bool:
        """Whether the principal may perform ``operation`` on some resource of the type
        (Kafka's ``authorizeByResourceType``, which InitProducerId uses for idempotent
        producers without IDEMPOTENT_WRITE): an applicable ALLOW binding exists whose
        pattern no applicable DENY binding covers entirely."""
        if not self.enabled or principal in self._super:
            return True
        mine = [b for b in self._bindings.get(resource_type, ())
                if b.applies_to(principal, host) and b.operation in (operation, _O.ALL)]
        denied = [b for b in mine if b.permission == AclPermission.DENY]
        for b in mine:
            if b.permission != AclPermission.ALLOW:
                continue
            probe = b.resource_name
            if not any(d.matches_resource(probe) and (
                    d.pattern_type == PatternType.PREFIXED or d.resource_name == WILDCARD
                    or b.pattern_type == PatternType.LITERAL) for d in denied):
                return True
        return False
