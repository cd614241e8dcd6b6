"""OffsetDelete (47): durably delete a group's committed offsets of some partitions.

The group is judged as Kafka's coordinator does (`offset_delete_scope`): an empty id is
INVALID_GROUP_ID, an unknown group GROUP_ID_NOT_FOUND and a classic group with members that
is not a consumer group NON_EMPTY_GROUP, for the whole request. Otherwise each partition of
a topic a live member subscribes to is GROUP_SUBSCRIBED_TO_TOPIC, of an unknown topic
UNKNOWN_TOPIC_OR_PARTITION, and every other one NONE (whether or not it had an offset) once
the removal is fsynced. A write failure is UNKNOWN_SERVER_ERROR for the request.
"""

from __future__ import annotations

import logging
from typing import Any

from kafka.protocol.consumer import OffsetDeleteResponse

from crossbeat.broker.errors import ErrorCode
from crossbeat.broker.groups.subscriptions import offset_delete_scope
from crossbeat.broker.handlers.context import Context
from crossbeat.broker.offsets import Entry

log = logging.getLogger(__name__)

_Topic = OffsetDeleteResponse.OffsetDeleteResponseTopic
_Partition = _Topic.OffsetDeleteResponsePartition


def _failed(code: ErrorCode) -> Any:
    return OffsetDeleteResponse(error_code=int(code), throttle_time_ms=0, topics=[])


async def handle(ctx: Context, req: Any) -> Any:
    broker = ctx.broker
    if not req.group_id:
        return _failed(ErrorCode.INVALID_GROUP_ID)
    committed = broker.offsets.group_offsets(req.group_id)
    counts = broker.topics.partition_counts()
    # decided before the first await, so that no member can join in between
    code, subscribed = offset_delete_scope(broker.groups, req.group_id, counts,
                                           has_offsets=bool(committed))
    if code is not ErrorCode.NONE:
        return _failed(code)
    tombstones: list[Entry] = []
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            if t.name not in counts:
                part_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif t.name in subscribed:
                part_code = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
            else:
                part_code = ErrorCode.NONE
                if (t.name, p.partition_index) in committed:
                    tombstones.append((t.name, p.partition_index, None, -1, None))
            parts.append(_Partition(partition_index=p.partition_index, error_code=int(part_code)))
        topics.append(_Topic(name=t.name, partitions=parts))
    if tombstones:
        try:
            await broker.offsets.commit(req.group_id, tombstones)
        except OSError as exc:
            log.error("group %s: deleting offsets failed: %s", req.group_id, exc)
            return _failed(ErrorCode.UNKNOWN_SERVER_ERROR)
    return OffsetDeleteResponse(error_code=0, throttle_time_ms=0, topics=topics)
