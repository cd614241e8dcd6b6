"""The journal: reading, seq bookkeeping and retention (appending is `WriteTxn.append_journal`).

Why a reader never sees a gap: seqs are assigned by the one writer thread, each as the last
committed seq + 1, inside the transaction that makes the change, and SQLite commits a
transaction atomically. So the set of committed seqs is always 1..last_seq (minus a prefix
removed by retention), and a read transaction sees one committed state: either all of a
batch's entries or none of them. `read` runs its queries in one read transaction, so the
retention mark and the entries it returns come from the same state.
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta

import orjson

from crossbeat.metadata.errors import InvalidMetadata, JournalAhead, JournalTruncated
from crossbeat.metadata.models import JournalEntry
from crossbeat.metadata.settings import MetadataSettings

TRIMMED_THROUGH = "trimmed_through"


def iso_now(now: datetime | None = None) -> str:
    """UTC timestamp, ISO8601 with milliseconds and Z (sorts as text in time order)."""
    now = now or datetime.now(UTC)
    return now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"


def trimmed_through(conn: sqlite3.Connection) -> int:
    row = conn.execute(
        "SELECT value FROM store_state WHERE name = ?", (TRIMMED_THROUGH,)
    ).fetchone()
    return int(row[0]) if row else 0


# The newest committed seq as an SQL expression, so that a statement appending entries can
# number them itself (`WriteTxn.append_journal_many`): the greatest seq in the table, or the
# retention mark when retention emptied it, or 0 for a new store.
LAST_SEQ_SQL = (
    "max(coalesce((SELECT max(seq) FROM journal), 0), "
    "coalesce((SELECT value FROM store_state WHERE name = ?), 0))"
)
LAST_SEQ_PARAMS = (TRIMMED_THROUGH,)


def last_seq(conn: sqlite3.Connection) -> int:
    """Newest committed seq (0 for a new store); still right when retention emptied the table."""
    # one statement (every statement of the writer is a GIL hand-off with the event loop)
    return int(conn.execute(f"SELECT {LAST_SEQ_SQL}", LAST_SEQ_PARAMS).fetchone()[0])


def read(conn: sqlite3.Connection, after: int, limit: int) -> list[JournalEntry]:
    """Entries after `after` (caller holds a read transaction). JournalTruncated on a gap;
    JournalAhead when `after` is past the last entry (looked up only when none is found)."""
    if after < 0 or limit < 0:
        raise InvalidMetadata(
            f"journal read needs after >= 0 and limit >= 0 (got {after}, {limit})"
        )
    trimmed = trimmed_through(conn)
    if after < trimmed:
        raise JournalTruncated(after, trimmed + 1)
    rows = conn.execute(
        "SELECT seq, op, bucket, key, version_id, value, ts FROM journal "
        "WHERE seq > ? ORDER BY seq LIMIT ?",
        (after, limit),
    ).fetchall()
    if not rows and after and after > (last := last_seq(conn)):
        raise JournalAhead(after, last)
    return [
        JournalEntry(seq, op, bucket, key, vid, None if value is None else orjson.loads(value), ts)
        for seq, op, bucket, key, vid, value, ts in rows
    ]


def trim(conn: sqlite3.Connection, settings: MetadataSettings, now: datetime, max_rows: int) -> int:
    """Retention (caller holds the write transaction): remove every entry up to the highest of
    min(checkpoints), last - retention_entries, and the newest entry older than
    retention_seconds, but at most `max_rows` of them (the oldest), so one call never holds
    the writer long. Records the new mark in store_state; returns entries removed."""
    newest = last_seq(conn)
    already = trimmed_through(conn)
    through = already
    row = conn.execute("SELECT min(seq), count(*) FROM checkpoints").fetchone()
    if row[1]:
        through = max(through, min(int(row[0]), newest))
    if settings.journal_retention_entries is not None:
        through = max(through, newest - settings.journal_retention_entries)
    if settings.journal_retention_seconds is not None:
        cutoff = iso_now(now - timedelta(seconds=settings.journal_retention_seconds))
        # ts grows with seq (one writer), so scan from the oldest entry to the first young
        # one: the cost is proportional to what is removed, no index on ts is needed.
        young = conn.execute(
            "SELECT seq FROM journal WHERE seq > ? AND ts >= ? ORDER BY seq LIMIT 1",
            (already, cutoff),
        ).fetchone()
        through = max(through, (int(young[0]) - 1) if young else newest)
    # Seqs above the mark are dense, so this removes at most max_rows rows.
    through = min(through, already + max_rows)
    if through <= already:
        return 0
    removed = conn.execute("DELETE FROM journal WHERE seq <= ?", (through,)).rowcount
    conn.execute(
        "INSERT INTO store_state(name, value) VALUES (?, ?) "
        "ON CONFLICT(name) DO UPDATE SET value = excluded.value",
        (TRIMMED_THROUGH, through),
    )
    return int(removed)
