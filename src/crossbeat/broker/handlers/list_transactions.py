"""ListTransactions (66), v0-v1: the transactional ids this coordinator knows, with
producer id and state, filtered as Kafka's TransactionStateManager filters them: by state
names (names Kafka does not know are echoed in unknown_state_filters and match nothing),
by producer ids, and (v1) by duration: only transactions whose start time is more than
`duration_filter` ms ago (an Empty id, start time -1, always passes, as in Kafka). Empty
filters match everything. v2's transactional id pattern is not served (Kafka's are Java
regular expressions)."""

from __future__ import annotations

import time
from typing import Any

from kafka.protocol.admin import ListTransactionsResponse

from crossbeat.broker.handlers.context import Context

_Listed = ListTransactionsResponse.TransactionState

# Kafka's TransactionState names; Dead (an id being expired) and PrepareEpochFence (a
# transient step of fencing) are known as filters but never listed by this broker
KNOWN_STATES = frozenset({"Empty", "Ongoing", "PrepareCommit", "PrepareAbort",
                          "CompleteCommit", "CompleteAbort", "Dead", "PrepareEpochFence"})


async def handle(ctx: Context, req: Any) -> Any:
    states = set(req.state_filters)
    unknown = [s for s in req.state_filters if s not in KNOWN_STATES]
    pids = set(req.producer_id_filters)
    duration = req.duration_filter if ctx.version >= 1 else -1
    now = int(time.time() * 1000)
    listed = [
        _Listed(transactional_id=txn.tid, producer_id=txn.pid, transaction_state=txn.state)
        for txn in sorted(ctx.broker.txns.all(), key=lambda t: t.tid)
        if (not pids or txn.pid in pids)
        and (not states or txn.state in states)
        and (duration < 0 or now - txn.start_ms > duration)
    ]
    return ListTransactionsResponse(throttle_time_ms=0, error_code=0,
                                    unknown_state_filters=unknown, transaction_states=listed)
