"""AddPartitionsToTxn (24), v0-v3: add partitions to a producer's transaction (starting
it); a transactional batch is accepted only for a partition added this way. Errors come per
partition (see `TxnCoordinator.add_partitions`); PRODUCER_FENCED is INVALID_PRODUCER_EPOCH
before v2, as in Kafka. v4+ (the broker-to-broker batch form) is not answered."""

from __future__ import annotations

from typing import Any

from kafka.protocol.producer.transaction import AddPartitionsToTxnResponse

from crossbeat.broker.errors import ErrorCode
from crossbeat.broker.handlers.context import Context

_Topic = AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult
_Partition = _Topic.AddPartitionsToTxnPartitionResult


def fenced_code(code: ErrorCode, version: int, since: int = 2) -> int:
    """PRODUCER_FENCED as request versions before `since` know it: INVALID_PRODUCER_EPOCH."""
    if code == ErrorCode.PRODUCER_FENCED and version < since:
        return int(ErrorCode.INVALID_PRODUCER_EPOCH)
    return int(code)


async def handle(ctx: Context, req: Any) -> Any:
    wanted = [(t.name, p) for t in req.v3_and_below_topics for p in t.partitions]
    codes = await ctx.broker.txns.add_partitions(
        req.v3_and_below_transactional_id, req.v3_and_below_producer_id,
        req.v3_and_below_producer_epoch, wanted)
    by_topic: dict[str, list[Any]] = {}
    for (name, index), code in codes.items():
        by_topic.setdefault(name, []).append(_Partition(
            partition_index=index, partition_error_code=fenced_code(code, ctx.version)))
    return AddPartitionsToTxnResponse(
        throttle_time_ms=0,
        results_by_topic_v3_and_below=[_Topic(name=n, results_by_partition=ps)
                                       for n, ps in by_topic.items()])
