from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crossbeat.topology.errors import TopologyError
from crossbeat.topology.failback import failback
from crossbeat.topology.failover import failover, failover_assignments
from crossbeat.topology.mirrormaker import mirror_maker_failback, mirror_maker_failover
from crossbeat.topology.plan import plan_topics
from crossbeat.topology.runbook import (
    ZOOKEEPER_PROCESS,
    FileChange,
    Runbook,
    shrink_assignment,
    wait_stopped,
)
from crossbeat.topology.sitemap import SiteMap

# A shared 2-core machine: no per-example deadline, no too-slow health check.
RELAXED = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


NOTIF = "crossbeat-bucket-notification"


def test_minority_failover_follows_the_seed(example: SiteMap) -> None:
    book = failover(example, plan_topics(example), "site2")
    titles = [s.title for s in book.steps]
    assert titles[1] == "Fence site site2: make sure it is down, not just unreachable"
    assert titles[2] == "Metadata: remove leader enforcement"
    assert titles[3] == "Move every topic onto the surviving brokers"
    assert titles[4] == "ZooKeeper: shrink the ensemble to 3 voters"
    assert "crossbeat-bucket-notification 4 -> 3" in book.steps[3].note
    zk = book.steps[4].files[0].diff()
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
    assert titles[1] == "Fence site site1: make sure it is down, not just unreachable"
    assert titles[2] == "Metadata: promote the warm stand-by"
    assert titles[3] == "ZooKeeper: promote the observer, ensemble of 3 voters"
    wsb1 = next(f for f in book.steps[3].files if f.server == "wsb1").diff()
    assert "-peerType=observer" in wsb1
    assert "+server.6=10.100.8.67:2888:3888\n" in wsb1
    assert titles[4] == "Start a Kafka broker on wsb1 (broker.rack=site2)"
    assert "+broker.id=5" in book.steps[4].files[0].diff()


def test_kraft_majority_failover_says_it_cannot_rebuild_the_quorum(kraft_example: SiteMap) -> None:
    book = failover(kraft_example, plan_topics(kraft_example), "site1")
    assert "cannot be rebuilt" in book.steps[3].title
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
    zk = next(f for f in back.steps[1].files if f.server == "wsb1").diff()
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


def _commands(book: Runbook, title: str) -> list[str]:
    step = next(s for s in book.steps if s.title.startswith(title))
    return list(step.commands)


def test_losing_the_majority_labelled_site_of_a_tiebreaker_map_keeps_the_quorum(
    witness: SiteMap,
) -> None:
    book = failover(witness, plan_topics(witness), "east")
    text = book.to_text()
    assert "3 of 5 quorum voters are off site east, a majority" in book.summary
    for wrong in ("promote the observer", "lost its majority", "may be lost", "Start a Kafka"):
        assert wrong not in text
    titles = [s.title for s in book.steps]
    assert "ZooKeeper: shrink the ensemble to 3 voters" in titles
    # The metadata service is counted apart: 1 of its 3 members survives.
    assert "Metadata: promote the warm stand-by" in titles
    back = failback(witness, plan_topics(witness), "east")
    assert not any("temporary broker" in s.title for s in back.steps)
    zk = next(s for s in back.steps if s.title.startswith("ZooKeeper"))
    w1 = next(f for f in zk.files if f.server == "w1").diff()
    assert "+server.2=e1:2888:3888" in w1  # back from the 3-voter ensemble, not a promoted one


def test_kraft_tiebreaker_loss_removes_the_lost_voters(witness_kraft: SiteMap) -> None:
    text = failover(witness_kraft, plan_topics(witness_kraft), "east").to_text()
    assert "cannot be rebuilt" not in text
    assert "remove-controller --controller-id 1" in text
    assert "remove-controller --controller-id 2" in text


def test_kraft_majority_loss_stops_once_the_quorum_is_gone(kraft_example: SiteMap) -> None:
    book = failover(kraft_example, plan_topics(kraft_example), "site1")
    last = book.steps[-1]
    assert "cannot be rebuilt" in last.title and "stop here" in last.title
    text = book.to_text()
    for needs_a_controller in (
        "--election-type unclean",
        "kafka-reassign-partitions.sh",
        "kafka-server-start.sh",
        "--under-min-isr-partitions",
    ):
        assert needs_a_controller not in text
    assert failover_assignments(kraft_example, plan_topics(kraft_example), "site1") == {
        p.name: p.assignment for p in plan_topics(kraft_example)
    }


def test_zookeeper_shrink_restarts_the_leader_first_and_admits_the_pause(
    example: SiteMap,
) -> None:
    book = failover(example, plan_topics(example), "site2")
    step = next(s for s in book.steps if s.title.startswith("ZooKeeper: shrink"))
    assert "holds throughout" not in step.note and "pauses ZooKeeper" in step.note
    commands = list(step.commands)
    assert commands[0].startswith("LEADER=$(for h in 10.100.7.65 10.100.7.66 10.100.7.67;")
    first_start = next(i for i, c in enumerate(commands) if "zkServer.sh start" in c)
    last_stop = max(i for i, c in enumerate(commands) if "zkServer.sh stop" in c)
    assert last_stop < first_start
    assert commands[first_start] == 'ssh "$LEADER" zkServer.sh start /etc/zookeeper/zoo.cfg'


def test_internal_topics_move_with_the_others(example: SiteMap) -> None:
    plans = plan_topics(example)
    for book in (failover(example, plans, "site1"), failback(example, plans, "site2")):
        text = book.to_text()
        assert '"topic": "__consumer_offsets"' in text
        assert '"topic": "__transaction_state"' in text


def test_failover_fences_the_lost_site_first(example: SiteMap) -> None:
    for site, lost in (("site1", ["md1", "md2", "md3"]), ("site2", ["md4", "md5", "wsb1"])):
        book = failover(example, plan_topics(example), site)
        fence = book.steps[1]
        assert fence.title.startswith(f"Fence site {site}")
        for name in lost:
            assert f"NOT FENCED: {name} port 2181" in "\n".join(fence.commands)
        assert "partition" in fence.note
    split_brain = failover(example, plan_topics(example), "site1").steps[1].note
    assert "split brain" in split_brain


def test_failback_keeps_the_returning_site_stopped_and_wipes_only_stopped_zookeeper(
    example: SiteMap,
) -> None:
    for site in ("site1", "site2"):
        book = failback(example, plan_topics(example), site)
        first = book.steps[0]
        assert first.title == f"Keep site {site}'s ZooKeeper and Kafka stopped"
        zk = _commands(book, "ZooKeeper")
        wipes = [c for c in zk if "rm -rf" in c]
        assert wipes and all(
            c.index("zkServer.sh stop") < c.index("pgrep") < c.index("rm -rf") for c in wipes
        )
        # nothing of the restored site starts before the quorum step
        assert not any("start" in c for c in first.commands)


def test_majority_failback_starts_the_surviving_voters_before_the_wiped_ones(
    example: SiteMap,
) -> None:
    zk = _commands(failback(example, plan_topics(example), "site1"), "ZooKeeper")
    starts = [c.split()[1] for c in zk if "zkServer.sh start" in c]
    assert starts == ["10.100.8.65", "10.100.8.66", "10.100.7.65", "10.100.7.66",
                      "10.100.7.67", "10.100.8.67"]  # fmt: skip
    check = next(i for i, c in enumerate(zk) if "pgrep" in c and "rm -rf" not in c)
    assert check < next(
        i for i, c in enumerate(zk) if c.startswith("ssh 10.100.7.65 zkServer.sh start")
    )


@pytest.mark.skipif(shutil.which("pgrep") is None, reason="needs pgrep")
def test_the_wipe_guard_refuses_while_the_process_runs(tmp_path: Path) -> None:
    data = tmp_path / "version-2"
    data.mkdir()
    script = f"{wait_stopped(ZOOKEEPER_PROCESS, 'ZooKeeper', 1)}; rm -rf {data}"
    # A process whose command line names ZooKeeper's main class, blocked on its stdin.
    fake = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()", "QuorumPeerMain"],
        stdin=subprocess.PIPE,
    )
    try:
        refused = subprocess.run(["sh", "-c", script], capture_output=True, text=True)
    finally:
        fake.communicate(b"")
    assert refused.returncode == 1 and "ZooKeeper is still running" in refused.stderr
    assert data.exists()
    done = subprocess.run(["sh", "-c", script], capture_output=True, text=True)
    assert done.returncode == 0 and not data.exists()


def test_mirror_maker_needs_a_copy_site(example: SiteMap) -> None:
    document = example.model_dump(mode="json")
    document["sites"][1]["role"] = "witness"
    document["servers"] = [
        s for s in document["servers"] if s["site"] == "site1" or s["name"] == "wsb1"
    ]
    document["topics"] = document["topics"][1:]  # RF 4 needs 4 brokers
    lonely = SiteMap.model_validate(document)
    for build in (mirror_maker_failover, mirror_maker_failback):
        with pytest.raises(TopologyError, match="needs a second site"):
            build(lonely, plan_topics(lonely), "site1")


def test_mirror_maker_never_deletes_internal_topics(example: SiteMap) -> None:
    text = mirror_maker_failback(example, plan_topics(example), "site1").to_text()
    assert "--delete --topic crossbeat-replication" in text
    assert "__consumer_offsets" not in text and "__transaction_state" not in text
