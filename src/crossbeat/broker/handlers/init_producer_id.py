"""InitProducerId (22): a fresh producer id (epoch 0) for an idempotent producer.

Transactional ids are refused: this broker has no transaction coordinator. Clients never
get here with one (their coordinator lookup already fails, see find_coordinator.py); one
that does gets the same TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53), which librdkafka and
kafka-python treat as fatal (INVALID_REQUEST, answered before, librdkafka retried until its
timeout).
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
        return InitProducerIdResponse(
            throttle_time_ms=0, error_code=int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
            producer_id=-1, producer_epoch=-1)
    try:
        pid = await ctx.broker.producer_ids.allocate()
    except OSError as exc:
        log.error("cannot reserve producer ids: %s", exc)
        return InitProducerIdResponse(throttle_time_ms=0,
                                      error_code=int(ErrorCode.UNKNOWN_SERVER_ERROR),
                                      producer_id=-1, producer_epoch=-1)
    return InitProducerIdResponse(throttle_time_ms=0, error_code=0, producer_id=pid,
                                  producer_epoch=0)
