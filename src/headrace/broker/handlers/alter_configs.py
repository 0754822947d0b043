"""AlterConfigs (key 33, versions 0-2) and IncrementalAlterConfigs (key 44, versions 0-1).

Topic configs only: AlterConfigs replaces the topic's overrides; IncrementalAlterConfigs
applies SET (0), DELETE (1) and, for list configs (cleanup.policy), APPEND (2) and
SUBTRACT (3) to the effective value. Names and values are validated
(``storage.config``) before anything changes: an unknown name, a value of the wrong
type, out of range or not among the allowed ones gets INVALID_CONFIG with Kafka's wording
in ``error_message``. Overrides are stored canonically (``compact,delete``).

Broker configs (type 4): the broker-wide topic defaults under Kafka's broker names
(``log.retention.ms``, ``log.cleaner.delete.retention.ms`` ...), on this broker (resource
``"<node id>"``) or as the cluster-wide default (``""``), persisted in the data directory
(``storage.dynamic_config``). As in Kafka, an invalid value or a read-only setting
(``log.dirs``, ``num.partitions``: "Cannot update these configs dynamically: [...]") gets
INVALID_REQUEST, and names Kafka does not know are accepted and ignored. Not implemented:
the cleaner's thread/buffer/backoff and listener settings (read-only here).
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)

from headrace.broker.context import RequestContext
from headrace.broker.errors import error_code_for
from headrace.broker.registry import handles
from headrace.errors import HeadraceError
from headrace.protocol.acl_operations import CLUSTER_NAME, AclOperation, ResourceType
from headrace.protocol.errors import ErrorCode, KafkaProtocolError
from headrace.storage.config import CONFIG_DEFS, ConfigType, canonical_overrides
from headrace.storage.dynamic_config import BROKER as BROKER_SCOPE
from headrace.storage.dynamic_config import CLUSTER
from headrace.storage.errors import InvalidConfigError

TOPIC, BROKER = 2, 4
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def _list_op(ctx: RequestContext, overrides: dict[str, str], name: str, op: int,
             value: str | None) -> None:
    defn = CONFIG_DEFS.get(name)
    if defn is None:
        raise InvalidConfigError(f"Unknown topic config name: {name}")
    if defn.type != ConfigType.LIST:
        raise InvalidConfigError(
            f"{'APPEND' if op == APPEND else 'SUBTRACT'} is only valid for list configs; "
            f"{name} is of type {defn.type.name}")
    current = overrides.get(name, defn.value_of(ctx.state.logs.default_config))
    items = [i for i in current.split(",") if i]
    changes = [i.strip() for i in (value or "").split(",") if i.strip()]
    if op == APPEND:
        items += [c for c in changes if c not in items]
    else:
        items = [i for i in items if i not in changes]
    overrides[name] = ",".join(items)


def _apply_broker(ctx: RequestContext, resource: Any, incremental: bool,
                  validate_only: bool) -> None:
    name = resource.resource_name
    if name not in ("", str(ctx.state.config.node_id)):
        raise KafkaProtocolError(ErrorCode.INVALID_REQUEST, f"unknown broker {name!r}")
    logs = ctx.state.logs
    scope = CLUSTER if name == "" else BROKER_SCOPE
    layer = dict(logs.dynamic.layers[scope]) if incremental else {}
    for c in resource.configs:
        op = c.config_operation if incremental else (SET if c.value is not None else DELETE)
        if op == SET and c.value is not None:
            layer[c.name] = c.value
        elif op in (SET, DELETE):
            layer.pop(c.name, None)
        elif op in (APPEND, SUBTRACT) and c.name == "log.cleanup.policy":
            current = layer.get(c.name, logs.default_config.cleanup_policy)
            items = [i for i in current.split(",") if i]
            changes = [i.strip() for i in (c.value or "").split(",") if i.strip()]
            items = (items + [i for i in changes if i not in items] if op == APPEND
                     else [i for i in items if i not in changes])
            layer[c.name] = ",".join(items)
        else:
            raise KafkaProtocolError(ErrorCode.INVALID_REQUEST,
                                     f"config operation {op} not valid for {c.name}")
    try:
        logs.dynamic.validated(layer)
        if not validate_only:
            logs.alter_broker_configs(scope, layer)
    except InvalidConfigError as e:  # Kafka answers INVALID_REQUEST for broker resources
        raise KafkaProtocolError(ErrorCode.INVALID_REQUEST, str(e)) from e


def _apply(ctx: RequestContext, resource: Any, incremental: bool, validate_only: bool) -> None:
    if resource.resource_type in (BROKER, TOPIC):  # ACLs: ALTER_CONFIGS on the resource
        ctx.require(AclOperation.ALTER_CONFIGS, *(
            (ResourceType.CLUSTER, CLUSTER_NAME) if resource.resource_type == BROKER
            else (ResourceType.TOPIC, resource.resource_name)))
    if resource.resource_type == BROKER:
        return _apply_broker(ctx, resource, incremental, validate_only)
    if resource.resource_type != TOPIC:
        raise KafkaProtocolError(ErrorCode.INVALID_REQUEST,
                                 "only topic and broker configs can be altered")
    logs = ctx.state.logs
    topic = logs.get_topic(resource.resource_name)
    overrides = dict(topic.config_overrides) if incremental else {}
    for c in resource.configs:
        op = c.config_operation if incremental else (SET if c.value is not None else DELETE)
        if op == SET and c.value is not None:
            overrides[c.name] = c.value
        elif op == DELETE or (op == SET and c.value is None):
            if c.name not in CONFIG_DEFS:
                raise InvalidConfigError(f"Unknown topic config name: {c.name}")
            overrides.pop(c.name, None)
        elif op in (APPEND, SUBTRACT):
            _list_op(ctx, overrides, c.name, op, c.value)
        else:
            raise InvalidConfigError(f"unknown config operation {op} for {c.name}")
    overrides = canonical_overrides(overrides)
    logs.default_config.with_overrides(overrides)
    if not validate_only:
        logs.alter_configs(topic.name, overrides)


def _results(ctx: RequestContext, request: Any, incremental: bool, result_cls: Any) -> list[Any]:
    out = []
    for r in request.resources:
        try:
            _apply(ctx, r, incremental, bool(request.validate_only))
            out.append(result_cls(error_code=0, error_message=None,
                                  resource_type=r.resource_type, resource_name=r.resource_name))
        except (HeadraceError, OSError) as e:
            out.append(result_cls(error_code=error_code_for(e), error_message=str(e),
                                  resource_type=r.resource_type, resource_name=r.resource_name))
    return out


@handles(AlterConfigsRequest, AlterConfigsResponse, max_version=2)
async def handle(ctx: RequestContext, request: Any) -> Any:
    result_cls = AlterConfigsResponse.AlterConfigsResourceResponse
    return AlterConfigsResponse(throttle_time_ms=0,
                                responses=_results(ctx, request, False, result_cls))


@handles(IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse, max_version=1)
async def handle_incremental(ctx: RequestContext, request: Any) -> Any:
    result_cls = IncrementalAlterConfigsResponse.AlterConfigsResourceResponse
    return IncrementalAlterConfigsResponse(throttle_time_ms=0,
                                           responses=_results(ctx, request, True, result_cls))
