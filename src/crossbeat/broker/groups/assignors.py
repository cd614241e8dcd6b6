"""Server-side assignors of the KIP-848 consumer group protocol: `uniform` (the default) and
`range`, as a member names them in ConsumerGroupHeartbeat's ServerAssignor.

An assignor maps members to partitions. Its input is each member's subscribed topics (only
topics that exist), every topic's partition count, and the current target assignment (for
stickiness); its output gives every partition of a subscribed topic to exactly one member
subscribed to that topic, and nothing else. Both are pure functions of their input.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

TopicPartition = tuple[str, int]
Assignment = frozenset[TopicPartition]
Assignor = Callable[[Mapping[str, frozenset[str]], Mapping[str, int], Mapping[str, Assignment]],
                    dict[str, Assignment]]


def uniform(subscriptions: Mapping[str, frozenset[str]], partitions: Mapping[str, int],
            current: Mapping[str, Assignment]) -> dict[str, Assignment]:
    """Spread all partitions evenly over the members, moving as few as possible.

    With identical subscriptions the counts differ by at most one: each member first keeps
    what it has up to the floor of partitions/members (one more for as many members as the
    division leaves over), then the rest go one by one to the eligible member holding the
    fewest (ties: smallest member id), in (topic, partition) order. With differing
    subscriptions the same greedy pass balances as well as eligibility allows.
    """
    members = sorted(subscriptions)
    if not members:
        return {}
    every = sorted({(t, p) for subs in subscriptions.values() for t in subs
                    for p in range(partitions.get(t, 0))})
    floor, extra = divmod(len(every), len(members))
    taken: set[TopicPartition] = set()
    out: dict[str, set[TopicPartition]] = {m: set() for m in members}
    # members holding the most keep first, so that a departure does not shuffle the rest
    for m in sorted(members, key=lambda m: (-len(current.get(m, ())), m)):
        mine = sorted(tp for tp in current.get(m, ()) if tp[0] in subscriptions[m]
                      and tp[1] < partitions.get(tp[0], 0) and tp not in taken)
        keep = floor
        if extra and len(mine) > floor:
            keep, extra = floor + 1, extra - 1
        out[m].update(mine[:keep])
        taken.update(mine[:keep])
    for tp in every:
        if tp in taken:
            continue
        eligible = [m for m in members if tp[0] in subscriptions[m]]
        winner = min(eligible, key=lambda m: (len(out[m]), m))
        out[winner].add(tp)
    return {m: frozenset(tps) for m, tps in out.items()}


def range_(subscriptions: Mapping[str, frozenset[str]], partitions: Mapping[str, int],
           current: Mapping[str, Assignment]) -> dict[str, Assignment]:
    """Per topic, contiguous ranges of partitions to its subscribers in member id order
    (the first partitions % subscribers members get one more), so that members subscribed to
    co-partitioned topics get the same partition numbers of each. Not sticky."""
    out: dict[str, set[TopicPartition]] = {m: set() for m in subscriptions}
    topics = sorted({t for subs in subscriptions.values() for t in subs})
    for topic in topics:
        subscribers = sorted(m for m, subs in subscriptions.items() if topic in subs)
        count, extra = divmod(partitions.get(topic, 0), len(subscribers))
        start = 0
        for i, m in enumerate(subscribers):
            n = count + (1 if i < extra else 0)
            out[m].update((topic, p) for p in range(start, start + n))
            start += n
    return {m: frozenset(tps) for m, tps in out.items()}


ASSIGNORS: dict[str, Assignor] = {"uniform": uniform, "range": range_}
DEFAULT_ASSIGNOR = "uniform"
