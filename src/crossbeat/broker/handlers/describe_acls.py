"""DescribeAcls (29), v1-v3: this broker has no authorizer, so it answers as Kafka's broker
without `authorizer.class.name` does: SECURITY_DISABLED, "No Authorizer is configured on
the broker", and no resources, whatever the filter."""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import DescribeAclsResponse

from crossbeat.broker.errors import ErrorCode
from crossbeat.broker.handlers.context import Context

MESSAGE = "No Authorizer is configured on the broker"


async def handle(ctx: Context, req: Any) -> Any:
    return DescribeAclsResponse(throttle_time_ms=0, error_code=int(ErrorCode.SECURITY_DISABLED),
                                error_message=MESSAGE, resources=[])
