"""LeaveGroup (13): remove members (one by id at v0-2, a list at v3+); others rebalance.

At v3+ a member may be named by its static instance id alone (an admin removing a static
member, which never leaves by itself). Each member's answer echoes the member id and
instance id it was asked for, as Kafka's does: clients match answers to requests by them.
"""

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
        if m.member_id or m.group_instance_id is not None:
            error = groups.leave(req.group_id, m.member_id, m.group_instance_id)
        else:
            error = ErrorCode.UNKNOWN_MEMBER_ID
        members.append(_Member(member_id=m.member_id, group_instance_id=m.group_instance_id,
                               error_code=int(error)))
    return LeaveGroupResponse(throttle_time_ms=0, error_code=0, members=members)
