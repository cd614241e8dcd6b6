"""Offset arithmetic of the Kafka source, kept free of pyspark and of I/O.

An offset document is `{topic: {partition (str): next offset (int)}}`: JSON round-trips it
(Spark stores it in the checkpoint), so partitions are string keys.
"""

from __future__ import annotations

from typing import Any

Offsets = dict[str, dict[str, int]]


def normalise(doc: dict[str, Any]) -> Offsets:
    """Offsets from a JSON document (e.g. a user's startingOffsets), ints everywhere."""
    return {str(t): {str(p): int(o) for p, o in parts.items()} for t, parts in doc.items()}


def merge_new_partitions(start: Offsets, latest: Offsets, earliest: Offsets) -> Offsets:
    """`start` extended with partitions it does not know yet, from their earliest offset."""
    out = {t: dict(parts) for t, parts in start.items()}
    for topic, parts in latest.items():
        for p in parts:
            out.setdefault(topic, {}).setdefault(p, earliest.get(topic, {}).get(p, 0))
    return out


def limit_offsets(start: Offsets, latest: Offsets, max_rows: int | None) -> Offsets:
    """The end offsets of the next batch: everything up to `latest`, or at most `max_rows`
    records shared between partitions in proportion to their backlog (each partition with
    a backlog gets at least one record, so none starves)."""
    backlog = {
        (t, p): max(0, latest[t][p] - start.get(t, {}).get(p, 0))
        for t in latest
        for p in latest[t]
    }
    total = sum(backlog.values())
    end = {t: dict(parts) for t, parts in start.items()}
    for (t, p), n in backlog.items():
        take = n
        if max_rows is not None and total > max_rows:
            take = min(n, max(1 if n else 0, n * max_rows // total))
        end.setdefault(t, {})[p] = start.get(t, {}).get(p, 0) + take
    return end


def ranges(start: Offsets, end: Offsets) -> list[tuple[str, int, int, int]]:
    """(topic, partition, from, until) for every partition with records in [from, until)."""
    out = []
    for topic, parts in sorted(end.items()):
        for p, until in sorted(parts.items(), key=lambda kv: int(kv[0])):
            begin = start.get(topic, {}).get(p, 0)
            if until > begin:
                out.append((topic, int(p), begin, until))
    return out


EARLIEST, LATEST = -2, -1
"""Spark's sentinels in a startingOffsets/endingOffsets JSON document."""


def resolve(doc: Offsets, low: Offsets, high: Offsets) -> Offsets:
    """`doc` with Spark's sentinels replaced: -2 by the partition's earliest offset, -1 by
    its latest (a partition the broker does not know keeps the sentinel's 0)."""
    out: Offsets = {}
    for topic, parts in doc.items():
        for p, off in parts.items():
            if off == EARLIEST:
                off = low.get(topic, {}).get(p, 0)
            elif off == LATEST:
                off = high.get(topic, {}).get(p, 0)
            out.setdefault(topic, {})[p] = off
    return out


def reconcile(
    start: Offsets, low: Offsets, high: Offsets, *, report_new: bool
) -> tuple[Offsets, list[str]]:
    """Where reading resumes, given the partitions as they are now (`low`/`high`: earliest
    and latest offsets of every partition read), and what could not be read (one message
    per partition, empty when nothing was lost).

    - a partition of `start` that no longer exists is dropped (should it come back, it is
      a new partition);
    - a next offset below the earliest offset (records removed by retention, topic
      truncated or recreated) or past the latest one (topic recreated with fewer records)
      moves to the earliest offset;
    - a partition not in `start` is added at its earliest offset; with `report_new`, one
      that does not start at 0 lost its first records (as Spark's Kafka source reports).
    """
    out: Offsets = {}
    lost: list[str] = []
    for topic, parts in start.items():
        for p, off in parts.items():
            if p not in high.get(topic, {}):
                lost.append(f"{topic}[{p}] is gone (topic deleted, or recreated with fewer "
                            f"partitions): its records from offset {off} on were not read")
                continue
            lo, hi = low[topic][p], high[topic][p]
            if off < lo:
                lost.append(f"{topic}[{p}]: offsets {off} to {lo - 1} are no longer "
                            f"available (the earliest offset is now {lo})")
                off = lo
            elif off > hi:
                lost.append(f"{topic}[{p}]: offset {off} is past the end of the partition "
                            f"({hi}): the topic was deleted and recreated (or the broker lost "
                            f"records); records of the old partition from offset {off} on were "
                            f"not read")
                off = lo
            out.setdefault(topic, {})[p] = off
    for topic, parts in high.items():
        for p in parts:
            if p in start.get(topic, {}):
                continue
            lo = low.get(topic, {}).get(p, 0)
            if report_new and lo > 0:
                lost.append(f"{topic}[{p}] is new but starts at offset {lo} instead of 0: "
                            f"offsets 0 to {lo - 1} were removed before the query saw them")
            out.setdefault(topic, {})[p] = lo
    return out, lost
