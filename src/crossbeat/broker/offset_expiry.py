"""Expiry of committed offsets (Kafka's offsets.retention.minutes, KIP-211), and the end
of groups left with neither members nor offsets.

An offset of an Empty group expires `retention_ms` after the later of its commit and the
moment its group last became Empty (as the offset store noted it, so it survives a
restart); for a group never noted (only standalone commits, or an older log) it expires
`retention_ms` after its commit. Offsets of a group with members, or mid-rebalance, never
expire. Kafka counts only from the Empty time when it knows one; counting from the later
of the two also means an offset committed into a long-Empty group lives a full retention
rather than vanishing at the next check. An Empty group without offsets is then Dead:
the coordinator forgets it (ListGroups no longer lists it, DescribeGroups says Dead).
Classic and KIP-848 consumer groups alike.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from crossbeat.broker.groups import GroupCoordinator
from crossbeat.broker.offsets import CommittedOffset, Entry, Key, OffsetStore

log = logging.getLogger(__name__)


@dataclass
class ExpiryResult:
    """What one pass did: offsets expired per group, and the groups that ended (Dead)."""

    expired: dict[str, list[Key]] = field(default_factory=dict)
    dead: list[str] = field(default_factory=list)


def expired_offsets(offsets: Mapping[Key, CommittedOffset], empty_since: int | None,
                    now_ms: int, retention_ms: int) -> list[Key]:
    """The partitions of an Empty group whose offsets have expired at `now_ms`."""
    return [key for key, c in offsets.items()
            if now_ms - max(c.commit_ms, empty_since or 0) >= retention_ms]


async def expire_offsets(groups: GroupCoordinator, offsets: OffsetStore, retention_ms: int,
                         now_ms: int | None = None) -> ExpiryResult:
    """Durably remove expired offsets, then forget Empty groups with no offsets left.

    A group with a commit or note still being written is left for the next pass: what is
    visible of it is not yet its last word, and a tombstone queued behind a fresh commit
    would erase it. Write errors are logged; the offsets then stay until a later pass.
    """
    now = int(time.time() * 1000) if now_ms is None else now_ms
    result = ExpiryResult()
    # decided before the first await, so no commit or join can slip in between
    for group_id in offsets.groups():
        if (not groups.is_empty(group_id) or offsets.has_members(group_id)
                or offsets.has_pending(group_id)):
            continue
        keys = expired_offsets(offsets.group_offsets(group_id), offsets.empty_since(group_id),
                               now, retention_ms)
        if keys:
            result.expired[group_id] = keys
    writes = [offsets.commit(g, [_tombstone(k) for k in keys])
              for g, keys in result.expired.items()]
    outcomes = await asyncio.gather(*writes, return_exceptions=True)  # one fsync round
    for group_id, outcome in zip(list(result.expired), outcomes, strict=True):
        if isinstance(outcome, BaseException):
            log.error("group %s: expiring offsets failed: %s", group_id, outcome)
            del result.expired[group_id]
        else:
            log.info("group %s: %d committed offset(s) expired", group_id,
                     len(result.expired[group_id]))
    committed = set(offsets.groups())
    for group_id in [*groups.groups, *groups.consumer.groups]:  # both kinds of group
        if (group_id not in committed and not offsets.has_pending(group_id)
                and groups.forget_if_empty(group_id)):
            result.dead.append(group_id)
    return result


def _tombstone(key: Key) -> Entry:
    topic, partition = key
    return (topic, partition, None, -1, None)
