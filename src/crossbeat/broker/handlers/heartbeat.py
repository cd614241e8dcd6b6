"""Heartbeat (12): keeps a member's session alive; tells it when to rejoin.

v3+ carries the static instance id, by which a replaced member is FENCED_INSTANCE_ID.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.consumer import HeartbeatResponse

from crossbeat.broker.handlers.context import Context


async def handle(ctx: Context, req: Any) -> Any:
    instance = req.group_instance_id if ctx.version >= 3 else None
    error = ctx.broker.groups.heartbeat(req.group_id, req.generation_id, req.member_id,
                                        instance)
    return HeartbeatResponse(throttle_time_ms=0, error_code=int(error))
