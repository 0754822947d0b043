"""DescribeConfigs (key 32), versions 1-4 (v0, removed in Kafka 4 by KIP-896, closes
the connection as in Kafka 4): topic (type 2) and broker (type 4) configs.

Topic configs: every config of ``storage.config.CONFIG_DEFS`` with its effective value and
source: DYNAMIC_TOPIC_CONFIG for a topic override, STATIC_BROKER_CONFIG where the broker's
own default (a ``headrace broker --config`` setting) differs from Kafka's, else
DEFAULT_CONFIG; with ``include_synonyms`` the chain override -> broker setting ->
default, with DYNAMIC_BROKER_CONFIG / DYNAMIC_DEFAULT_BROKER_CONFIG (AlterConfigs on the
broker resource) in between; config types and, with ``include_documentation`` (v3+), a
one-line doc. Broker resource ``"<node id>"``: the broker-wide topic defaults under
Kafka's broker names (dynamic, with the same sources and synonyms), and the cleaner and
listener settings (read-only, STATIC_BROKER_CONFIG). Resource ``""`` (the cluster-wide
default): only the configs set there, as Kafka. With ACLs: DESCRIBE_CONFIGS on the topic
(else TOPIC_AUTHORIZATION_FAILED) or the cluster (else CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import DescribeConfigsRequest, DescribeConfigsResponse

from headrace.broker.context import DENIED_CODES, RequestContext
from headrace.broker.registry import handles
from headrace.broker.state import BrokerState
from headrace.protocol.acl_operations import CLUSTER_NAME, AclOperation, ResourceType
from headrace.protocol.errors import ErrorCode
from headrace.storage.config import CONFIG_DEFS, ConfigType, describe_topic_configs
from headrace.storage.dynamic_config import BROKER as BROKER_SCOPE
from headrace.storage.dynamic_config import CLUSTER, READ_ONLY

_Result = DescribeConfigsResponse.DescribeConfigsResult
_Entry = _Result.DescribeConfigsResourceResult
_Synonym = _Entry.DescribeConfigsSynonym

TOPIC, BROKER = 2, 4
DYNAMIC_TOPIC_CONFIG, DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG = 1, 2, 3
STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 4, 5
SOURCES = {"topic": DYNAMIC_TOPIC_CONFIG, "dynamic_broker": DYNAMIC_BROKER_CONFIG,
           "dynamic_default": DYNAMIC_DEFAULT_BROKER_CONFIG, "broker": STATIC_BROKER_CONFIG,
           "default": DEFAULT_CONFIG}


def _layers(state: BrokerState) -> dict[str, dict[str, str]]:
    dynamic = state.logs.dynamic.layers
    return {"dynamic_broker": dynamic[BROKER_SCOPE], "dynamic_default": dynamic[CLUSTER]}


def _entries(state: BrokerState, overrides: dict[str, str], as_broker: bool, synonyms: bool,
             docs: bool) -> list[Any]:
    """The topic configs (under broker names with ``as_broker``) as DescribeConfigs entries."""
    out = []
    for c in describe_topic_configs(state.logs.static_config, overrides, _layers(state)):
        if as_broker and not CONFIG_DEFS[c.name].broker_level:
            continue
        name = CONFIG_DEFS[c.name].broker_name if as_broker else c.name
        out.append(_Entry(
            name=name, value=c.value, read_only=as_broker and name in READ_ONLY,
            config_source=SOURCES[c.source],
            is_default=c.source == "default", is_sensitive=False,
            synonyms=[_Synonym(name=n, value=v, source=SOURCES[s]) for n, v, s in c.synonyms]
            if synonyms else [],
            config_type=int(c.type), documentation=c.doc if docs else None))
    return out


def broker_configs(state: BrokerState) -> dict[str, tuple[str, ConfigType]]:
    """Broker config name -> (value, type)."""
    cfg = state.config
    out = {defn.broker_name: (defn.value_of(cfg.log), defn.type) for defn in CONFIG_DEFS.values()
           if defn.broker_level}
    cleaner = cfg.cleaner
    out.update({
        "broker.id": (str(cfg.node_id), ConfigType.INT),
        "node.id": (str(cfg.node_id), ConfigType.INT),
        "advertised.listeners": (",".join(f"{x.name}://{x.advertised_host}:{x.port}"
                                          for x in state.listeners), ConfigType.STRING),
        "listener.security.protocol.map": (",".join(f"{x.name}:{x.security_protocol}"
                                                    for x in state.listeners),
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
        "transaction.partition.verification.enable": (
            str(cfg.txns.partition_verification).lower(), ConfigType.BOOLEAN),
    })
    return out


def _error(rtype: int, name: str, code: ErrorCode, message: str) -> Any:
    return _Result(error_code=code, error_message=message, resource_type=rtype,
                   resource_name=name, configs=[])


def _describe(ctx: RequestContext, resource: Any, synonyms: bool, docs: bool) -> Any:
    state = ctx.state
    rtype, name = resource.resource_type, resource.resource_name
    keys = resource.configuration_keys
    entries = []
    acl = {TOPIC: (ResourceType.TOPIC, name), BROKER: (ResourceType.CLUSTER, CLUSTER_NAME)}
    if rtype in acl and not ctx.allowed(AclOperation.DESCRIBE_CONFIGS, *acl[rtype]):
        return _error(rtype, name, DENIED_CODES[acl[rtype][0]],
                      f"not authorized to describe the configs of {name!r}")
    if rtype == TOPIC:
        topic = state.logs.topics.get(name)
        if topic is None:
            return _error(rtype, name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                          f"unknown topic {name!r}")
        entries = [e for e in _entries(state, topic.config_overrides, False, synonyms, docs)
                   if keys is None or e.name in keys]
    elif rtype == BROKER:
        if name not in ("", str(state.config.node_id)):
            return _error(rtype, name, ErrorCode.RESOURCE_NOT_FOUND, f"unknown broker {name!r}")
        dynamic = {e.name: e for e in _entries(state, {}, True, synonyms, docs)}
        if name == "":  # the cluster-wide default: only what is set there, as set there
            cluster = state.logs.dynamic.layers[CLUSTER]
            dynamic = {k: _Entry(
                name=k, value=cluster[k], read_only=False,
                config_source=DYNAMIC_DEFAULT_BROKER_CONFIG, is_default=False,
                is_sensitive=False, config_type=e.config_type, documentation=e.documentation,
                synonyms=[_Synonym(name=k, value=cluster[k], source=DYNAMIC_DEFAULT_BROKER_CONFIG)]
                if synonyms else [])
                for k, e in dynamic.items() if k in cluster}
        for key, (value, type_) in sorted(broker_configs(state).items()):
            if keys is not None and key not in keys:
                continue
            if key in dynamic or name == "":
                if key in dynamic:
                    entries.append(dynamic[key])
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


@handles(DescribeConfigsRequest, DescribeConfigsResponse, max_version=4, min_version=1)
async def handle(ctx: RequestContext, request: Any) -> Any:
    synonyms = bool(request.include_synonyms)
    docs = ctx.api_version >= 3 and bool(request.include_documentation)
    return DescribeConfigsResponse(
        throttle_time_ms=0,
        results=[_describe(ctx, r, synonyms, docs) for r in request.resources])
