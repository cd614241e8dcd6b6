"""Kafka's replica assignment (AdminUtils), exactly, plus pinning a copy on every site.

`assign_replicas` reproduces `kafka.admin.AdminUtils.assignReplicasToBrokers` (the code
`kafka-topics.sh --create` runs): the same broker ordering, the same round-robin with
follower shift, the same rack-alternated list and skip rule. With `start_index`/`shift`
fixed the output is reproducible; left out they are drawn at random in `[0, n)` as Kafka
does. `stable_draw` is a fixed stand-in for that draw, derived from a key (the planner uses
the topic name), so that every command computes the same assignment. This is the function
the stream store's placement driver reuses when a range's replicas spread over sites, so it
depends on nothing but the standard library.

Broker ids are plain ints and racks plain strings; the result maps each partition id to its
replica list, the first replica being the preferred leader.
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from collections.abc import Mapping

from crossbeat.topology.errors import PlacementError

Assignment = dict[int, list[int]]


def replica_index(first: int, shift: int, j: int, n: int) -> int:
    """Kafka's `replicaIndex`: the position of follower `j` after leader position `first`.

    The follower offset `1 + (shift + j) % (n - 1)` is never 0, so a follower never lands
    on the leader's position.
    """
    return (first + 1 + (shift + j) % (n - 1)) % n


def stable_draw(key: str, n: int) -> tuple[int, int]:
    """A (start index, shift) pair in `[0, n)` fixed by `key`, in place of Kafka's random draw.

    Derived from SHA-256, so it is the same on every run, machine and Python version;
    different keys spread their leaders as independent random draws would.
    """
    if n <= 0:
        raise PlacementError("no broker to draw a start index for")
    digest = hashlib.sha256(key.encode()).digest()
    return int.from_bytes(digest[:8], "big") % n, int.from_bytes(digest[8:16], "big") % n


def rack_alternated_list(racks: Mapping[int, str]) -> list[int]:
    """Brokers ordered one per rack in turn: racks sorted, each rack's brokers sorted.

    `{0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}` gives
    `[0, 3, 1, 5, 4, 2]` (Kafka's documented example).
    """
    by_rack: dict[str, list[int]] = {}
    for broker, rack in racks.items():
        by_rack.setdefault(rack, []).append(broker)
    queues = [sorted(by_rack[rack]) for rack in sorted(by_rack)]
    result: list[int] = []
    depth = 0
    while len(result) < len(racks):
        result.extend(queue[depth] for queue in queues if depth < len(queue))
        depth += 1
    return result


def assign_replicas(
    brokers: Mapping[int, str | None],
    partitions: int,
    replication_factor: int,
    *,
    rack_aware: bool = True,
    start_index: int | None = None,
    shift: int | None = None,
    start_partition: int = 0,
    rng: random.Random | None = None,
) -> Assignment:
    """Assign `partitions` partitions of `replication_factor` replicas over `brokers`.

    `brokers` maps broker id to rack (None: no `broker.rack`). With `rack_aware` (Kafka's
    default "enforced" mode) every broker must have a rack or none may; `rack_aware=False`
    ignores racks (`--disable-rack-aware`). `start_index` is Kafka's `fixedStartIndex`: it
    fixes the leader of partition `start_partition`'s position and, unless `shift` is given,
    the follower shift too (Kafka uses the one value for both). `start_partition` is the id
    of the first partition assigned (non-zero when adding partitions to a topic).

    Raises PlacementError where Kafka raises (bad counts, replication factor above the
    broker count, racks on only some brokers) and on negative indexes.
    """
    if partitions <= 0:
        raise PlacementError("number of partitions must be larger than 0")
    if replication_factor <= 0:
        raise PlacementError("replication factor must be larger than 0")
    if replication_factor > len(brokers):
        raise PlacementError(
            f"replication factor {replication_factor} larger than available brokers {len(brokers)}"
        )
    for name, value in (("start_index", start_index), ("shift", shift)):
        if value is not None and value < 0:
            raise PlacementError(f"{name} must be >= 0, got {value}")
    if start_partition < 0:
        raise PlacementError(f"start_partition must be >= 0, got {start_partition}")
    racks = {b: r for b, r in brokers.items() if r is not None}
    if rack_aware and racks and len(racks) != len(brokers):
        missing = sorted(set(brokers) - set(racks))
        raise PlacementError(
            f"not all brokers have rack information for rack-aware assignment (no rack: {missing})"
        )
    use_racks = rack_aware and bool(racks)
    arranged = rack_alternated_list(racks) if use_racks else sorted(brokers)
    n = len(arranged)
    draw = rng or random.Random()
    start = start_index if start_index is not None else draw.randrange(n)
    next_shift = (
        shift
        if shift is not None
        else (start_index if start_index is not None else draw.randrange(n))
    )
    num_racks = len(set(racks.values())) if use_racks else 1
    result: Assignment = {}
    for p in range(start_partition, start_partition + partitions):
        if p > 0 and p % n == 0:
            next_shift += 1
        first = (p + start) % n
        if use_racks:
            result[p] = _rack_aware_replicas(
                arranged, racks, first, next_shift * num_racks, replication_factor, num_racks
            )
        else:
            result[p] = [arranged[first]] + [
                arranged[replica_index(first, next_shift, j, n)]
                for j in range(replication_factor - 1)
            ]
    return result


def _rack_aware_replicas(
    arranged: list[int], racks: Mapping[int, str], first: int, shift: int, rf: int, num_racks: int
) -> list[int]:
    """Kafka's follower walk: prefer an unused rack until every rack holds a replica."""
    n = len(arranged)
    leader = arranged[first]
    replicas = [leader]
    used_racks = {racks[leader]}
    used_brokers = {leader}
    k = 0
    while len(replicas) < rf:
        broker = arranged[replica_index(first, shift, k, n)]
        rack = racks[broker]
        k += 1
        if (rack not in used_racks or len(used_racks) == num_racks) and (
            broker not in used_brokers or len(used_brokers) == n
        ):
            replicas.append(broker)
            used_racks.add(rack)
            used_brokers.add(broker)
    return replicas


def pin_site_copies(assignment: Mapping[int, list[int]], sites: Mapping[int, str]) -> Assignment:
    """Return `assignment` with extra replicas appended so every partition has one per site.

    `sites` maps every broker to its site. For each partition (in id order) and each site it
    misses (in name order), the copy goes to that site's broker holding the fewest replicas
    so far (lowest id on ties), so the extra load spreads evenly and the result is
    deterministic. Existing replicas and their order (hence preferred leaders) are kept; a
    pinned partition's replication factor grows by the number of copies added.
    """
    unknown = sorted({b for replicas in assignment.values() for b in replicas} - set(sites))
    if unknown:
        raise PlacementError(f"brokers without a site: {unknown}")
    load = {b: 0 for b in sites}
    for replicas in assignment.values():
        for b in replicas:
            load[b] += 1
    by_site: dict[str, list[int]] = {}
    for b, site in sites.items():
        by_site.setdefault(site, []).append(b)
    result: Assignment = {}
    for p in sorted(assignment):
        replicas = list(assignment[p])
        present = {sites[b] for b in replicas}
        for site in sorted(set(by_site) - present):
            chosen = min(by_site[site], key=lambda b: (load[b], b))
            replicas.append(chosen)
            load[chosen] += 1
        result[p] = replicas
    return result


def spread_site_copies(assignment: Mapping[int, list[int]], sites: Mapping[int, str]) -> Assignment:
    """Return `assignment` with the same number of replicas on every site of `sites`.

    `sites` maps every broker to its site; each partition's replication factor must be a
    multiple of the number of sites (RF 4 over 2 sites: 2 + 2, as seed 001 asks for the
    notification topic), and every site must have that many brokers, else PlacementError.
    Kafka's rack-aware walk guarantees one copy per rack, not an even split: it gives 3 + 1
    for some partitions. Replicas are kept in order (so the preferred leader stays) while
    their site is under its share; the other slots go to the least loaded broker of a site
    short of its share (lowest id on ties), sites in name order, so the result is balanced
    and deterministic. Replication factors do not change.
    """
    unknown = sorted({b for replicas in assignment.values() for b in replicas} - set(sites))
    if unknown:
        raise PlacementError(f"brokers without a site: {unknown}")
    by_site: dict[str, list[int]] = {}
    for b, site in sorted(sites.items()):
        by_site.setdefault(site, []).append(b)
    kept: Assignment = {}
    shares: dict[int, int] = {}
    for p in sorted(assignment):
        rf = len(assignment[p])
        share, rest = divmod(rf, len(by_site))
        short = [s for s, brokers in by_site.items() if len(brokers) < share]
        if rest or short:
            raise PlacementError(
                f"partition {p}: {rf} replicas cannot be split evenly over sites "
                f"{', '.join(sorted(by_site))}"
            )
        count: Counter[str] = Counter()
        kept[p] = []
        for b in assignment[p]:
            if count[sites[b]] < share:
                kept[p].append(b)
                count[sites[b]] += 1
        shares[p] = share
    load = Counter(b for replicas in kept.values() for b in replicas)
    result: Assignment = {}
    for p in sorted(kept):
        replicas = kept[p]
        for site in sorted(by_site):
            while sum(sites[b] == site for b in replicas) < shares[p]:
                free = (b for b in by_site[site] if b not in replicas)
                chosen = min(free, key=lambda b: (load[b], b))
                replicas.append(chosen)
                load[chosen] += 1
        result[p] = replicas
    return result


def leader_counts(assignment: Mapping[int, list[int]]) -> dict[int, int]:
    """Preferred-leader count per broker (brokers leading nothing are absent)."""
    counts: dict[int, int] = {}
    for replicas in assignment.values():
        counts[replicas[0]] = counts.get(replicas[0], 0) + 1
    return counts
