"""DescribeConfigs (key 32), versions 0-4: topic (type 2) and broker (type 4) configs.

Topic configs report Kafka's names with their effective values; overrides are
DYNAMIC_TOPIC_CONFIG, the rest DEFAULT_CONFIG. Broker configs are static (read-only).
Synonyms and documentation are not reported.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import DescribeConfigsRequest, DescribeConfigsResponse

from headrace.broker.context import RequestContext
from headrace.broker.registry import handles
from headrace.broker.state import BrokerState
from headrace.protocol.errors import ErrorCode

_Result = DescribeConfigsResponse.DescribeConfigsResult
_Entry = _Result.DescribeConfigsResourceResult

TOPIC, BROKER = 2, 4
DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5
TYPE_STRING = 2


def broker_configs(state: BrokerState) -> dict[str, str]:
    cfg = state.config
    log = cfg.log
    return {
        "broker.id": str(cfg.node_id),
        "node.id": str(cfg.node_id),
        "advertised.listeners": f"PLAINTEXT://{state.advertised_host}:{state.port}",
        "auto.create.topics.enable": str(cfg.auto_create_topics).lower(),
        "num.partitions": str(cfg.num_partitions),
        "default.replication.factor": "1",
        "log.dirs": str(cfg.data_dir),
        "log.segment.bytes": str(log.segment_bytes),
        "log.roll.ms": str(log.segment_ms),
        "log.retention.ms": str(log.retention_ms),
        "log.retention.bytes": str(log.retention_bytes),
        "log.index.interval.bytes": str(log.index_interval_bytes),
        "log.flush.on.ack": str(log.flush_on_ack).lower(),
        "message.max.bytes": str(cfg.message_max_bytes),
        "socket.request.max.bytes": str(cfg.max_request_bytes),
    }


def _describe(state: BrokerState, resource: Any) -> Any:
    rtype, name = resource.resource_type, resource.resource_name
    if rtype == TOPIC:
        topic = state.logs.topics.get(name)
        if topic is None:
            return _Result(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                           error_message=f"unknown topic {name!r}", resource_type=rtype,
                           resource_name=name, configs=[])
        values = topic.config.as_kafka_configs() | topic.config_overrides
        sources = {k: DYNAMIC_TOPIC_CONFIG if k in topic.config_overrides else DEFAULT_CONFIG
                   for k in values}
        read_only = False
    elif rtype == BROKER:
        if name not in ("", str(state.config.node_id)):
            return _Result(error_code=ErrorCode.RESOURCE_NOT_FOUND,
                           error_message=f"unknown broker {name!r}", resource_type=rtype,
                           resource_name=name, configs=[])
        values = broker_configs(state)
        sources = dict.fromkeys(values, STATIC_BROKER_CONFIG)
        read_only = True
    else:
        return _Result(error_code=ErrorCode.INVALID_REQUEST,
                       error_message=f"resource type {rtype} not supported",
                       resource_type=rtype, resource_name=name, configs=[])
    keys = resource.configuration_keys
    entries = [
        _Entry(name=k, value=v, read_only=read_only, config_source=sources[k],
               is_default=sources[k] == DEFAULT_CONFIG, is_sensitive=False, synonyms=[],
               config_type=TYPE_STRING, documentation=None)
        for k, v in sorted(values.items()) if keys is None or k in keys
    ]
    return _Result(error_code=0, error_message=None, resource_type=rtype, resource_name=name,
                   configs=entries)


@handles(DescribeConfigsRequest, DescribeConfigsResponse, max_version=4)
async def handle(ctx: RequestContext, request: Any) -> Any:
    return DescribeConfigsResponse(
        throttle_time_ms=0, results=[_describe(ctx.state, r) for r in request.resources])
