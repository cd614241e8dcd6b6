"""OffsetForLeaderEpoch (23): where a leader epoch ended, so that a consumer can check its
position after the epoch changed (KIP-320). librdkafka sends it once Metadata v9+ makes it
trust leader epochs, when a partition's epoch moves while it fetches from a position that
carries one.

A partition's epochs are its ranges' indexes (see topics.leader_epoch); epoch e began at
its range's start offset, and the current epoch ends at the high watermark. The answer
follows Kafka's LeaderEpochFileCache.endOffsetFor; a current_leader_epoch other than ours
is FENCED_LEADER_EPOCH (older) or UNKNOWN_LEADER_EPOCH (newer).
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.consumer import OffsetForLeaderEpochResponse

from crossbeat.broker.errors import ErrorCode
from crossbeat.broker.handlers.context import Context
from crossbeat.broker.topics import leader_epoch
from crossbeat.stream.placement import RangeInfo

_Topic = OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult
_Partition = _Topic.EpochEndOffset
UNDEFINED = (-1, -1)


def end_offset_for(ranges: list[RangeInfo], end_offset: int, requested: int) -> tuple[int, int]:
    """(epoch, end offset) for `requested`: the largest epoch not above it and the offset
    where the next epoch begins (`end_offset` for the current epoch); (-1, -1) for an
    undefined or future epoch; an epoch older than every range kept is answered as itself,
    ending where the first kept range begins."""
    latest = ranges[-1].index
    if requested < 0 or requested > latest:
        return UNDEFINED
    if requested == latest:
        return latest, end_offset
    floor = None
    for r in ranges:
        if r.index > requested:
            return (floor.index if floor is not None else requested), r.start_offset
        floor = r
    return UNDEFINED  # not reached: the last range is above `requested`


async def handle(ctx: Context, req: Any) -> Any:
    topics = ctx.broker.topics
    out = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            stream = topics.partition(t.topic, p.partition)
            code, (epoch, offset) = ErrorCode.NONE, UNDEFINED
            if stream is None:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif 0 <= p.current_leader_epoch < leader_epoch(stream):
                code = ErrorCode.FENCED_LEADER_EPOCH
            elif p.current_leader_epoch > leader_epoch(stream):
                code = ErrorCode.UNKNOWN_LEADER_EPOCH
            else:
                epoch, offset = end_offset_for(stream.ranges, stream.end_offset, p.leader_epoch)
            parts.append(_Partition(error_code=int(code), partition=p.partition,
                                    leader_epoch=epoch, end_offset=offset))
        out.append(_Topic(topic=t.topic, partitions=parts))
    return OffsetForLeaderEpochResponse(throttle_time_ms=0, topics=out)
