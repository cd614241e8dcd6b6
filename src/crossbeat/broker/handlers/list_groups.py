"""ListGroups (16): groups with members or with committed offsets, with their state (v4+)
and type (v5+: "classic", or "consumer" for KIP-848 groups).

A group known only by its committed offsets (after a restart, or one that only committed)
is listed Empty, classic, with protocol type 'consumer': every group that commits through
us is a consumer group, and a restart loses what the coordinator held. v4's states filter
and v5's types filter are matched case-insensitively (as Kafka 4's coordinator does);
empty means all.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import ListGroupsResponse

from crossbeat.broker.groups import GroupState
from crossbeat.broker.handlers.context import Context

_Listed = ListGroupsResponse.ListedGroup


async def handle(ctx: Context, req: Any) -> Any:
    seen: dict[str, tuple[str, str, str]] = {}  # group id -> (protocol type, state, type)
    for group_id in ctx.broker.offsets.groups():
        seen[group_id] = ("consumer", GroupState.EMPTY.value, "classic")
    for group_id, group in ctx.broker.groups.groups.items():
        if group.members or group_id in seen:
            seen[group_id] = (group.protocol_type or "consumer", group.state.value, "classic")
    for group_id, cgroup in ctx.broker.groups.consumer.groups.items():
        if cgroup.members or group_id in seen:
            seen[group_id] = ("consumer", cgroup.state, "consumer")
    states = {s.lower() for s in req.states_filter} if ctx.version >= 4 else set()
    types = {t.lower() for t in req.types_filter} if ctx.version >= 5 else set()
    return ListGroupsResponse(
        throttle_time_ms=0, error_code=0,
        groups=[_Listed(group_id=g, protocol_type=p, group_state=state, group_type=kind)
                for g, (p, state, kind) in sorted(seen.items())
                if (not states or state.lower() in states) and (not types or kind in types)],
    )
