"""`check`'s model on the seed's map: the seed's statements, scenario by scenario."""

from __future__ import annotations

from crossbeat.topology.analysis import analyse, analyse_all, loss_cases, quorum_survives, to_json
from crossbeat.topology.plan import plan_topics
from crossbeat.topology.sitemap import SiteMap

NOTIF = "crossbeat-bucket-notification"
REPL = "crossbeat-replication"


def test_loss_cases_are_singles_pairs_and_sites(example: SiteMap) -> None:
    cases = loss_cases(example)
    kinds = [k for k, _, _ in cases]
    assert kinds.count("server") == 6 and kinds.count("pair") == 15 and kinds.count("site") == 2
    assert cases[-2][2] == ("md1", "md2", "md3")


def test_quorum_needs_a_majority_of_voters(example: SiteMap) -> None:
    assert quorum_survives(example, ["md4", "md5", "wsb1"])
    assert not quorum_survives(example, ["md1", "md2", "md3"])
    assert quorum_survives(example, ["wsb1"])  # the observer does not vote


def test_rack_unaware_puts_seed_partition_4_wholly_on_the_majority_site(example: SiteMap) -> None:
    plans = plan_topics(example, rack_aware=False, start_index=4, shift=3)
    repl = next(p for p in plans if p.name == REPL)
    assert repl.assignment[4] == [3, 2, 4]
    majority = {s.id for s in example.servers_on("site1")}
    assert set(repl.assignment[4]) <= majority
    scenario = analyse(example, plans, ["md1", "md2", "md3"])
    outcome = scenario.topic(REPL).partitions[4]
    assert outcome.offline and outcome.may_lose_acked and not outcome.writable


def test_rack_aware_rf4_keeps_a_copy_on_both_sites(example: SiteMap) -> None:
    notif = next(p for p in plan_topics(example) if p.name == NOTIF)
    assert notif.durability.replication_factor == 4
    sites = {s.id: s.site for s in example.brokers()}
    for replicas in notif.assignment.values():
        assert len(replicas) == 4
        assert {sites[b] for b in replicas} == {"site1", "site2"}
    for scenario in analyse_all(example, plan_topics(example)):
        if scenario.kind == "site":
            assert scenario.topic(NOTIF).offline == 0


def test_notification_writes_survive_any_single_server(example: SiteMap) -> None:
    singles = [s for s in analyse_all(example, plan_topics(example)) if s.kind == "server"]
    assert len(singles) == 6
    for scenario in singles:
        notif = scenario.topic(NOTIF)
        assert scenario.quorum_ok
        assert notif.writable == 5, scenario.label
        assert notif.may_lose_acked == 0, scenario.label


def test_acks_1_leader_loss_risks_the_buffer_window(example: SiteMap) -> None:
    plans = plan_topics(example)
    scenario = analyse(example, plans, ["md1"])  # broker 2 leads partition 0
    repl = scenario.topic(REPL)
    assert [p.partition for p in repl.partitions if p.may_lose_acked] == [0]
    assert repl.writable == 5


def test_minority_site_loss_keeps_notification_writable(example: SiteMap) -> None:
    plans = plan_topics(example)
    scenario = analyse(example, plans, ["md4", "md5", "wsb1"])
    assert scenario.quorum_ok
    assert scenario.topic(NOTIF).writable == 5
    # The seed's caveat: with min.insync.replicas=2 the ISR may be the leader's site's two
    # copies, so acked records are at risk exactly where the lost site led the partition.
    notif = next(p for p in plans if p.name == NOTIF)
    led_there = [p for p, r in notif.assignment.items() if r[0] in (0, 1)]
    at_risk = [p.partition for p in scenario.topic(NOTIF).partitions if p.may_lose_acked]
    assert at_risk == led_there == [1, 3]


def test_majority_site_loss_loses_the_quorum(example: SiteMap) -> None:
    scenario = analyse(example, plan_topics(example), ["md1", "md2", "md3"])
    assert not scenario.quorum_ok
    assert scenario.topic(NOTIF).writable == 0


def test_json_has_exactly_the_documented_shape(example: SiteMap) -> None:
    doc = to_json(analyse_all(example, plan_topics(example)))
    assert set(doc) == {"scenarios"}
    first = doc["scenarios"][0]
    assert set(first) == {"kind", "lost", "quorum_ok", "topics"}
    assert first["lost"] == ["md1"] and first["kind"] == "server"
    kinds = [s["kind"] for s in doc["scenarios"]]
    assert kinds.count("server") == 6 and kinds.count("pair") == 15 and kinds.count("site") == 2
    assert first["topics"][NOTIF] == {"partitions": 5, "writable": 5, "may_lose_acked": 0}
