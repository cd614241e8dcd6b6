"""SyncGroup (14): the leader hands out assignments; followers long-poll for theirs.

v3+ carries the static instance id, by which a replaced member is FENCED_INSTANCE_ID.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.consumer import SyncGroupResponse

from crossbeat.broker.handlers.context import Context


async def handle(ctx: Context, req: Any) -> Any:
    assignments = {a.member_id: bytes(a.assignment) for a in req.assignments or []}
    instance = req.group_instance_id if ctx.version >= 3 else None
    result = await ctx.broker.groups.sync(req.group_id, req.generation_id, req.member_id,
                                          assignments, instance)
    return SyncGroupResponse(throttle_time_ms=0, error_code=int(result.error),
                             assignment=result.assignment)
