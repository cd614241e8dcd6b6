"""DescribeConfigs (32): topic configs (explicit or default) and the broker's own.

Resource types: 2 = topic, 4 = broker. Config sources, Kafka's: 1 = set on the topic
(DYNAMIC_TOPIC_CONFIG), 4 = set in the broker's configuration (STATIC_BROKER_CONFIG), 5 =
Kafka's default (DEFAULT_CONFIG). A topic config the topic does not set reports the
broker-level value it inherits: source 4 when the operator set the crossbeat setting behind
it, else 5. With `include_synonyms` (v1+) each entry lists, most specific first, where its
value could come from: the topic's override, then the broker config Kafka names for it
(`log.retention.ms` for `retention.ms`, ...) with the broker's value. v3 adds each config's
type (Kafka's ConfigType) and, with `include_documentation`, a line of documentation.

A topic reports every config it accepts (`crossbeat.broker.topic_configs.CONFIGS`), each with
Kafka's type, default and synonym; one Kafka names no broker synonym for (the replication
throttles, `remote.storage.enable`) reports Kafka's default with source 5 and no synonyms,
as Kafka does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kafka.protocol.admin import DescribeConfigsResponse

from crossbeat.broker.errors import ErrorCode
from crossbeat.broker.handlers.context import Context
from crossbeat.broker.settings import BrokerSettings
from crossbeat.broker.topic_configs import (
    BOOLEAN,
    CONFIGS,
    DOUBLE,
    INT,
    LIST,
    LONG,
    STRING,
    ConfigSpec,
)
from crossbeat.broker.topics import default_configs

_Result = DescribeConfigsResponse.DescribeConfigsResult
_Config = _Result.DescribeConfigsResourceResult
_Synonym = _Config.DescribeConfigsSynonym
TOPIC, BROKER = 2, 4
SOURCE_TOPIC, SOURCE_STATIC_BROKER, SOURCE_DEFAULT = 1, 4, 5
# Kafka's ConfigType
_BOOLEAN, _STRING, _INT, _LONG, _DOUBLE, _LIST = 1, 2, 3, 5, 6, 7
_TOPIC_TYPES = {BOOLEAN: _BOOLEAN, STRING: _STRING, INT: _INT, LONG: _LONG, DOUBLE: _DOUBLE,
                LIST: _LIST}
# crossbeat settings behind each broker-level default: set by the operator -> STATIC_BROKER
_SETTING_BEHIND = {
    "retention.ms": ("stream", "retention_ms"),
    "retention.bytes": ("stream", "retention_bytes"),
    "segment.bytes": ("stream", "segment_bytes"),
    "segment.ms": ("stream", "segment_ms"),
    "max.message.bytes": ("broker", "max_message_bytes"),
}
_BROKER_CONFIGS = {  # name -> (type, documentation)
    "broker.id": (_INT, "This broker's id."),
    "auto.create.topics.enable": (_BOOLEAN, "Whether a Metadata request creates the topics it names."),
    "num.partitions": (_INT, "The partitions of a topic created without a count."),
    "socket.request.max.bytes": (_INT, "The largest request frame accepted."),
    "message.max.bytes": (_INT, "The largest record batch accepted by default."),
    "advertised.listeners": (_STRING, "Where clients are told to connect."),
    "fetch.max.bytes": (_INT, "The most record bytes one Fetch response carries."),
    "connections.max.idle.ms": (_LONG, "A connection idle this long is closed; -1: never."),
}


def _broker_source(settings: BrokerSettings, key: str) -> int:
    behind = _SETTING_BEHIND.get(key)
    if behind is None:
        return SOURCE_DEFAULT
    scope, field = behind
    model = settings.stream if scope == "stream" else settings
    return SOURCE_STATIC_BROKER if field in model.model_fields_set else SOURCE_DEFAULT


@dataclass(frozen=True)
class TopicConfig:
    """One config of a topic as described: its value, where it comes from (a SOURCE_*),
    and, most specific first, where it could come from (name, value, source)."""

    name: str
    value: str | None
    source: int
    chain: list[tuple[str, str | None, int]]
    spec: ConfigSpec | None


def topic_configs(settings: BrokerSettings, explicit: dict[str, str]) -> list[TopicConfig]:
    """Every config of a topic whose explicit configs are `explicit`, by name (what
    DescribeConfigs and CreateTopics v5+ report)."""
    defaults = default_configs(settings.stream, settings.max_message_bytes)
    out = []
    for key in sorted(set(defaults) | set(explicit)):
        spec = CONFIGS.get(key)
        # the broker config the value falls back to, where Kafka has one
        chain = [] if spec is None or spec.synonym is None else [
            (spec.synonym, defaults.get(key), _broker_source(settings, key))]
        if key in explicit:
            chain.insert(0, (key, explicit[key], SOURCE_TOPIC))
        # neither: Kafka's own default, with no synonym to name
        value, source = (chain[0][1], chain[0][2]) if chain else (defaults.get(key), SOURCE_DEFAULT)
        out.append(TopicConfig(key, value, source, chain, spec))
    return out


async def handle(ctx: Context, req: Any) -> Any:
    broker = ctx.broker
    settings = broker.settings
    synonyms_asked = ctx.version >= 1 and bool(req.include_synonyms)
    docs_asked = ctx.version >= 3 and bool(req.include_documentation)
    results = []
    for res in req.resources:
        keys = set(res.configuration_keys) if res.configuration_keys is not None else None
        configs = []
        code, message = ErrorCode.NONE, None
        if res.resource_type == TOPIC:
            topic = broker.topics.get(res.resource_name)
            if topic is None:
                code, message = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "unknown topic"
            else:
                for c in topic_configs(settings, topic.configs):
                    if keys is not None and c.name not in keys:
                        continue
                    configs.append(_Config(
                        name=c.name, value=c.value, read_only=False, config_source=c.source,
                        is_default=c.source == SOURCE_DEFAULT, is_sensitive=False,
                        synonyms=[_Synonym(name=n, value=v, source=src) for n, v, src in c.chain]
                        if synonyms_asked else [],
                        config_type=_TOPIC_TYPES[c.spec.kind] if c.spec else _STRING,
                        documentation=(c.spec.doc if c.spec else "") if docs_asked else None))
        elif res.resource_type == BROKER:
            values = {
                "broker.id": str(broker.node_id),
                "auto.create.topics.enable": str(settings.auto_create_topics).lower(),
                "num.partitions": str(settings.num_partitions),
                "socket.request.max.bytes": str(settings.max_frame_bytes),
                "message.max.bytes": str(settings.max_message_bytes),
                "advertised.listeners": f"PLAINTEXT://{broker.host}:{broker.port}",
                "fetch.max.bytes": str(settings.fetch_max_bytes),
                "connections.max.idle.ms": str(settings.connections_max_idle_ms),
            }
            for key, value in sorted(values.items()):
                if keys is not None and key not in keys:
                    continue
                kind, doc = _BROKER_CONFIGS[key]
                configs.append(_Config(
                    name=key, value=value, read_only=True, config_source=SOURCE_STATIC_BROKER,
                    is_default=False, is_sensitive=False,
                    synonyms=[_Synonym(name=key, value=value, source=SOURCE_STATIC_BROKER)]
                    if synonyms_asked else [],
                    config_type=kind, documentation=doc if docs_asked else None))
        else:
            code, message = ErrorCode.INVALID_REQUEST, f"unsupported resource type {res.resource_type}"
        results.append(_Result(error_code=int(code), error_message=message,
                               resource_type=res.resource_type, resource_name=res.resource_name,
                               configs=configs))
    return DescribeConfigsResponse(throttle_time_ms=0, results=results)
