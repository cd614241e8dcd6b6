"""Offset arithmetic of the crossbeat-kafka source (pure functions, no Spark needed)."""

from __future__ import annotations

from crossbeat.spark.offsets import limit_offsets, merge_new_partitions, normalise, ranges


def test_normalise_makes_string_partitions_and_int_offsets() -> None:
    assert normalise({"t": {0: "5", "1": 2}}) == {"t": {"0": 5, "1": 2}}


def test_limit_shares_the_budget_in_proportion_and_starves_no_partition() -> None:
    start = {"t": {"0": 0, "1": 0, "2": 5}}
    latest = {"t": {"0": 90, "1": 10, "2": 5}}
    end = limit_offsets(start, latest, 20)
    assert end == {"t": {"0": 18, "1": 2, "2": 5}}
    assert limit_offsets(start, latest, None) == latest
    assert limit_offsets(start, latest, 1000) == latest


def test_new_partitions_start_at_their_earliest_offset() -> None:
    merged = merge_new_partitions({"t": {"0": 7}}, {"t": {"0": 9, "1": 4}}, {"t": {"1": 2}})
    assert merged == {"t": {"0": 7, "1": 2}}


def test_ranges_cover_only_partitions_with_records() -> None:
    assert ranges({"t": {"0": 3, "1": 4, "10": 0}}, {"t": {"0": 3, "1": 6, "10": 2}}) == [
        ("t", 1, 4, 6),
        ("t", 10, 0, 2),
    ]


def test_pack_groups_whole_partition_ranges_into_tasks() -> None:
    from crossbeat.spark.source import pack

    rs = [("t", 0, 0, 5), ("t", 1, 10, 20), ("u", 0, 0, 3)]
    assert [t.ranges for t in pack(rs, 100)] == [rs]  # a small batch is one task
    assert [t.ranges for t in pack(rs, 10)] == [[rs[0]], [rs[1]], [rs[2]]]
    assert [t.ranges for t in pack(rs, 15)] == [[rs[0], rs[1]], [rs[2]]]
    assert [t.rows for t in pack(rs, 1)] == [5, 10, 3]  # a range is never split
    assert pack([], 10) == []
