"""AlterUserScramCredentials (key 51), version 0 (KIP-554).

Upserts (a salted password as the client computed it, with its salt and iterations) and
deletions of SCRAM credentials, stored hashed in the broker's metadata log. Errors
per user as Kafka: UNSUPPORTED_SASL_MECHANISM, UNACCEPTABLE_CREDENTIAL (empty name,
iterations outside 4096-16384, empty salt or password, anything the metadata log's replay
would refuse, such as a salt over 1 KiB), RESOURCE_NOT_FOUND (deleting what
does not exist), DUPLICATE_RESOURCE (one user and mechanism twice). A user with any error
changes nothing. With ACLs: ALTER on the cluster (else every user answers
CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin.users import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
)

from headrace.broker.context import RequestContext
from headrace.broker.registry import handles
from headrace.broker.security.credentials import InvalidCredentialRecord, to_record
from headrace.broker.security.scram import (
    MAX_ITERATIONS,
    MECHANISM_IDS,
    MIN_ITERATIONS,
    ScramCredential,
    from_salted,
)
from headrace.protocol.acl_operations import AclOperation, ResourceType
from headrace.protocol.errors import ErrorCode

R = AlterUserScramCredentialsResponse
BY_ID = {v: k for k, v in MECHANISM_IDS.items()}


@handles(AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse, max_version=0)
async def handle(ctx: RequestContext, request: Any) -> Any:
    store = ctx.state.credentials
    errors: dict[str, tuple[int, str]] = {}
    changes: list[tuple[str, str, ScramCredential | None]] = []
    seen: set[tuple[str, int]] = set()
    order: list[str] = []

    def fail(user: str, code: int, message: str) -> None:
        errors.setdefault(user, (code, message))

    items = [(d.name, d.mechanism, None) for d in request.deletions] + \
        [(u.name, u.mechanism, u) for u in request.upsertions]
    denied = not ctx.allowed(AclOperation.ALTER, ResourceType.CLUSTER)
    for name, mech_id, upsert in items:
        if name not in order:
            order.append(name)
        if denied:
            fail(name, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "not authorized")
            continue
        if (name, mech_id) in seen:
            fail(name, ErrorCode.DUPLICATE_RESOURCE, "a user and mechanism appear twice")
            continue
        seen.add((name, mech_id))
        mechanism = BY_ID.get(mech_id)
        if mechanism is None:
            fail(name, ErrorCode.UNSUPPORTED_SASL_MECHANISM, f"unknown SCRAM mechanism {mech_id}")
        elif not name:
            fail(name, ErrorCode.UNACCEPTABLE_CREDENTIAL, "username must not be empty")
        elif upsert is None:
            if store.lookup(name, mechanism) is None:
                fail(name, ErrorCode.RESOURCE_NOT_FOUND,
                     f"attempt to delete a user credential that does not exist: {name}")
            else:
                changes.append((name, mechanism, None))
        elif not MIN_ITERATIONS <= upsert.iterations <= MAX_ITERATIONS:
            fail(name, ErrorCode.UNACCEPTABLE_CREDENTIAL,
                 f"iterations must be {MIN_ITERATIONS}-{MAX_ITERATIONS}, not {upsert.iterations}")
        elif not upsert.salt or not upsert.salted_password:
            fail(name, ErrorCode.UNACCEPTABLE_CREDENTIAL, "salt and password must not be empty")
        else:
            credential = from_salted(mechanism, bytes(upsert.salted_password),
                                     bytes(upsert.salt), upsert.iterations)
            try:
                to_record(name, mechanism, credential)  # what replay would accept
            except InvalidCredentialRecord as e:
                fail(name, ErrorCode.UNACCEPTABLE_CREDENTIAL, str(e))
                continue
            changes.append((name, mechanism, credential))
    good = [c for c in changes if c[0] not in errors]
    if good:
        store.write(good)
    return R(throttle_time_ms=0, results=[
        R.AlterUserScramCredentialsResult(user=name, error_code=errors.get(name, (0, ""))[0],
                                          error_message=errors[name][1] if name in errors
                                          else None)
        for name in order])
