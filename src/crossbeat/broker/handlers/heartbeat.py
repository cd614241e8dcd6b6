"""Heartbeat (12): keeps a member's session alive; tells it when to rejoin."""

from __future__ import annotations

from typing import Any

from kafka.protocol.consumer import HeartbeatResponse

from crossbeat.broker.handlers.context import Context


async def handle(ctx: Context, req: Any) -> Any:
    error = ctx.broker.groups.heartbeat(req.group_id, req.generation_id, req.member_id)
    return HeartbeatResponse(throttle_time_ms=0, error_code=int(error))
