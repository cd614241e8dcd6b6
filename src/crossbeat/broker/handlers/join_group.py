"""JoinGroup (11): long poll until the group's rebalance completes; see crossbeat.broker.groups.

v4+ clients with an empty member id get MEMBER_ID_REQUIRED and a fresh id to rejoin with.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.consumer import JoinGroupResponse

from crossbeat.broker.handlers.context import Context

_Member = JoinGroupResponse.JoinGroupResponseMember


async def handle(ctx: Context, req: Any) -> Any:
    result = await ctx.broker.groups.join(
        group_id=req.group_id,
        member_id=req.member_id,
        group_instance_id=req.group_instance_id if ctx.version >= 5 else None,
        client_id=ctx.client_id or "",
        client_host=ctx.client_host,
        session_timeout_ms=req.session_timeout_ms,
        rebalance_timeout_ms=req.rebalance_timeout_ms if ctx.version >= 1 else -1,
        protocol_type=req.protocol_type,
        protocols=[(p.name, bytes(p.metadata)) for p in req.protocols],
        require_known_member=ctx.version >= 4,
    )
    return JoinGroupResponse(
        throttle_time_ms=0,
        error_code=int(result.error),
        generation_id=result.generation_id,
        protocol_name=result.protocol_name or "",
        leader=result.leader,
        member_id=result.member_id,
        members=[_Member(member_id=mid, group_instance_id=iid, metadata=meta)
                 for mid, iid, meta in result.members],
    )
