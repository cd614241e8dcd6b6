"""DeleteAcls (31), v1-v3: this broker has no authorizer, so, as Kafka's broker without
`authorizer.class.name`, every filter fails with SECURITY_DISABLED and the message
"No Authorizer is configured." and matches no ACL (one result per filter, in request
order)."""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import DeleteAclsResponse

from crossbeat.broker.errors import ErrorCode
from crossbeat.broker.handlers.context import Context

_Result = DeleteAclsResponse.DeleteAclsFilterResult
MESSAGE = "No Authorizer is configured."


async def handle(ctx: Context, req: Any) -> Any:
    return DeleteAclsResponse(throttle_time_ms=0, filter_results=[
        _Result(error_code=int(ErrorCode.SECURITY_DISABLED), error_message=MESSAGE,
                matching_acls=[])
        for _ in req.filters])
