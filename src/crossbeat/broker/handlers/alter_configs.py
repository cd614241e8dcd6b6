"""AlterConfigs (33), the legacy whole-set alter: a topic's explicit configs become exactly
the ones given (those left out return to their defaults), checked as CreateTopics checks
them; `validate_only` changes nothing. Resource checks are Kafka's (see
`crossbeat.broker.config_alter`), where a null value is INVALID_REQUEST.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import AlterConfigsResponse

from crossbeat.broker.config_alter import TOPIC, check_resource, duplicate_resources
from crossbeat.broker.errors import ErrorCode
from crossbeat.broker.handlers.context import Context
from crossbeat.broker.topics import TopicError

_Result = AlterConfigsResponse.AlterConfigsResourceResponse


async def handle(ctx: Context, req: Any) -> Any:
    broker = ctx.broker
    twice = duplicate_resources(req.resources)
    results = []
    for res in req.resources:
        code, message = ErrorCode.NONE, None
        try:
            if (res.resource_type, res.resource_name) in twice:
                raise TopicError(ErrorCode.INVALID_REQUEST, "Each resource must appear at most once.")
            check_resource(res, broker.node_id, incremental=False)
            if res.resource_type == TOPIC:  # else a broker resource that changes nothing
                broker.topics.alter_configs(res.resource_name,
                                            {c.name: c.value for c in res.configs},
                                            validate_only=bool(req.validate_only))
        except TopicError as exc:
            code, message = exc.code, exc.message
        results.append(_Result(error_code=int(code), error_message=message,
                               resource_type=res.resource_type, resource_name=res.resource_name))
    return AlterConfigsResponse(throttle_time_ms=0, responses=results)
