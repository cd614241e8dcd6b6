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
