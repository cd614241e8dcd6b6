"""LeaveGroup (13): remove members (one by id at v0-2, a list at v3+); others rebalance."""

from __future__ import annotations

from typing import Any

from kafka.protocol.consumer import LeaveGroupResponse

from crossbeat.broker.errors import ErrorCode
from crossbeat.broker.handlers.context import Context

_Member = LeaveGroupResponse.MemberResponse


async def handle(ctx: Context, req: Any) -> Any:
    groups = ctx.broker.groups
    if ctx.version < 3:
        error = groups.leave(req.group_id, req.member_id)
        return LeaveGroupResponse(throttle_time_ms=0, error_code=int(error))
    members = []
    for m in req.members:
        if m.member_id:
            error, mid = groups.leave(req.group_id, m.member_id), m.member_id
        elif m.group_instance_id:
            error, mid = groups.leave_instance(req.group_id, m.group_instance_id)
        else:
            error, mid = ErrorCode.UNKNOWN_MEMBER_ID, ""
        members.append(_Member(member_id=mid or m.member_id,
                               group_instance_id=m.group_instance_id, error_code=int(error)))
    return LeaveGroupResponse(throttle_time_ms=0, error_code=0, members=members)
