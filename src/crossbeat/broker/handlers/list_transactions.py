"""ListTransactions (66), v0-v2: the transactional ids this coordinator knows, with
producer id and state, filtered as Kafka's TransactionStateManager filters them: by state
names (names Kafka does not know are echoed in unknown_state_filters and match nothing),
by producer ids, (v1) by duration: only transactions whose start time is more than
`duration_filter` ms ago (an Empty id, start time -1, always passes, as in Kafka), and (v2,
KIP-1152) by a regular expression the whole transactional id must match (Kafka compiles a
Java one; Python's `re` reads the common forms the same). Empty filters match everything;
a pattern that does not compile is INVALID_REGULAR_EXPRESSION."""

from __future__ import annotations

import re
import time
from typing import Any

from kafka.protocol.admin import ListTransactionsResponse

from crossbeat.broker.errors import ErrorCode
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
    text = req.transactional_id_pattern if ctx.version >= 2 else None
    pattern = None
    if text:
        try:
            pattern = re.compile(text)
        except re.error:
            return ListTransactionsResponse(
                throttle_time_ms=0, error_code=int(ErrorCode.INVALID_REGULAR_EXPRESSION),
                unknown_state_filters=[], transaction_states=[])
    now = int(time.time() * 1000)
    listed = [
        _Listed(transactional_id=txn.tid, producer_id=txn.pid, transaction_state=txn.state)
        for txn in sorted(ctx.broker.txns.all(), key=lambda t: t.tid)
        if (not pids or txn.pid in pids)
        and (not states or txn.state in states)
        and (duration < 0 or now - txn.start_ms > duration)
        and (pattern is None or pattern.fullmatch(txn.tid) is not None)
    ]
    return ListTransactionsResponse(throttle_time_ms=0, error_code=0,
                                    unknown_state_filters=unknown, transaction_states=listed)
