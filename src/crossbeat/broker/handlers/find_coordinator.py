"""FindCoordinator (10): this broker coordinates every group (key type 0).

It has no transaction coordinator, and a transactional producer must fail at once with a
reason, not retry until its timeout. A transaction coordinator lookup (key type 1) is
therefore answered TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53) with `NO_TRANSACTIONS`
as its error message. Why that code, as the clients behave:

- librdkafka (2.x) retries every FindCoordinator error for a transaction coordinator
  except this one, which it raises as a fatal error whose text includes our message:
  ``init_transactions()`` fails within a round trip with "Failed to find transaction
  coordinator: …: Transactional Id authorization failed: transactions are not supported…".
- kafka-python (3.x) retries retriable errors (COORDINATOR_NOT_AVAILABLE, which we used to
  answer, made both clients wait out their timeout with a vague timeout error) and treats
  the others as fatal; for this one ``init_transactions()`` raises
  TransactionalIdAuthorizationFailedError at once (it does not show the message).
- Not advertising the transaction APIs in ApiVersions changes nothing: neither client
  checks for them before looking up the coordinator. Refusing InitProducerId outright is
  not possible: idempotent producers need it (it answers a transactional id with the same
  code, see init_producer_id.py, for a client that asks without looking up a coordinator).
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.metadata import FindCoordinatorResponse

from crossbeat.broker.errors import ErrorCode
from crossbeat.broker.handlers.context import Context

NO_TRANSACTIONS = ("transactions are not supported by this broker: unset transactional.id "
                   "(an idempotent producer, enable.idempotence, needs no transactions)")


async def handle(ctx: Context, req: Any) -> Any:
    b = ctx.broker
    if ctx.version >= 1 and req.key_type != 0:
        return FindCoordinatorResponse(
            throttle_time_ms=0, error_code=int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
            error_message=NO_TRANSACTIONS, node_id=-1, host="", port=-1,
        )
    return FindCoordinatorResponse(throttle_time_ms=0, error_code=0, error_message=None,
                                   node_id=b.node_id, host=b.host, port=b.port)
