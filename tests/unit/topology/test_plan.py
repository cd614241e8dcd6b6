"""The planner: deterministic placement, seed 001's per-site copies, mono-site installs and
Kafka's internal topics."""

from __future__ import annotations

from collections import Counter

from crossbeat.topology.bundle import render_plan
from crossbeat.topology.placement import stable_draw
from crossbeat.topology.plan import plan_topics
from crossbeat.topology.sitemap import SiteMap

NOTIF = "crossbeat-bucket-notification"


def _without_placement(example: SiteMap) -> SiteMap:
    document = example.model_dump(mode="json")
    document["placement"] = {}
    return SiteMap.model_validate(document)


def test_placement_without_a_placement_section_comes_from_the_topic_name(
    example: SiteMap,
) -> None:
    sitemap = _without_placement(example)
    plans = {p.name: p for p in plan_topics(sitemap)}
    notif = plans[NOTIF]
    # A fixed value, not just "equal twice": a draw from random or from Python's salted
    # hash() would differ between processes.
    assert (notif.start_index, notif.shift) == stable_draw(NOTIF, 5) == (3, 2)
    assert notif.assignment == {
        0: [1, 4, 2, 0],
        1: [4, 0, 3, 1],
        2: [2, 0, 3, 1],
        3: [0, 3, 1, 4],
        4: [3, 1, 4, 0],
    }
    again = {p.name: p.assignment for p in plan_topics(sitemap)}
    assert again == {name: p.assignment for name, p in plans.items()}


def test_a_lone_shift_keeps_the_drawn_start_index(example: SiteMap) -> None:
    sitemap = _without_placement(example)
    notif = next(p for p in plan_topics(sitemap, shift=4) if p.name == NOTIF)
    assert (notif.start_index, notif.shift) == (3, 4)


def test_notification_rf4_puts_two_copies_on_each_site(example: SiteMap) -> None:
    sites = {b.id: b.site for b in example.brokers()}
    for sitemap in (example, _without_placement(example)):
        notif = next(p for p in plan_topics(sitemap) if p.name == NOTIF)
        for replicas in notif.assignment.values():
            assert Counter(sites[b] for b in replicas) == {"site1": 2, "site2": 2}
    files = render_plan(example, plan_topics(example))
    line = next(x for x in files["topics.sh"].splitlines() if f"--topic {NOTIF}" in x)
    assert "--replica-assignment 2:1:4:0,0:4:2:1,3:0:1:4,1:3:4:0,4:1:2:0" in line


def test_a_mono_site_install_is_not_rack_aware(mono: SiteMap) -> None:
    assert not mono.multi_site
    (notif, *_) = plan_topics(mono)
    assert not notif.rack_aware and notif.pinned_copies == 0
    files = render_plan(mono, plan_topics(mono))
    for path, text in files.items():
        assert "broker.rack" not in text and "client.rack" not in text, path
        assert "RackAwareReplicaSelector" not in text, path


def test_kafka_internal_topics_are_planned(example: SiteMap) -> None:
    plans = {p.name: p for p in plan_topics(example)}
    for name in ("__consumer_offsets", "__transaction_state"):
        p = plans[name]
        assert p.internal and len(p.assignment) == 50
        assert (p.durability.replication_factor, p.durability.min_insync_replicas) == (3, 2)
        assert p.durability.acks == "all" and p.rack_aware
    files = render_plan(example, list(plans.values()))
    assert "__consumer_offsets" in files["reassignment.json"]
    # Kafka creates them itself: no create command, producer file or mirroring.
    assert "__consumer_offsets" not in files["topics.sh"]
    assert not any(path.startswith("producers/__") for path in files)
    assert "__consumer_offsets" not in files["mirrormaker/site1-to-site2.properties"]


def test_the_map_may_set_an_internal_topic(example: SiteMap) -> None:
    document = example.model_dump(mode="json")
    document["topics"].append(
        {"name": "__consumer_offsets", "workflow": "kafka-internal", "partitions": 10}
    )
    plans = plan_topics(SiteMap.model_validate(document))
    offsets = [p for p in plans if p.name == "__consumer_offsets"]
    assert len(offsets) == 1 and len(offsets[0].assignment) == 10


def test_internal_topics_fit_a_two_broker_cluster(witness: SiteMap) -> None:
    document = witness.model_dump(mode="json")
    document["servers"] = [s for s in document["servers"] if s["name"] in ("e1", "w1", "t1")]
    document["topics"] = [
        {"name": "t", "workflow": "replication", "partitions": 1, "replication_factor": 2}
    ]
    small = SiteMap.model_validate(document)
    offsets = next(p for p in plan_topics(small) if p.name == "__consumer_offsets")
    assert offsets.durability.replication_factor == 2
