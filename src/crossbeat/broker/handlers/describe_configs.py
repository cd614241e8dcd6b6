"""DescribeConfigs (32): topic configs (explicit or default) and the broker's own.

Resource types: 2 = topic, 4 = broker. Config sources: 1 = topic override, 5 = default.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import DescribeConfigsResponse

from crossbeat.broker.errors import ErrorCode
from crossbeat.broker.handlers.context import Context
from crossbeat.broker.topics import default_configs

_Result = DescribeConfigsResponse.DescribeConfigsResult
_Config = _Result.DescribeConfigsResourceResult
TOPIC, BROKER = 2, 4
SOURCE_TOPIC, SOURCE_STATIC_BROKER, SOURCE_DEFAULT = 1, 4, 5


async def handle(ctx: Context, req: Any) -> Any:
    broker = ctx.broker
    defaults = default_configs(broker.settings.stream, broker.settings.max_message_bytes)
    results = []
    for res in req.resources:
        keys = set(res.configuration_keys) if res.configuration_keys is not None else None
        values: dict[str, tuple[str, int]] = {}
        code, message = ErrorCode.NONE, None
        if res.resource_type == TOPIC:
            topic = broker.topics.get(res.resource_name)
            if topic is None:
                code, message = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "unknown topic"
            else:
                values = {k: (v, SOURCE_DEFAULT) for k, v in defaults.items()}
                values.update({k: (v, SOURCE_TOPIC) for k, v in topic.configs.items()})
        elif res.resource_type == BROKER:
            s = broker.settings
            values = {
                "broker.id": (str(broker.node_id), SOURCE_STATIC_BROKER),
                "auto.create.topics.enable": (str(s.auto_create_topics).lower(), SOURCE_STATIC_BROKER),
                "num.partitions": (str(s.num_partitions), SOURCE_STATIC_BROKER),
                "socket.request.max.bytes": (str(s.max_frame_bytes), SOURCE_STATIC_BROKER),
                "message.max.bytes": (str(s.max_message_bytes), SOURCE_STATIC_BROKER),
                "advertised.listeners": (f"PLAINTEXT://{broker.host}:{broker.port}",
                                         SOURCE_STATIC_BROKER),
            }
        else:
            code, message = ErrorCode.INVALID_REQUEST, f"unsupported resource type {res.resource_type}"
        configs = [
            _Config(name=k, value=v, read_only=res.resource_type == BROKER, config_source=src,
                    is_default=src == SOURCE_DEFAULT, is_sensitive=False, synonyms=[],
                    config_type=0, documentation=None)
            for k, (v, src) in sorted(values.items()) if keys is None or k in keys
        ]
        results.append(_Result(error_code=int(code), error_message=message,
                               resource_type=res.resource_type, resource_name=res.resource_name,
                               configs=configs))
    return DescribeConfigsResponse(throttle_time_ms=0, results=results)
