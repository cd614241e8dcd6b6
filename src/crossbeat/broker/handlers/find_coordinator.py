"""FindCoordinator (10): this broker coordinates every group (key type 0) and every
transactional id (key type 1); any other key type is INVALID_REQUEST."""

from __future__ import annotations

from typing import Any

from kafka.protocol.metadata import FindCoordinatorResponse

from crossbeat.broker.errors import ErrorCode
from crossbeat.broker.handlers.context import Context


async def handle(ctx: Context, req: Any) -> Any:
    b = ctx.broker
    if ctx.version >= 1 and req.key_type not in (0, 1):
        return FindCoordinatorResponse(
            throttle_time_ms=0, error_code=int(ErrorCode.INVALID_REQUEST),
            error_message=f"unknown coordinator key type {req.key_type}", node_id=-1, host="",
            port=-1,
        )
    return FindCoordinatorResponse(throttle_time_ms=0, error_code=0, error_message=None,
                                   node_id=b.node_id, host=b.host, port=b.port)
