"""InitProducerId (22): a producer id and epoch.

Without a transactional id: a fresh producer id, epoch 0 (an idempotent producer). With
one: the transaction coordinator's answer (`TxnCoordinator.init_producer_id`): a new id
for a new transactional id, else its producer id with the epoch bumped, which fences the
previous producer and aborts its open transaction; a timeout above the broker's maximum is
INVALID_TRANSACTION_TIMEOUT.

v3+ (KIP-360) carries the producer's current id and epoch, so that a transactional
producer recovering from an abortable error gets a bumped epoch instead of being fenced
(see `TxnCoordinator.init_producer_id`); a stale one is PRODUCER_FENCED, which v3 (older
than that code) gets as INVALID_PRODUCER_EPOCH, as Kafka answers it. An idempotent
producer (no transactional id) always gets a fresh producer id, as in Kafka.
"""

from __future__ import annotations

import logging
from typing import Any

from kafka.protocol.producer import InitProducerIdResponse

from crossbeat.broker.errors import ErrorCode
from crossbeat.broker.handlers.context import Context

log = logging.getLogger(__name__)


async def handle(ctx: Context, req: Any) -> Any:
    if req.transactional_id is not None:
        expected = (req.producer_id, req.producer_epoch) if ctx.version >= 3 else (-1, -1)
        code, pid, epoch = await ctx.broker.txns.init_producer_id(
            req.transactional_id, req.transaction_timeout_ms, expected)
        if code == ErrorCode.PRODUCER_FENCED and ctx.version < 4:
            code = ErrorCode.INVALID_PRODUCER_EPOCH
        return InitProducerIdResponse(throttle_time_ms=0, error_code=int(code),
                                      producer_id=pid, producer_epoch=epoch)
    try:
        pid = await ctx.broker.producer_ids.allocate()
    except OSError as exc:
        log.error("cannot reserve producer ids: %s", exc)
        return InitProducerIdResponse(throttle_time_ms=0,
                                      error_code=int(ErrorCode.UNKNOWN_SERVER_ERROR),
                                      producer_id=-1, producer_epoch=-1)
    return InitProducerIdResponse(throttle_time_ms=0, error_code=0, producer_id=pid,
                                  producer_epoch=0)
