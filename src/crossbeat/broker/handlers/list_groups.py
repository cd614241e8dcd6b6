"""ListGroups (16): groups with members or with committed offsets."""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import ListGroupsResponse

from crossbeat.broker.handlers.context import Context

_Listed = ListGroupsResponse.ListedGroup


async def handle(ctx: Context, req: Any) -> Any:
    seen: dict[str, str] = {}
    for group_id in ctx.broker.offsets.groups():
        seen[group_id] = "consumer"
    for group_id, group in ctx.broker.groups.groups.items():
        if group.members or group_id in seen:
            seen[group_id] = group.protocol_type or seen.get(group_id, "consumer")
    return ListGroupsResponse(
        throttle_time_ms=0, error_code=0,
        groups=[_Listed(group_id=g, protocol_type=t) for g, t in sorted(seen.items())],
    )
