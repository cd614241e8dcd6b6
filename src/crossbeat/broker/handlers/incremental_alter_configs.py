"""IncrementalAlterConfigs (44): SET, DELETE, APPEND or SUBTRACT topic configs.

Each resource is checked as Kafka does (see `crossbeat.broker.config_alter`), then the
topic's resulting explicit configs are checked as CreateTopics checks them and, unless
`validate_only`, persisted and applied (`Topics.alter_configs`). A resource either applies
whole or not at all; resources of one request are independent.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import IncrementalAlterConfigsResponse

from crossbeat.broker.config_alter import alter_each, incremental_configs
from crossbeat.broker.errors import ErrorCode
from crossbeat.broker.handlers.context import Context
from crossbeat.broker.topics import TopicError, default_configs

_Result = IncrementalAlterConfigsResponse.AlterConfigsResourceResponse


async def handle(ctx: Context, req: Any) -> Any:
    broker = ctx.broker
    defaults = default_configs(broker.settings.stream, broker.settings.max_message_bytes)

    def apply(res: Any) -> None:
        topic = broker.topics.get(res.resource_name)
        if topic is None:
            raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             f"The topic '{res.resource_name}' does not exist.")
        configs = incremental_configs(topic.configs, defaults, res.configs)
        broker.topics.alter_configs(res.resource_name, configs, validate_only=bool(req.validate_only))

    results = alter_each(req.resources, broker.node_id, incremental=True, apply=apply, result=_Result)
    return IncrementalAlterConfigsResponse(throttle_time_ms=0, responses=results)
