"""Resolve a site map into per-topic durability and replica assignments.

Placement is deterministic: without `--start-index`/`--shift`, a topic setting or
`[placement]`, a topic's start index and shift come from `placement.stable_draw` over its
name, so `plan`, `check`, `failover` and `failback` all see the assignment `topics.sh`
creates (Kafka itself would draw them at random on every create).

Besides the map's topics, the plan places Kafka's internal topics (`INTERNAL_TOPICS`: 50
partitions, RF min(3, brokers), min.insync.replicas min(cluster's, RF), acks=all, as the
rendered broker configuration creates them) unless the map lists them with other settings:
they hold the consumer groups' offsets and must move with the rest on failover.
"""

from __future__ import annotations

from dataclasses import dataclass

from crossbeat.topology.durability import Durability, resolve
from crossbeat.topology.placement import (
    Assignment,
    assign_replicas,
    pin_site_copies,
    spread_site_copies,
    stable_draw,
)
from crossbeat.topology.sitemap import INTERNAL_TOPICS, SiteMap, TopicSpec

# Kafka's offsets.topic.num.partitions and transaction.state.log.num.partitions defaults.
INTERNAL_PARTITIONS = 50


@dataclass(frozen=True)
class TopicPlan:
    """One topic's effective durability and its assignment (first replica = leader).

    `start_index`/`shift` are the values the assignment was made with (Kafka's
    `fixedStartIndex` and follower shift), whichever level they came from.
    """

    spec: TopicSpec
    durability: Durability
    assignment: Assignment
    rack_aware: bool
    pinned_copies: int
    start_index: int = 0
    shift: int = 0

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def internal(self) -> bool:
        """Kafka creates the topic itself: no topics.sh line, producer file or mirroring."""
        return self.spec.internal

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
    as in Kafka); when no level sets a start index it is drawn from the topic name
    (`stable_draw`), and so is the shift unless that level set it.
    `rack_aware=False` reproduces what Kafka does without `broker.rack` (today's deployment):
    racks are ignored and no per-site copies are arranged. Otherwise the topic's own
    `rack_aware` applies, and a topic whose durability asks for a copy on each site gets
    its replicas split evenly over the data sites when its replication factor allows it
    (RF 4 on 2 sites: 2 + 2), else at least one copy pinned on each. A map with brokers on
    one site only is never rack-aware (seed 001: a mono-site install shall not be).
    """
    durability = resolve(
        spec.workflow,
        cluster_min_insync_replicas=sitemap.cluster.min_insync_replicas,
        acks=spec.acks,
        replication_factor=spec.replication_factor,
        min_insync_replicas=spec.min_insync_replicas,
        copy_on_each_site=spec.copy_on_each_site,
    )
    multi_site = sitemap.multi_site
    aware = multi_site and (
        spec.rack_aware if rack_aware is None else rack_aware and spec.rack_aware
    )
    brokers = sitemap.brokers()
    start, next_shift = _placement_pair(
        (start_index, shift),
        (spec.start_index, spec.shift),
        (sitemap.placement.start_index, sitemap.placement.shift),
    )
    if start is None:
        drawn_start, drawn_shift = stable_draw(spec.name, len(brokers))
        start, next_shift = drawn_start, drawn_shift if next_shift is None else next_shift
    assignment = assign_replicas(
        {b.id: sitemap.rack_of(b) for b in brokers},
        spec.partitions,
        durability.replication_factor,
        rack_aware=aware,
        start_index=start,
        shift=next_shift,
    )
    pinned = 0
    if durability.copy_on_each_site and rack_aware is not False and multi_site:
        sites = {b.id: b.site for b in brokers}
        if _splits_evenly(sitemap, durability.replication_factor):
            assignment = spread_site_copies(assignment, sites)
        else:
            before = sum(map(len, assignment.values()))
            assignment = pin_site_copies(assignment, sites)
            pinned = sum(map(len, assignment.values())) - before
    return TopicPlan(
        spec,
        durability,
        assignment,
        aware,
        pinned,
        start,
        start if next_shift is None else next_shift,
    )


def internal_specs(sitemap: SiteMap) -> list[TopicSpec]:
    """Kafka's internal topics the map does not list, as the rendered brokers create them."""
    listed = {t.name for t in sitemap.topics}
    rf = min(3, len(sitemap.brokers()))
    return [
        TopicSpec(
            name=name,
            workflow="kafka-internal",
            partitions=INTERNAL_PARTITIONS,
            replication_factor=rf,
            min_insync_replicas=min(sitemap.cluster.min_insync_replicas, rf),
        )
        for name in INTERNAL_TOPICS
        if name not in listed
    ]


def plan_topics(
    sitemap: SiteMap,
    *,
    rack_aware: bool | None = None,
    start_index: int | None = None,
    shift: int | None = None,
    include_internal: bool = True,
) -> list[TopicPlan]:
    """`plan_topic` for every topic of the map, in map order, then Kafka's internal topics."""
    specs = list(sitemap.topics) + (internal_specs(sitemap) if include_internal else [])
    return [
        plan_topic(sitemap, spec, rack_aware=rack_aware, start_index=start_index, shift=shift)
        for spec in specs
    ]


def _splits_evenly(sitemap: SiteMap, rf: int) -> bool:
    sites = sitemap.data_sites()
    share, rest = divmod(rf, len(sites))
    per_site = [sum(b.site == s for b in sitemap.brokers()) for s in sites]
    return rest == 0 and all(n >= share for n in per_site)


def _placement_pair(*levels: tuple[int | None, int | None]) -> tuple[int | None, int | None]:
    return next((level for level in levels if level != (None, None)), (None, None))
