"""IncrementalAlterConfigs (44): SET, DELETE, APPEND or SUBTRACT topic configs.

Each resource is checked as Kafka does (see `crossbeat.broker.config_alter`), then the
topic's resulting explicit configs are checked as CreateTopics checks them and, unless
`validate_only`, persisted and applied (`Topics.alter_configs`). A resource either applies
whole or not at all; resources of one request are independent.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import IncrementalAlterConfigsResponse

from crossbeat.broker.config_alter import (
    TOPIC,
    check_resource,
    duplicate_resources,
    incremental_configs,
)
from crossbeat.broker.errors import ErrorCode
from crossbeat.broker.handlers.context import Context
from crossbeat.broker.topics import TopicError, default_configs

_Result = IncrementalAlterConfigsResponse.AlterConfigsResourceResponse


async def handle(ctx: Context, req: Any) -> Any:
    broker = ctx.broker
    defaults = default_configs(broker.settings.stream, broker.settings.max_message_bytes)
    twice = duplicate_resources(req.resources)
    results = []
    for res in req.resources:
        code, message = ErrorCode.NONE, None
        try:
            if (res.resource_type, res.resource_name) in twice:
                raise TopicError(ErrorCode.INVALID_REQUEST, "Each resource must appear at most once.")
            check_resource(res, broker.node_id, incremental=True)
            if res.resource_type == TOPIC:  # else a broker resource that changes nothing
                topic = broker.topics.get(res.resource_name)
                if topic is None:
                    raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                     f"The topic '{res.resource_name}' does not exist.")
                configs = incremental_configs(topic.configs, defaults, res.configs)
                broker.topics.alter_configs(res.resource_name, configs,
                                            validate_only=bool(req.validate_only))
        except TopicError as exc:
            code, message = exc.code, exc.message
        results.append(_Result(error_code=int(code), error_message=message,
                               resource_type=res.resource_type, resource_name=res.resource_name))
    return IncrementalAlterConfigsResponse(throttle_time_ms=0, responses=results)
