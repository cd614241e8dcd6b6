"""AddOffsetsToTxn (25), v0-v3: add a consumer group to a producer's transaction, so that
offsets it stages with TxnOffsetCommit are committed (or dropped) with the transaction.
PRODUCER_FENCED is INVALID_PRODUCER_EPOCH before v2, as in Kafka."""

from __future__ import annotations

from typing import Any

from kafka.protocol.producer.transaction import AddOffsetsToTxnResponse

from crossbeat.broker.handlers.add_partitions_to_txn import fenced_code
from crossbeat.broker.handlers.context import Context


async def handle(ctx: Context, req: Any) -> Any:
    code = await ctx.broker.txns.add_offsets(req.transactional_id, req.producer_id,
                                             req.producer_epoch, req.group_id)
    return AddOffsetsToTxnResponse(throttle_time_ms=0,
                                   error_code=fenced_code(code, ctx.version))
