"""Failure analysis: what each loss of servers does to writes, acknowledged data and quorum.

Loss cases: every single server, every pair of servers, and each whole site. For each case
and each partition of each planned topic the model answers:

- *quorum_ok*: more than half of the metadata quorum's voters (ZooKeeper participants or
  KRaft controllers; observers do not vote) survive.
- *writable*: produce requests with the workflow's acks still succeed. Leader election and
  ISR shrinking need the metadata quorum, so nothing counts as writable without it; with it,
  acks=all needs at least min.insync.replicas surviving replicas (all replicas were in sync
  before the loss and unclean election is disabled), acks=0/1 needs one.
- *may_lose_acked*: a record the producer saw acknowledged may exist only on lost servers.
  The leader is the preferred (first) replica, which auto leader rebalancing restores. With
  acks=1 the leader alone holds the newest records, so losing it may lose them. With
  acks=all a record is on every ISR member, and the ISR may have shrunk to any
  min.insync.replicas members including the leader (a lagging remote site drops out of it),
  so the worst case is: leader lost and at least min.insync.replicas replicas lost.
- *offline*: no replica survives at all (the partition sat wholly on lost servers).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any

from crossbeat.topology.errors import TopologyError
from crossbeat.topology.plan import TopicPlan
from crossbeat.topology.sitemap import SiteMap, quorum_survives

__all__ = [
    "PartitionOutcome",
    "Scenario",
    "TopicOutcome",
    "analyse",
    "analyse_all",
    "loss_cases",
    "partition_outcome",
    "quorum_survives",
    "to_json",
]


@dataclass(frozen=True)
class PartitionOutcome:
    partition: int
    replicas: tuple[int, ...]
    alive: tuple[int, ...]
    writable: bool
    may_lose_acked: bool

    @property
    def offline(self) -> bool:
        return not self.alive


@dataclass(frozen=True)
class TopicOutcome:
    topic: str
    partitions: tuple[PartitionOutcome, ...]

    @property
    def writable(self) -> int:
        return sum(p.writable for p in self.partitions)

    @property
    def may_lose_acked(self) -> int:
        return sum(p.may_lose_acked for p in self.partitions)

    @property
    def offline(self) -> int:
        return sum(p.offline for p in self.partitions)


@dataclass(frozen=True)
class Scenario:
    """One loss case: `kind` is "server", "pair" or "site"; `lost` in site-map order."""

    kind: str
    label: str
    lost: tuple[str, ...]
    quorum_ok: bool
    topics: tuple[TopicOutcome, ...]

    def topic(self, name: str) -> TopicOutcome:
        return next(t for t in self.topics if t.topic == name)


def partition_outcome(
    plan: TopicPlan, partition: int, lost_brokers: set[int], quorum_ok: bool
) -> PartitionOutcome:
    """Apply the module's model to one partition (see the module docstring)."""
    replicas = tuple(plan.assignment[partition])
    alive = tuple(b for b in replicas if b not in lost_brokers)
    lost_count = len(replicas) - len(alive)
    leader_lost = replicas[0] in lost_brokers
    if plan.durability.acks == "all":
        needed = plan.durability.min_insync_replicas
        may_lose = leader_lost and lost_count >= needed
    else:
        needed = 1
        may_lose = leader_lost
    return PartitionOutcome(
        partition, replicas, alive, quorum_ok and len(alive) >= needed, may_lose
    )


def analyse(
    sitemap: SiteMap, plans: Sequence[TopicPlan], lost: Iterable[str], *, kind: str = "custom"
) -> Scenario:
    """The outcome of losing the named servers (unknown names are an error)."""
    names = set(lost)
    known = {s.name for s in sitemap.servers}
    if names - known:
        raise TopologyError(f"unknown servers: {', '.join(sorted(names - known))}")
    ordered = tuple(s.name for s in sitemap.servers if s.name in names)
    lost_brokers = {s.id for s in sitemap.brokers() if s.name in names}
    quorum_ok = quorum_survives(sitemap, names)
    topics = tuple(
        TopicOutcome(
            plan.name,
            tuple(
                partition_outcome(plan, p, lost_brokers, quorum_ok) for p in sorted(plan.assignment)
            ),
        )
        for plan in plans
    )
    return Scenario(kind, "+".join(ordered), ordered, quorum_ok, topics)


def loss_cases(sitemap: SiteMap) -> list[tuple[str, str, tuple[str, ...]]]:
    """(kind, label, lost servers) for every single server, every pair and every site."""
    names = [s.name for s in sitemap.servers]
    cases: list[tuple[str, str, tuple[str, ...]]] = [("server", n, (n,)) for n in names]
    cases += [("pair", f"{a}+{b}", (a, b)) for a, b in combinations(names, 2)]
    for site in sitemap.sites:
        members = tuple(s.name for s in sitemap.servers_on(site.name))
        if members:
            cases.append(("site", site.name, members))
    return cases


def analyse_all(sitemap: SiteMap, plans: Sequence[TopicPlan]) -> list[Scenario]:
    """`analyse` for every case of `loss_cases`, in that order."""
    scenarios = []
    for kind, label, lost in loss_cases(sitemap):
        s = analyse(sitemap, plans, lost, kind=kind)
        scenarios.append(Scenario(kind, label, s.lost, s.quorum_ok, s.topics))
    return scenarios


def to_json(scenarios: Sequence[Scenario]) -> dict[str, Any]:
    """The `check --json` document: exactly scenarios / kind / lost / quorum_ok / topics counts.

    `kind` is "server", "pair" or "site", so a site's row is told from a pair's even when
    the site has two servers.
    """
    return {
        "scenarios": [
            {
                "kind": s.kind,
                "lost": list(s.lost),
                "quorum_ok": s.quorum_ok,
                "topics": {
                    t.topic: {
                        "partitions": len(t.partitions),
                        "writable": t.writable,
                        "may_lose_acked": t.may_lose_acked,
                    }
                    for t in s.topics
                },
            }
            for s in scenarios
        ]
    }
