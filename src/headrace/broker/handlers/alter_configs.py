"""AlterConfigs (key 33, versions 0-2) and IncrementalAlterConfigs (key 44, versions 0-1).

Topic configs only: AlterConfigs replaces the topic's overrides, IncrementalAlterConfigs
applies SET (0) and DELETE (1); APPEND/SUBTRACT (list configs) get INVALID_CONFIG. Every
value is validated before anything changes; bad names or values get INVALID_CONFIG.
Broker configs are static here: altering them gets INVALID_REQUEST.
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
from headrace.protocol.errors import ErrorCode, KafkaProtocolError

TOPIC = 2
SET, DELETE = 0, 1


def _apply(ctx: RequestContext, resource: Any, incremental: bool, validate_only: bool) -> None:
    if resource.resource_type != TOPIC:
        raise KafkaProtocolError(ErrorCode.INVALID_REQUEST,
                                 "only topic configs can be altered on this broker")
    logs = ctx.state.logs
    topic = logs.get_topic(resource.resource_name)
    overrides = dict(topic.config_overrides) if incremental else {}
    for c in resource.configs:
        op = c.config_operation if incremental else SET
        if op == SET and c.value is not None:
            overrides[c.name] = c.value
        elif op == DELETE or c.value is None:
            overrides.pop(c.name, None)
        else:
            raise KafkaProtocolError(ErrorCode.INVALID_CONFIG,
                                     f"config operation {op} not supported for {c.name}")
    try:
        logs.default_config.with_overrides(overrides)
    except ValueError as e:
        raise KafkaProtocolError(ErrorCode.INVALID_CONFIG, str(e)) from e
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
