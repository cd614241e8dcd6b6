"""AlterConfigs (33), the legacy whole-set alter: a topic's explicit configs become exactly
the ones given (those left out return to their defaults), checked as CreateTopics checks
them; `validate_only` changes nothing. Resource checks are Kafka's (see
`crossbeat.broker.config_alter`), where a null value is INVALID_REQUEST.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import AlterConfigsResponse

from crossbeat.broker.config_alter import alter_each
from crossbeat.broker.handlers.context import Context

_Result = AlterConfigsResponse.AlterConfigsResourceResponse


async def handle(ctx: Context, req: Any) -> Any:
    broker = ctx.broker

    def apply(res: Any) -> None:
        broker.topics.alter_configs(res.resource_name, {c.name: c.value for c in res.configs},
                                    validate_only=bool(req.validate_only))

    results = alter_each(req.resources, broker.node_id, incremental=False, apply=apply, result=_Result)
    return AlterConfigsResponse(throttle_time_ms=0, responses=results)
