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


def test_resolve_replaces_spark_sentinels() -> None:
    from crossbeat.spark.offsets import resolve

    low, high = {"t": {"0": 3, "1": 0}}, {"t": {"0": 9, "1": 4}}
    assert resolve({"t": {"0": -2, "1": -1}}, low, high) == {"t": {"0": 3, "1": 4}}
    assert resolve({"t": {"0": 5}}, low, high) == {"t": {"0": 5}}


def test_reconcile_reports_each_kind_of_loss_and_moves_to_earliest() -> None:
    from crossbeat.spark.offsets import reconcile

    start = {"t": {"0": 2, "1": 50, "2": 7, "3": 4}}
    low = {"t": {"0": 5, "1": 0, "2": 0}, "u": {"0": 8}}
    high = {"t": {"0": 9, "1": 3, "2": 9}, "u": {"0": 10}}
    begin, lost = reconcile(start, low, high, report_new=True)
    # below the earliest offset, past the end (recreated), kept, gone, new not at 0
    assert begin == {"t": {"0": 5, "1": 0, "2": 7}, "u": {"0": 8}}
    assert lost[0] == "t[0]: offsets 2 to 4 are no longer available (the earliest offset is now 5)"
    assert lost[1].startswith("t[1]: offset 50 is past the end of the partition (3)")
    assert lost[2].startswith("t[3] is gone") and "from offset 4" in lost[2]
    assert lost[3].startswith("u[0] is new but starts at offset 8") and len(lost) == 4
    assert reconcile(start, low, high, report_new=False)[1] == lost[:3]
    assert reconcile({"t": {"0": 5}}, low, {"t": {"0": 9}}, report_new=True) == ({"t": {"0": 5}}, [])
