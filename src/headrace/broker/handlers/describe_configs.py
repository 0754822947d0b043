"""DescribeConfigs (key 32), versions 0-4: topic (type 2) and broker (type 4) configs.

Topic configs: every config of ``storage.config.CONFIG_DEFS`` with its effective value and
source: DYNAMIC_TOPIC_CONFIG for a topic override, STATIC_BROKER_CONFIG where the broker's
own default (a ``headrace broker --config`` setting) differs from Kafka's, else
DEFAULT_CONFIG; with ``include_synonyms`` (v1+) the chain override -> broker setting ->
default; config types and, with ``include_documentation`` (v3+), a one-line doc. Broker
configs are read-only and all reported as STATIC_BROKER_CONFIG (fixed at start-up): the
broker-wide topic defaults under Kafka's broker names, the cleaner and listener settings.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import DescribeConfigsRequest, DescribeConfigsResponse

from headrace.broker.context import RequestContext
from headrace.broker.registry import handles
from headrace.broker.state import BrokerState
from headrace.protocol.errors import ErrorCode
from headrace.storage.config import CONFIG_DEFS, ConfigType, describe_topic_configs

_Result = DescribeConfigsResponse.DescribeConfigsResult
_Entry = _Result.DescribeConfigsResourceResult
_Synonym = _Entry.DescribeConfigsSynonym

TOPIC, BROKER = 2, 4
DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5
SOURCES = {"topic": DYNAMIC_TOPIC_CONFIG, "broker": STATIC_BROKER_CONFIG, "default": DEFAULT_CONFIG}


def broker_configs(state: BrokerState) -> dict[str, tuple[str, ConfigType]]:
    """Broker config name -> (value, type)."""
    cfg = state.config
    out = {defn.broker_name: (defn.value_of(cfg.log), defn.type) for defn in CONFIG_DEFS.values()}
    cleaner = cfg.cleaner
    out.update({
        "broker.id": (str(cfg.node_id), ConfigType.INT),
        "node.id": (str(cfg.node_id), ConfigType.INT),
        "advertised.listeners": (f"PLAINTEXT://{state.advertised_host}:{state.port}",
                                 ConfigType.STRING),
        "auto.create.topics.enable": (str(cfg.auto_create_topics).lower(), ConfigType.BOOLEAN),
        "num.partitions": (str(cfg.num_partitions), ConfigType.INT),
        "default.replication.factor": ("1", ConfigType.INT),
        "log.dirs": (str(cfg.data_dir), ConfigType.STRING),
        "socket.request.max.bytes": (str(cfg.max_request_bytes), ConfigType.INT),
        "log.retention.check.interval.ms": (str(cfg.retention_check_interval_ms), ConfigType.LONG),
        "log.cleaner.enable": (str(cleaner.enabled).lower(), ConfigType.BOOLEAN),
        "log.cleaner.backoff.ms": (str(cleaner.backoff_ms), ConfigType.LONG),
        "log.cleaner.dedupe.buffer.size": (str(cleaner.dedupe_buffer_size), ConfigType.LONG),
        "producer.id.expiration.ms": (str(cfg.log.producer_id_expiration_ms), ConfigType.INT),
    })
    return out


def _error(rtype: int, name: str, code: ErrorCode, message: str) -> Any:
    return _Result(error_code=code, error_message=message, resource_type=rtype,
                   resource_name=name, configs=[])


def _describe(state: BrokerState, resource: Any, synonyms: bool, docs: bool) -> Any:
    rtype, name = resource.resource_type, resource.resource_name
    keys = resource.configuration_keys
    entries = []
    if rtype == TOPIC:
        topic = state.logs.topics.get(name)
        if topic is None:
            return _error(rtype, name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                          f"unknown topic {name!r}")
        for c in describe_topic_configs(state.logs.default_config, topic.config_overrides):
            if keys is not None and c.name not in keys:
                continue
            entries.append(_Entry(
                name=c.name, value=c.value, read_only=False, config_source=SOURCES[c.source],
                is_default=c.source == "default", is_sensitive=False,
                synonyms=[_Synonym(name=n, value=v, source=SOURCES[s]) for n, v, s in c.synonyms]
                if synonyms else [],
                config_type=int(c.type), documentation=c.doc if docs else None))
    elif rtype == BROKER:
        if name not in ("", str(state.config.node_id)):
            return _error(rtype, name, ErrorCode.RESOURCE_NOT_FOUND, f"unknown broker {name!r}")
        for key, (value, type_) in sorted(broker_configs(state).items()):
            if keys is not None and key not in keys:
                continue
            entries.append(_Entry(
                name=key, value=value, read_only=True, config_source=STATIC_BROKER_CONFIG,
                is_default=False, is_sensitive=False,
                synonyms=[_Synonym(name=key, value=value, source=STATIC_BROKER_CONFIG)]
                if synonyms else [],
                config_type=int(type_), documentation=None))
    else:
        return _error(rtype, name, ErrorCode.INVALID_REQUEST,
                      f"resource type {rtype} not supported")
    return _Result(error_code=0, error_message=None, resource_type=rtype, resource_name=name,
                   configs=entries)


@handles(DescribeConfigsRequest, DescribeConfigsResponse, max_version=4)
async def handle(ctx: RequestContext, request: Any) -> Any:
    synonyms = ctx.api_version >= 1 and bool(request.include_synonyms)
    docs = ctx.api_version >= 3 and bool(request.include_documentation)
    return DescribeConfigsResponse(
        throttle_time_ms=0,
        results=[_describe(ctx.state, r, synonyms, docs) for r in request.resources])
