"""TxnOffsetCommit (28), v0-v3: stage a group's offsets in a producer's transaction (its
group added by AddOffsetsToTxn); the group gets them only when the transaction commits.
v3 carries the consumer's generation (a KIP-848 member's epoch) and member id, fenced as
OffsetCommit's are. A
producer with an older epoch gets INVALID_PRODUCER_EPOCH, as Kafka's group coordinator
answers."""

from __future__ import annotations

from typing import Any

from kafka.protocol.producer.transaction import TxnOffsetCommitResponse

from crossbeat.broker.errors import ErrorCode
from crossbeat.broker.handlers.context import Context
from crossbeat.broker.handlers.offset_commit import MAX_METADATA, OFFSET_METADATA_TOO_LARGE
from crossbeat.broker.offsets import Entry

_Topic = TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic
_Partition = _Topic.TxnOffsetCommitResponsePartition


async def handle(ctx: Context, req: Any) -> Any:
    broker = ctx.broker
    code = ErrorCode.NONE
    if not req.group_id:
        code = ErrorCode.INVALID_GROUP_ID
    elif ctx.version >= 3 and (req.generation_id >= 0 or req.member_id):
        code = broker.groups.check_commit(req.group_id, req.generation_id, req.member_id,
                                          req.group_instance_id)
    entries: list[Entry] = []
    per_partition: dict[tuple[str, int], int] = {}
    for topic in req.topics:
        for p in topic.partitions:
            key = (topic.name, p.partition_index)
            if broker.topics.partition(*key) is None:
                per_partition[key] = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            elif p.committed_metadata is not None and len(p.committed_metadata) > MAX_METADATA:
                per_partition[key] = OFFSET_METADATA_TOO_LARGE
            else:
                epoch = p.committed_leader_epoch if ctx.version >= 2 else -1
                entries.append((*key, p.committed_offset, epoch, p.committed_metadata))
                per_partition[key] = 0
    if not code and entries:
        code = await broker.txns.stage_offsets(req.transactional_id, req.producer_id,
                                               req.producer_epoch, req.group_id, entries)
        if code == ErrorCode.PRODUCER_FENCED:
            code = ErrorCode.INVALID_PRODUCER_EPOCH
    by_topic: dict[str, list[Any]] = {}
    for (name, index), own in per_partition.items():
        by_topic.setdefault(name, []).append(
            _Partition(partition_index=index, error_code=own or int(code)))
    return TxnOffsetCommitResponse(
        throttle_time_ms=0,
        topics=[_Topic(name=n, partitions=ps) for n, ps in by_topic.items()])
