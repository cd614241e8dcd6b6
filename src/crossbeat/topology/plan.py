"""Resolve a site map into per-topic durability and replica assignments."""

from __future__ import annotations

from dataclasses import dataclass

from crossbeat.topology.durability import Durability, resolve
from crossbeat.topology.placement import Assignment, assign_replicas, pin_site_copies
from crossbeat.topology.sitemap import SiteMap, TopicSpec


@dataclass(frozen=True)
class TopicPlan:
    """One topic's effective durability and its assignment (first replica = leader)."""

    spec: TopicSpec
    durability: Durability
    assignment: Assignment
    rack_aware: bool
    pinned_copies: int

    @property
    def name(self) -> str:
        return self.spec.name

    def replica_assignment_arg(self) -> str:
        """The `kafka-topics.sh --replica-assignment` value: `2:1:4,0:4:2,...`."""
        return ",".join(":".join(map(str, self.assignment[p])) for p in sorted(self.assignment))


def plan_topic(
    sitemap: SiteMap,
    spec: TopicSpec,
    *,
    rack_aware: bool | None = None,
    start_index: int | None = None,
    shift: int | None = None,
) -> TopicPlan:
    """Assign one topic over the map's brokers.

    Start index and shift come as a pair from the first level that sets either: the
    arguments, then the topic, then `[placement]` (a lone start index also fixes the shift,
    as in Kafka).
    `rack_aware=False` reproduces what Kafka does without `broker.rack` (today's deployment):
    racks are ignored and no extra per-site copies are pinned. Otherwise the topic's own
    `rack_aware` applies, and copies are pinned when its durability asks for one per site.
    """
    durability = resolve(
        spec.workflow,
        cluster_min_insync_replicas=sitemap.cluster.min_insync_replicas,
        acks=spec.acks,
        replication_factor=spec.replication_factor,
        min_insync_replicas=spec.min_insync_replicas,
        copy_on_each_site=spec.copy_on_each_site,
    )
    aware = spec.rack_aware if rack_aware is None else rack_aware and spec.rack_aware
    brokers = sitemap.brokers()
    start, shift = _placement_pair(
        (start_index, shift),
        (spec.start_index, spec.shift),
        (sitemap.placement.start_index, sitemap.placement.shift),
    )
    assignment = assign_replicas(
        {b.id: sitemap.rack_of(b) for b in brokers},
        spec.partitions,
        durability.replication_factor,
        rack_aware=aware,
        start_index=start,
        shift=shift,
    )
    pinned = 0
    if durability.copy_on_each_site and rack_aware is not False:
        before = sum(map(len, assignment.values()))
        assignment = pin_site_copies(assignment, {b.id: b.site for b in brokers})
        pinned = sum(map(len, assignment.values())) - before
    return TopicPlan(spec, durability, assignment, aware, pinned)


def plan_topics(
    sitemap: SiteMap,
    *,
    rack_aware: bool | None = None,
    start_index: int | None = None,
    shift: int | None = None,
) -> list[TopicPlan]:
    """`plan_topic` for every topic of the map, in map order."""
    return [
        plan_topic(sitemap, spec, rack_aware=rack_aware, start_index=start_index, shift=shift)
        for spec in sitemap.topics
    ]


def _placement_pair(*levels: tuple[int | None, int | None]) -> tuple[int | None, int | None]:
    return next((level for level in levels if level != (None, None)), (None, None))
