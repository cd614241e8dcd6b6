"""OffsetFetch (9): committed offsets (-1 when none), with leader epoch and metadata.

v8+ asks for several groups at once and answers per group; v9 adds the member id and
epoch of a KIP-848 consumer-group member, fenced as its commits are (UNKNOWN_MEMBER_ID,
STALE_MEMBER_EPOCH: the group's error, with no offsets). A fetch without a member (null
member id and epoch -1: tools, classic consumers, and librdkafka's own consumer-protocol
fetches) is never fenced, as in Kafka's ConsumerGroup.validateOffsetFetch.

v7+ `require_stable` (librdkafka sets it for read_committed consumers): a partition whose
offset an open transaction has staged (TxnOffsetCommit, transaction not yet complete)
answers UNSTABLE_OFFSET_COMMIT with offset -1, as Kafka does, so that the consumer retries
instead of starting from an offset the transaction is about to replace. Without it the
committed offset is answered as usual.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.consumer import OffsetFetchResponse

from crossbeat.broker.errors import ErrorCode
from crossbeat.broker.handlers.context import Context

_Topic = OffsetFetchResponse.OffsetFetchResponseTopic
_Partition = _Topic.OffsetFetchResponsePartition
_Group = OffsetFetchResponse.OffsetFetchResponseGroup
_GroupTopic = _Group.OffsetFetchResponseTopics
_GroupPartition = _GroupTopic.OffsetFetchResponsePartitions


def _offsets(ctx: Context, group_id: str, topics: list[Any] | None, require_stable: bool,
             topic_cls: Any, partition_cls: Any) -> list[Any]:
    """The committed offsets of `topics` (None: every partition the group committed)."""
    committed = ctx.broker.offsets.group_offsets(group_id)
    unstable = ctx.broker.txns.pending_offsets(group_id) if require_stable else set()
    wanted: dict[str, list[int]] = {}
    if topics is None:
        for topic, partition in sorted(committed):
            wanted.setdefault(topic, []).append(partition)
    else:
        for t in topics:
            wanted[t.name] = list(t.partition_indexes)
    out = []
    for name, partitions in wanted.items():
        entries = []
        for index in partitions:
            if (name, index) in unstable:
                entries.append(partition_cls(
                    partition_index=index, committed_offset=-1, committed_leader_epoch=-1,
                    metadata="", error_code=int(ErrorCode.UNSTABLE_OFFSET_COMMIT)))
                continue
            c = committed.get((name, index))
            entries.append(partition_cls(
                partition_index=index,
                committed_offset=c.offset if c else -1,
                committed_leader_epoch=c.leader_epoch if c else -1,
                metadata=(c.metadata if c else "") or "",
                error_code=0,
            ))
        out.append(topic_cls(name=name, partitions=entries))
    return out


async def handle(ctx: Context, req: Any) -> Any:
    stable = ctx.version >= 7 and bool(req.require_stable)
    if ctx.version < 8:
        return OffsetFetchResponse(throttle_time_ms=0, error_code=0, topics=_offsets(
            ctx, req.group_id, req.topics, stable, _Topic, _Partition))
    groups = []
    for g in req.groups:
        error = ErrorCode.NONE
        fenced = ctx.version >= 9 and not (g.member_id is None and g.member_epoch < 0)
        if fenced and g.group_id in ctx.broker.groups.consumer.groups:
            error = ctx.broker.groups.consumer.check_member(g.group_id, g.member_id,
                                                           g.member_epoch)
        topics = [] if error else _offsets(ctx, g.group_id, g.topics, stable, _GroupTopic,
                                           _GroupPartition)
        groups.append(_Group(group_id=g.group_id, topics=topics, error_code=int(error)))
    return OffsetFetchResponse(throttle_time_ms=0, groups=groups)
