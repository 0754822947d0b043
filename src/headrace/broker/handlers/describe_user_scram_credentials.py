"""DescribeUserScramCredentials (key 50), version 0 (KIP-554).

The mechanisms and iteration counts of each user's SCRAM credentials (never the keys).
No user list (null or empty, as KIP-554 says) describes every user; an unknown user is RESOURCE_NOT_FOUND, a name
asked twice DUPLICATE_RESOURCE. With ACLs: DESCRIBE on the cluster (else
CLUSTER_AUTHORIZATION_FAILED for the request and each user named). librdkafka 2.16
crashes (heap corruption) on that answer to a describe-all, from Apache Kafka as well.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin.users import (
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
)

from headrace.broker.context import RequestContext
from headrace.broker.registry import handles
from headrace.broker.security.scram import MECHANISM_IDS
from headrace.protocol.acl_operations import AclOperation, ResourceType
from headrace.protocol.errors import ErrorCode

R = DescribeUserScramCredentialsResponse


@handles(DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse,
         max_version=0)
async def handle(ctx: RequestContext, request: Any) -> Any:
    store = ctx.state.credentials
    if not ctx.allowed(AclOperation.DESCRIBE, ResourceType.CLUSTER):
        # As Kafka 4.3 answers (no message), repeated for each user named.
        denied = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return R(throttle_time_ms=0, error_code=denied, error_message=None, results=[
            R.DescribeUserScramCredentialsResult(user=u.name, error_code=denied,
                                                 error_message=None, credential_infos=[])
            for u in request.users or ()])
    names = ([u.name for u in request.users] if request.users
             else sorted({user for user, _m in store.credentials}))
    results = []
    for name in names:
        if names.count(name) > 1:
            results.append(R.DescribeUserScramCredentialsResult(
                user=name, error_code=ErrorCode.DUPLICATE_RESOURCE,
                error_message=f"user {name} asked more than once", credential_infos=[]))
            continue
        creds = store.any_for(name)
        if not creds:
            results.append(R.DescribeUserScramCredentialsResult(
                user=name, error_code=ErrorCode.RESOURCE_NOT_FOUND,
                error_message=f"attempt to describe a user credential that does not exist: "
                              f"{name}", credential_infos=[]))
            continue
        results.append(R.DescribeUserScramCredentialsResult(
            user=name, error_code=0, error_message=None, credential_infos=[
                R.DescribeUserScramCredentialsResult.CredentialInfo(
                    mechanism=MECHANISM_IDS[c.mechanism], iterations=c.iterations)
                for c in creds]))
    return R(throttle_time_ms=0, error_code=0, error_message=None, results=results)
