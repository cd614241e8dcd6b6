"""EndTxn (26), v0-v3: commit or abort a producer's transaction. Answered once the
COMMIT/ABORT markers are durable in every partition of the transaction and (commit) its
staged offsets are committed to their groups (see `TxnCoordinator.end_txn`).
PRODUCER_FENCED is INVALID_PRODUCER_EPOCH before v2, as in Kafka."""

from __future__ import annotations

from typing import Any

from kafka.protocol.producer.transaction import EndTxnResponse

from crossbeat.broker.handlers.add_partitions_to_txn import fenced_code
from crossbeat.broker.handlers.context import Context


async def handle(ctx: Context, req: Any) -> Any:
    code = await ctx.broker.txns.end_txn(req.transactional_id, req.producer_id,
                                         req.producer_epoch, bool(req.committed))
    return EndTxnResponse(throttle_time_ms=0, error_code=fenced_code(code, ctx.version),
                          producer_id=-1, producer_epoch=-1)
