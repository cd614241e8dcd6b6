"""SyncGroup (14): the leader hands out assignments; followers long-poll for theirs."""

from __future__ import annotations

from typing import Any

from kafka.protocol.consumer import SyncGroupResponse

from crossbeat.broker.handlers.context import Context


async def handle(ctx: Context, req: Any) -> Any:
    assignments = {a.member_id: bytes(a.assignment) for a in req.assignments or []}
    result = await ctx.broker.groups.sync(req.group_id, req.generation_id, req.member_id,
                                          assignments)
    return SyncGroupResponse(throttle_time_ms=0, error_code=int(result.error),
                             assignment=result.assignment)
