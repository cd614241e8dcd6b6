"""DescribeGroups (15): state, protocol and members of each classic group. A KIP-848
consumer group is GROUP_ID_NOT_FOUND here, as in Kafka ("not a classic group")."""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import DescribeGroupsResponse

from crossbeat.broker.errors import ErrorCode
from crossbeat.broker.groups import GroupState
from crossbeat.broker.handlers.context import Context

_Group = DescribeGroupsResponse.DescribedGroup
_Member = _Group.DescribedGroupMember


async def handle(ctx: Context, req: Any) -> Any:
    coordinator = ctx.broker.groups
    offsets = ctx.broker.offsets
    out = []
    for group_id in req.groups:
        if group_id in coordinator.consumer.groups:
            out.append(_Group(error_code=int(ErrorCode.GROUP_ID_NOT_FOUND), group_id=group_id,
                              group_state="", protocol_type="", protocol_data="", members=[],
                              authorized_operations=None))
            continue
        group = coordinator.groups.get(group_id)
        if group is None:
            state = "Empty" if group_id in offsets.groups() else "Dead"
            out.append(_Group(error_code=0, group_id=group_id, group_state=state,
                              protocol_type="", protocol_data="", members=[],
                              authorized_operations=None))
            continue
        stable = group.state is GroupState.STABLE
        members = [
            _Member(member_id=m.member_id, group_instance_id=m.group_instance_id,
                    client_id=m.client_id, client_host=m.client_host,
                    member_metadata=m.metadata_for(group.protocol_name or "") if stable else b"",
                    member_assignment=m.assignment if stable else b"")
            for m in group.members.values()
        ]
        out.append(_Group(error_code=0, group_id=group_id, group_state=group.state.value,
                          protocol_type=group.protocol_type or "",
                          protocol_data=group.protocol_name or "", members=members,
                          authorized_operations=None))
    return DescribeGroupsResponse(throttle_time_ms=0, groups=out)
