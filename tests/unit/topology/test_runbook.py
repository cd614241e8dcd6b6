from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crossbeat.topology.errors import TopologyError
from crossbeat.topology.failback import failback
from crossbeat.topology.failover import failover, failover_assignments
from crossbeat.topology.mirrormaker import mirror_maker_failback, mirror_maker_failover
from crossbeat.topology.plan import plan_topics
from crossbeat.topology.runbook import FileChange, shrink_assignment
from crossbeat.topology.sitemap import SiteMap

# A shared 2-core machine: no per-example deadline, no too-slow health check.
RELAXED = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


NOTIF = "crossbeat-bucket-notification"


def test_minority_failover_follows_the_seed(example: SiteMap) -> None:
    book = failover(example, plan_topics(example), "site2")
    titles = [s.title for s in book.steps]
    assert titles[1] == "Metadata: remove leader enforcement"
    assert titles[2] == "Move every topic onto the surviving brokers"
    assert titles[3] == "ZooKeeper: shrink the ensemble to 3 voters"
    assert "crossbeat-bucket-notification 4 -> 3" in book.steps[2].note
    zk = book.steps[3].files[0].diff()
    assert "-server.1=10.100.8.65:2888:3888" in zk
    assert "-server.6=10.100.8.67:2888:3888:observer" in zk
    text = book.to_text()
    assert "kafka-reassign-partitions.sh --bootstrap-server 10.100.7.65:9092" in text


def test_failover_assignments_use_only_survivors(example: SiteMap) -> None:
    after = failover_assignments(example, plan_topics(example), "site2")
    for replicas in after[NOTIF].values():
        assert sorted(replicas) == [2, 3, 4]
    majority = failover_assignments(example, plan_topics(example), "site1")
    for replicas in majority[NOTIF].values():
        assert sorted(replicas) == [0, 1, 5]  # md4, md5 and wsb1's temporary broker


def test_majority_failover_promotes_the_observer(example: SiteMap) -> None:
    book = failover(example, plan_topics(example), "site1")
    titles = [s.title for s in book.steps]
    assert titles[1] == "Metadata: promote the warm stand-by"
    assert titles[2] == "ZooKeeper: promote the observer, ensemble of 3 voters"
    wsb1 = next(f for f in book.steps[2].files if f.server == "wsb1").diff()
    assert "-peerType=observer" in wsb1
    assert "+server.6=10.100.8.67:2888:3888\n" in wsb1
    assert titles[3] == "Start a Kafka broker on wsb1 (broker.rack=site2)"
    assert "+broker.id=5" in book.steps[3].files[0].diff()


def test_kraft_majority_failover_says_it_cannot_rebuild_the_quorum(kraft_example: SiteMap) -> None:
    book = failover(kraft_example, plan_topics(kraft_example), "site1")
    assert "cannot be rebuilt" in book.steps[2].title
    minority = failover(kraft_example, plan_topics(kraft_example), "site2")
    text = minority.to_text()
    assert "remove-controller --controller-id 0" in text
    assert "--bootstrap-controller 10.100.7.65:9093" in text


def test_failback_restores_the_plan(example: SiteMap) -> None:
    plans = plan_topics(example)
    for site in ("site1", "site2"):
        book = failback(example, plans, site)
        text = book.to_text()
        assert '"partition": 0, "replicas": [2, 1, 4, 0]' in text
        assert "--election-type preferred" in text
        assert "3 -> 4" in text
    back = failback(example, plans, "site1")
    assert any(s.title == "Stop the temporary broker on wsb1" for s in back.steps)
    zk = next(f for f in back.steps[0].files if f.server == "wsb1").diff()
    assert "+peerType=observer" in zk


def test_mirror_maker_runbooks(example: SiteMap) -> None:
    plans = plan_topics(example)
    lost_active = mirror_maker_failover(example, plans, "site1").to_text()
    assert "checkpoint" in lost_active and "restart point" in lost_active
    assert "+bootstrap.servers=10.100.8.65:9092,10.100.8.66:9092,10.100.8.67:9092" in lost_active
    assert "Stop MirrorMaker" in mirror_maker_failover(example, plans, "site2").to_text()
    back = mirror_maker_failback(example, plans, "site1").to_text()
    assert "+site2->site1.enabled=true" in back


def test_unknown_site_is_an_error(example: SiteMap) -> None:
    with pytest.raises(TopologyError, match="unknown site 'site9'"):
        failover(example, plan_topics(example), "site9")


def test_file_change_diff() -> None:
    assert FileChange("s", "/p", "a=1\n", "a=2\n").diff().endswith("-a=1\n+a=2\n")


@RELAXED
@given(
    st.dictionaries(
        st.integers(0, 20),
        st.lists(st.integers(0, 9), min_size=1, max_size=4, unique=True),
        min_size=1,
    ),
    st.sets(st.integers(0, 9), min_size=1),
    st.integers(1, 5),
)
def test_shrink_keeps_survivors_in_order(
    assignment: dict[int, list[int]], survivors: set[int], rf: int
) -> None:
    got = shrink_assignment(assignment, sorted(survivors), rf)
    for p, replicas in got.items():
        assert len(replicas) == min(rf, len(survivors)) == len(set(replicas))
        assert set(replicas) <= survivors
        kept = [b for b in assignment[p] if b in survivors][: len(replicas)]
        assert replicas[: len(kept)] == kept
