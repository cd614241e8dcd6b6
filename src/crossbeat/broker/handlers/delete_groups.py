"""DeleteGroups (42): forget Empty groups and, durably, their committed offsets.

Per group: an empty id is INVALID_GROUP_ID; a group with members (or rebalancing) is
NON_EMPTY_GROUP; a group neither in the coordinator nor with committed offsets is
GROUP_ID_NOT_FOUND; otherwise the group is deleted and answered NONE only once its
offsets' removal is fsynced (UNKNOWN_SERVER_ERROR if that write fails). A name given twice
gets one result, as in Kafka (its response is keyed by group id).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from kafka.protocol.admin import DeleteGroupsResponse

from crossbeat.broker.errors import ErrorCode
from crossbeat.broker.handlers.context import Context

log = logging.getLogger(__name__)

_Result = DeleteGroupsResponse.DeletableGroupResult


async def handle(ctx: Context, req: Any) -> Any:
    broker = ctx.broker
    committed = set(broker.offsets.groups())
    results: dict[str, ErrorCode] = {}
    # decide every group before the first await, so that no join can slip in between
    for group_id in req.groups_names:
        if group_id in results:
            continue
        if not group_id:
            results[group_id] = ErrorCode.INVALID_GROUP_ID
            continue
        results[group_id] = broker.groups.delete(group_id, has_offsets=group_id in committed)
    dropping = [g for g, code in results.items() if code is ErrorCode.NONE and g in committed]
    # one fsync round for all of them (the offset store batches concurrent writes)
    outcomes = await asyncio.gather(*(broker.offsets.drop_group(g) for g in dropping),
                                    return_exceptions=True)
    for group_id, outcome in zip(dropping, outcomes, strict=True):
        if isinstance(outcome, BaseException):
            log.error("group %s: dropping its offsets failed: %s", group_id, outcome)
            results[group_id] = ErrorCode.UNKNOWN_SERVER_ERROR
    return DeleteGroupsResponse(
        throttle_time_ms=0,
        results=[_Result(group_id=g, error_code=int(c)) for g, c in results.items()],
    )
