"""What a handler receives with each request."""

from __future__ import annotations

from dataclasses import dataclass

from headrace.broker.listeners import BoundListener
from headrace.broker.security.scram import ScramServer
from headrace.broker.state import BrokerState
from headrace.protocol.acl_operations import (
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    AclOperation,
    ResourceType,
)
from headrace.protocol.errors import ErrorCode, KafkaProtocolError

# What Kafka answers when the authorizer refuses an operation on a resource of the type.
DENIED_CODES = {ResourceType.TOPIC: ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                ResourceType.GROUP: ErrorCode.GROUP_AUTHORIZATION_FAILED,
                ResourceType.CLUSTER: ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                ResourceType.TRANSACTIONAL_ID: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}


@dataclass(frozen=True, slots=True)
class RequestContext:
    """``listener``: the one the request came in on (what Metadata advertises);
    ``session``: who the client is (its principal), shared by the connection's requests."""

    state: BrokerState
    api_version: int
    client_id: str | None
    peer: str
    listener: BoundListener
    session: Session

    @property
    def host(self) -> str:
        """The client's address, as ACL hosts name it."""
        return self.peer.rsplit(":", 1)[0].strip("[]")

    def allowed(self, operation: AclOperation, resource_type: ResourceType,
                name: str = CLUSTER_NAME) -> bool:
        """Whether the authorizer lets this client do ``operation`` on the resource."""
        authorizer = self.state.authorizer
        if not authorizer.enabled:  # the common case, on every produce and fetch
            return True
        return authorizer.authorize(self.session.principal, self.host, operation,
                                    resource_type, name)

    def require(self, operation: AclOperation, resource_type: ResourceType,
                name: str = CLUSTER_NAME) -> None:
        """Raise ``KafkaProtocolError`` with Kafka's code for the resource type
        (TOPIC_/GROUP_/CLUSTER_/TRANSACTIONAL_ID_AUTHORIZATION_FAILED) unless allowed."""
        if not self.allowed(operation, resource_type, name):
            code = DENIED_CODES[resource_type]
            raise KafkaProtocolError(code, f"{self.session.principal} may not "
                                           f"{operation.name} {resource_type.name} {name}")

    def may_read_topic(self, name: str) -> bool:
        return self.allowed(AclOperation.READ, ResourceType.TOPIC, name)

    def may_create_topic(self, name: str) -> bool:
        """CREATE on the cluster or on the topic (what auto-creation and CreateTopics
        need)."""
        return (self.allowed(AclOperation.CREATE, ResourceType.CLUSTER)
                or self.allowed(AclOperation.CREATE, ResourceType.TOPIC, name))

    def operations(self, requested: object, resource_type: ResourceType,
                   name: str = CLUSTER_NAME) -> set[int] | None:
        """The authorized-operations bits for a response: the supported operations of
        the type this client may perform (none without DESCRIBE, as Kafka), when the
        request asked (else None)."""
        if not requested:
            return None
        if not self.allowed(AclOperation.DESCRIBE, resource_type, name):
            return set()
        return {op for op in SUPPORTED_OPERATIONS[resource_type]
                if self.allowed(AclOperation(op), resource_type, name)}


@dataclass(slots=True)
class Session:
    """Who is on a connection. ``authenticated`` is True from the start on listeners
    without SASL; a SASL exchange in progress keeps its mechanism and SCRAM state."""

    principal: str = "User:ANONYMOUS"
    authenticated: bool = True
    mechanism: str | None = None
    scram: ScramServer | None = None
    close_after: bool = False  # a failed authentication: close after this response
    # KIP-368: when the authentication expires (time.monotonic()); past it only a
    # re-authentication (SaslHandshake, SaslAuthenticate, ApiVersions) is served
    expires_at: float | None = None
