"""DescribeTransactions (65), v0: each transactional id's state (Kafka's names: Empty,
Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort), producer id and
epoch, timeout, start time (-1 while Empty) and the partitions of its open transaction (none
once complete). An id this coordinator does not know is TRANSACTIONAL_ID_NOT_FOUND, an
empty one INVALID_REQUEST, as Kafka's TransactionCoordinator answers them."""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import DescribeTransactionsResponse

from crossbeat.broker.errors import ErrorCode
from crossbeat.broker.handlers.context import Context

_State = DescribeTransactionsResponse.TransactionState
_Topic = _State.TopicData


def _describe(ctx: Context, tid: str) -> Any:
    txn = ctx.broker.txns.get(tid) if tid else None
    if txn is None:
        code = ErrorCode.TRANSACTIONAL_ID_NOT_FOUND if tid else ErrorCode.INVALID_REQUEST
        return _State(error_code=int(code), transactional_id=tid, transaction_state="",
                      transaction_timeout_ms=0, transaction_start_time_ms=0, producer_id=0,
                      producer_epoch=0, topics=[])  # the schema's defaults, as Kafka sends
    by_topic: dict[str, list[int]] = {}
    for topic, index in sorted(txn.partitions):
        by_topic.setdefault(topic, []).append(index)
    return _State(error_code=0, transactional_id=tid, transaction_state=txn.state,
                  transaction_timeout_ms=txn.timeout_ms, transaction_start_time_ms=txn.start_ms,
                  producer_id=txn.pid, producer_epoch=txn.epoch,
                  topics=[_Topic(topic=t, partitions=ps) for t, ps in by_topic.items()])


async def handle(ctx: Context, req: Any) -> Any:
    return DescribeTransactionsResponse(
        throttle_time_ms=0,
        transaction_states=[_describe(ctx, tid) for tid in req.transactional_ids])
