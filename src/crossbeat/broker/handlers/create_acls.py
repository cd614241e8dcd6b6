"""CreateAcls (30), v1-v3: this broker has no authorizer, so, as Kafka's broker without
`authorizer.class.name`, every creation fails with SECURITY_DISABLED and the message
"No Authorizer is configured." (one result per creation, in request order)."""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import CreateAclsResponse

from crossbeat.broker.errors import ErrorCode
from crossbeat.broker.handlers.context import Context

_Result = CreateAclsResponse.AclCreationResult
MESSAGE = "No Authorizer is configured."


async def handle(ctx: Context, req: Any) -> Any:
    return CreateAclsResponse(throttle_time_ms=0, results=[
        _Result(error_code=int(ErrorCode.SECURITY_DISABLED), error_message=MESSAGE)
        for _ in req.creations])
