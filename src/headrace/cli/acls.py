"""``headrace acls add|list|delete``: ACLs through the Kafka Admin API (CreateAcls,
DescribeAcls, DeleteAcls), on headrace (``headrace broker --authorizer``) or any Kafka.

A binding names one resource (``--topic``, ``--group``, ``--transactional-id`` or
``--cluster``; ``--prefixed`` for every name starting with it, ``*`` for all), a principal
(``User:alice``, ``User:*``), a host (``*`` by default) and operations (READ, WRITE,
CREATE, DELETE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS,
IDEMPOTENT_WRITE, ALL), allowed unless ``--deny``. ``list`` and ``delete`` select with the
same options, each left out matching everything.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

from headrace.cli.terminal import BootstrapServers, ClientConfig, stdout
from headrace.cli.users import admin_client
from headrace.ops.clients import DEFAULT_BOOTSTRAP_SERVERS, REQUEST_TIMEOUT_S
from headrace.ops.errors import OpsError

app = typer.Typer(name="acls", no_args_is_help=True,
                  help="ACLs of the cluster (what each principal may do).")

Topic = Annotated[str | None, typer.Option(help="A topic name (or prefix with --prefixed).")]
Group = Annotated[str | None, typer.Option(help="A consumer group id (or prefix).")]
TxnId = Annotated[str | None, typer.Option("--transactional-id",
                                           help="A transactional id (or prefix).")]
Cluster = Annotated[bool, typer.Option("--cluster", help="The cluster resource.")]
Prefixed = Annotated[bool, typer.Option("--prefixed", help="The name is a prefix (PREFIXED).")]
Principal = Annotated[str | None, typer.Option(help="TYPE:NAME, e.g. User:alice or User:*.")]
Host = Annotated[str | None, typer.Option(help="The client address the ACL applies to.")]
Operation = Annotated[list[str] | None, typer.Option(
    "--operation", help="READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, "
    "ALTER_CONFIGS, CLUSTER_ACTION, IDEMPOTENT_WRITE or ALL (repeatable).")]


def _resource(topic: str | None, group: str | None, txn_id: str | None,
              cluster: bool, required: bool) -> tuple[ResourceType, str | None]:
    chosen = [(t, n) for t, n in ((ResourceType.TOPIC, topic), (ResourceType.GROUP, group),
                                  (ResourceType.TRANSACTIONAL_ID, txn_id)) if n is not None]
    if cluster:
        chosen.append((ResourceType.BROKER, "kafka-cluster"))
    if len(chosen) > 1:
        raise typer.BadParameter("name one resource: --topic, --group, --transactional-id "
                                 "or --cluster")
    if not chosen:
        if required:
            raise typer.BadParameter("name a resource: --topic, --group, --transactional-id "
                                     "or --cluster")
        return ResourceType.ANY, None
    return chosen[0]


def _operations(names: list[str] | None, required: bool) -> list[AclOperation]:
    if not names:
        if required:
            raise typer.BadParameter("give at least one --operation")
        return [AclOperation.ANY]
    out = []
    for name in names:
        try:
            out.append(AclOperation[name.upper().replace("-", "_")])
        except KeyError:
            raise typer.BadParameter(f"unknown operation {name!r}",
                                     param_hint="'--operation'") from None
    return out


def _describe(b: Any) -> str:
    restype = "CLUSTER" if b.restype == ResourceType.BROKER else b.restype.name
    return (f"{b.permission_type.name} {b.principal} from {b.host} {b.operation.name} "
            f"{restype}:{b.name} ({b.resource_pattern_type.name})")


def _filters(topic: str | None, group: str | None, txn_id: str | None, cluster: bool,
             prefixed: bool, principal: str | None, host: str | None,
             operation: list[str] | None, deny: bool | None) -> list[AclBindingFilter]:
    restype, name = _resource(topic, group, txn_id, cluster, required=False)
    pattern = (ResourcePatternType.PREFIXED if prefixed else
               ResourcePatternType.LITERAL if name is not None else ResourcePatternType.ANY)
    permission = (AclPermissionType.ANY if deny is None else
                  AclPermissionType.DENY if deny else AclPermissionType.ALLOW)
    make: Any = AclBindingFilter  # None fields match anything (the stubs say str)
    return [make(restype, name, pattern, principal, host, op, permission)
            for op in _operations(operation, required=False)]


@app.command("add")
def add(principal: Annotated[str, typer.Option(help="TYPE:NAME, e.g. User:alice.")],
        operation: Operation = None, topic: Topic = None, group: Group = None,
        transactional_id: TxnId = None, cluster: Cluster = False, prefixed: Prefixed = False,
        host: Annotated[str, typer.Option(help="Client address, or * for any.")] = "*",
        deny: Annotated[bool, typer.Option("--deny", help="A DENY binding.")] = False,
        bootstrap_servers: BootstrapServers = DEFAULT_BOOTSTRAP_SERVERS,
        client_config: ClientConfig = None) -> None:
    """Allow (or --deny) PRINCIPAL the operations on one resource."""
    restype, name = _resource(topic, group, transactional_id, cluster, required=True)
    assert name is not None
    pattern = ResourcePatternType.PREFIXED if prefixed else ResourcePatternType.LITERAL
    permission = AclPermissionType.DENY if deny else AclPermissionType.ALLOW
    bindings = [AclBinding(restype, name, pattern, principal, host, op, permission)
                for op in _operations(operation, required=True)]
    admin = admin_client(bootstrap_servers)
    futures: Any = admin.create_acls(bindings, request_timeout=REQUEST_TIMEOUT_S)
    for binding, future in futures.items():
        try:
            future.result(REQUEST_TIMEOUT_S)
        except KafkaException as e:
            raise OpsError(f"cannot add {_describe(binding)}: {e.args[0].str()}") from e
        stdout.print(f"added {_describe(binding)}")


@app.command("list")
def list_acls(topic: Topic = None, group: Group = None, transactional_id: TxnId = None,
              cluster: Cluster = False, prefixed: Prefixed = False, principal: Principal = None,
              host: Host = None, operation: Operation = None,
              bootstrap_servers: BootstrapServers = DEFAULT_BOOTSTRAP_SERVERS,
              client_config: ClientConfig = None) -> None:
    """The ACLs the options select (all without options)."""
    admin = admin_client(bootstrap_servers)
    found: list[Any] = []
    for flt in _filters(topic, group, transactional_id, cluster, prefixed, principal, host,
                        operation, None):
        try:
            found += admin.describe_acls(flt, request_timeout=REQUEST_TIMEOUT_S).result(
                REQUEST_TIMEOUT_S)
        except KafkaException as e:
            raise OpsError(f"cannot list ACLs: {e.args[0].str()}") from e
    for line in sorted({_describe(b) for b in found}):
        stdout.print(line)


@app.command("delete")
def delete(topic: Topic = None, group: Group = None, transactional_id: TxnId = None,
           cluster: Cluster = False, prefixed: Prefixed = False, principal: Principal = None,
           host: Host = None, operation: Operation = None,
           deny: Annotated[bool | None, typer.Option(
               "--deny/--allow", help="Only DENY (or only ALLOW) bindings.")] = None,
           bootstrap_servers: BootstrapServers = DEFAULT_BOOTSTRAP_SERVERS,
           client_config: ClientConfig = None) -> None:
    """Delete the ACLs the options select (at least one option is required)."""
    if not any((topic, group, transactional_id, cluster, principal, host, operation)):
        raise typer.BadParameter("select what to delete (e.g. --principal or --topic); "
                                 "delete everything with --principal 'User:*' per principal")
    admin = admin_client(bootstrap_servers)
    flts = _filters(topic, group, transactional_id, cluster, prefixed, principal, host,
                    operation, deny)
    futures: Any = admin.delete_acls(flts, request_timeout=REQUEST_TIMEOUT_S)
    deleted = 0
    for future in futures.values():
        try:
            for b in future.result(REQUEST_TIMEOUT_S):
                stdout.print(f"deleted {_describe(b)}")
                deleted += 1
        except KafkaException as e:
            raise OpsError(f"cannot delete ACLs: {e.args[0].str()}") from e
    if not deleted:
        stdout.print("no ACL matched")
