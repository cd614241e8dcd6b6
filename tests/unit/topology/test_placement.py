"""Kafka's AdminUtils assignment, checked against Kafka's own documented examples and the
seed's `backbeat-topic-info` listings, plus properties over random broker layouts."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crossbeat.topology.errors import PlacementError
from crossbeat.topology.placement import (
    assign_replicas,
    leader_counts,
    pin_site_copies,
    rack_alternated_list,
    spread_site_copies,
    stable_draw,
)

# A shared 2-core machine: no per-example deadline, no too-slow health check.
RELAXED = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])

KAFKA_RACKS = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
# The seed's 5 brokers: md1..md3 = brokers 2, 3, 4 on the majority site, md4/md5 = 0, 1.
SEED_SITES = {2: "site1", 3: "site1", 4: "site1", 0: "site2", 1: "site2"}


def test_rack_alternated_list_matches_kafka_doc() -> None:
    assert rack_alternated_list(KAFKA_RACKS) == [0, 3, 1, 5, 4, 2]


def test_rack_alternated_list_second_kafka_example() -> None:
    racks = {b: f"rack{b // 3 + 1}" for b in range(9)}
    assert rack_alternated_list(racks) == [0, 3, 6, 1, 4, 7, 2, 5, 8]


def test_rack_aware_documented_assignment() -> None:
    # AdminUtils scaladoc: 6 partitions RF 3 round-robin, then partition 6 shifts.
    assert assign_replicas(KAFKA_RACKS, 7, 3, start_index=0) == {
        0: [0, 3, 1],
        1: [3, 1, 5],
        2: [1, 5, 4],
        3: [5, 4, 2],
        4: [4, 2, 0],
        5: [2, 0, 3],
        6: [0, 4, 2],
    }


def test_rack_unaware_documented_assignment() -> None:
    # AdminUtils scaladoc table: 5 brokers, 10 partitions, RF 3, start 0.
    table = {
        0: [0, 1, 2], 1: [1, 2, 3], 2: [2, 3, 4], 3: [3, 4, 0], 4: [4, 0, 1],
        5: [0, 2, 3], 6: [1, 3, 4], 7: [2, 4, 0], 8: [3, 0, 1], 9: [4, 1, 2],
    }  # fmt: skip
    assert assign_replicas(dict.fromkeys(range(5)), 10, 3, start_index=0) == table


def test_seed_rack_unaware_listing() -> None:
    # Seed 001's production listing: partition 4 is wholly on the majority site.
    got = assign_replicas(SEED_SITES, 5, 3, rack_aware=False, start_index=4, shift=3)
    assert got == {0: [4, 3, 0], 1: [0, 4, 1], 2: [1, 0, 2], 3: [2, 1, 3], 4: [3, 2, 4]}
    assert {SEED_SITES[b] for b in got[4]} == {"site1"}


def test_seed_rack_aware_listing() -> None:
    got = assign_replicas(SEED_SITES, 5, 3, start_index=0, shift=1)
    assert got == {0: [2, 1, 4], 1: [0, 4, 2], 2: [3, 0, 1], 3: [1, 3, 4], 4: [4, 1, 2]}


def test_start_partition_continues_the_sequence() -> None:
    whole = assign_replicas(KAFKA_RACKS, 7, 3, start_index=0)
    tail = assign_replicas(KAFKA_RACKS, 2, 3, start_index=0, start_partition=5)
    assert tail == {5: whole[5], 6: whole[6]}


def test_random_start_is_reproducible_with_a_seeded_rng() -> None:
    a = assign_replicas(KAFKA_RACKS, 12, 3, rng=random.Random(7))
    b = assign_replicas(KAFKA_RACKS, 12, 3, rng=random.Random(7))
    assert a == b


@pytest.mark.parametrize(
    ("brokers", "partitions", "rf", "message"),
    [
        ({0: None, 1: None}, 0, 1, "partitions"),
        ({0: None, 1: None}, 1, 0, "replication factor must"),
        ({0: None, 1: None}, 1, 3, "larger than available brokers"),
        ({0: "a", 1: None}, 1, 1, "not all brokers have rack"),
    ],
)
def test_kafka_refusals(
    brokers: dict[int, str | None], partitions: int, rf: int, message: str
) -> None:
    with pytest.raises(PlacementError, match=message):
        assign_replicas(brokers, partitions, rf, start_index=0)


def test_rack_unaware_ignores_partial_racks() -> None:
    got = assign_replicas({0: "a", 1: None, 2: None}, 3, 2, rack_aware=False, start_index=0)
    assert got[0] == [0, 1]


def test_pin_site_copies_adds_one_copy_per_missing_site() -> None:
    unaware = assign_replicas(SEED_SITES, 5, 3, rack_aware=False, start_index=4, shift=3)
    pinned = pin_site_copies(unaware, SEED_SITES)
    for p, replicas in pinned.items():
        assert replicas[: len(unaware[p])] == unaware[p]
        assert {SEED_SITES[b] for b in replicas} == {"site1", "site2"}
    assert pinned[4] == [3, 2, 4, 0]  # brokers 0 and 1 tie on load: lowest id


def test_stable_draw_is_fixed_by_its_key() -> None:
    assert stable_draw("crossbeat-bucket-notification", 5) == (3, 2)
    assert stable_draw("a", 7) == stable_draw("a", 7)
    draws = {stable_draw(f"topic-{i}", 5) for i in range(50)}
    assert len(draws) > 10  # different topics do not all share one start
    with pytest.raises(PlacementError):
        stable_draw("a", 0)


def test_spread_site_copies_gives_the_seed_two_copies_per_site() -> None:
    aware = assign_replicas(SEED_SITES, 5, 4, start_index=0, shift=1)
    assert aware[1] == [0, 4, 2, 3]  # Kafka's rack-aware walk: 3 + 1
    spread = spread_site_copies(aware, SEED_SITES)
    assert spread == {0: [2, 1, 4, 0], 1: [0, 4, 2, 1], 2: [3, 0, 1, 4], 3: [1, 3, 4, 0],
                      4: [4, 1, 2, 0]}  # fmt: skip


@pytest.mark.parametrize(
    ("assignment", "sites"),
    [
        ({0: [0, 1, 2]}, {0: "a", 1: "b", 2: "b"}),  # RF 3 over 2 sites
        ({0: [0, 1, 2, 3]}, {0: "a", 1: "b", 2: "b", 3: "b"}),  # site a has 1 broker
        ({0: [0, 9]}, {0: "a"}),
    ],
)
def test_spread_site_copies_refusals(
    assignment: dict[int, list[int]], sites: dict[int, str]
) -> None:
    with pytest.raises(PlacementError):
        spread_site_copies(assignment, sites)


def test_pin_site_copies_rejects_unknown_brokers() -> None:
    with pytest.raises(PlacementError, match="without a site"):
        pin_site_copies({0: [0, 9]}, {0: "a"})


layouts = st.dictionaries(
    st.integers(0, 40), st.sampled_from(["r1", "r2", "r3", "r4"]), min_size=1, max_size=12
)


@st.composite
def assignment_inputs(draw: st.DrawFn) -> tuple[dict[int, str], int, int, int, int]:
    brokers = draw(layouts)
    rf = draw(st.integers(1, len(brokers)))
    partitions = draw(st.integers(1, 60))
    start = draw(st.integers(0, 3 * len(brokers)))
    shift = draw(st.integers(0, 3 * len(brokers)))
    return brokers, rf, partitions, start, shift


@RELAXED
@given(assignment_inputs(), st.booleans())
def test_replicas_are_distinct_brokers(
    inputs: tuple[dict[int, str], int, int, int, int], aware: bool
) -> None:
    brokers, rf, partitions, start, shift = inputs
    got = assign_replicas(brokers, partitions, rf, rack_aware=aware, start_index=start, shift=shift)
    assert sorted(got) == list(range(partitions))
    for replicas in got.values():
        assert len(replicas) == rf
        assert len(set(replicas)) == rf
        assert set(replicas) <= set(brokers)


@RELAXED
@given(assignment_inputs())
def test_rack_aware_spreads_over_racks(inputs: tuple[dict[int, str], int, int, int, int]) -> None:
    brokers, rf, partitions, start, shift = inputs
    racks = set(brokers.values())
    got = assign_replicas(brokers, partitions, rf, start_index=start, shift=shift)
    for replicas in got.values():
        assert len({brokers[b] for b in replicas}) == min(rf, len(racks))


@RELAXED
@given(assignment_inputs(), st.booleans())
def test_leaders_are_balanced(
    inputs: tuple[dict[int, str], int, int, int, int], aware: bool
) -> None:
    brokers, rf, partitions, start, shift = inputs
    got = assign_replicas(brokers, partitions, rf, rack_aware=aware, start_index=start, shift=shift)
    counts = [leader_counts(got).get(b, 0) for b in brokers]
    assert max(counts) - min(counts) <= 1


@RELAXED
@given(assignment_inputs())
def test_pinned_assignment_covers_every_site(
    inputs: tuple[dict[int, str], int, int, int, int],
) -> None:
    brokers, rf, partitions, start, shift = inputs
    got = assign_replicas(brokers, partitions, rf, rack_aware=False, start_index=start, shift=shift)
    pinned = pin_site_copies(got, brokers)
    for replicas in pinned.values():
        assert {brokers[b] for b in replicas} == set(brokers.values())
        assert len(set(replicas)) == len(replicas)


@RELAXED
@given(
    st.integers(2, 3).flatmap(
        lambda n_sites: st.tuples(
            st.just(n_sites),
            st.lists(st.integers(2, 4), min_size=n_sites, max_size=n_sites),
            st.integers(1, 30),
            st.integers(0, 20),
            st.integers(0, 20),
        )
    )
)
def test_spread_keeps_the_leader_and_splits_evenly(
    inputs: tuple[int, list[int], int, int, int],
) -> None:
    n_sites, per_site, partitions, start, shift = inputs
    sites = {}
    for s, count in enumerate(per_site):
        for _ in range(count):
            sites[len(sites)] = f"site{s}"
    share = min(per_site)
    rf = share * n_sites
    aware = assign_replicas(sites, partitions, rf, start_index=start, shift=shift)
    spread = spread_site_copies(aware, sites)
    for p, replicas in spread.items():
        assert replicas[0] == aware[p][0]
        assert len(replicas) == len(set(replicas)) == rf
        counts = {sites[b] for b in replicas}
        assert all(sum(sites[b] == s for b in replicas) == share for s in counts)
        assert len(counts) == n_sites
