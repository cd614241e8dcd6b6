"""OffsetFetch (9): committed offsets (-1 when none), with leader epoch and metadata."""

from __future__ import annotations

from typing import Any

from kafka.protocol.consumer import OffsetFetchResponse

from crossbeat.broker.handlers.context import Context

_Topic = OffsetFetchResponse.OffsetFetchResponseTopic
_Partition = _Topic.OffsetFetchResponsePartition


async def handle(ctx: Context, req: Any) -> Any:
    committed = ctx.broker.offsets.group_offsets(req.group_id)
    wanted: dict[str, list[int]] = {}
    if req.topics is None:  # v2+: every partition the group committed
        for topic, partition in sorted(committed):
            wanted.setdefault(topic, []).append(partition)
    else:
        for t in req.topics:
            wanted[t.name] = list(t.partition_indexes)
    topics = []
    for name, partitions in wanted.items():
        entries = []
        for index in partitions:
            c = committed.get((name, index))
            entries.append(_Partition(
                partition_index=index,
                committed_offset=c.offset if c else -1,
                committed_leader_epoch=c.leader_epoch if c else -1,
                metadata=(c.metadata if c else "") or "",
                error_code=0,
            ))
        topics.append(_Topic(name=name, partitions=entries))
    return OffsetFetchResponse(throttle_time_ms=0, topics=topics, error_code=0)
