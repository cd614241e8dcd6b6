"""The SQLite schema and connection setup of the embedded metadata store.

Layout, and why:
- `versions` is keyed (bucket, key, sort_key DESC): the versions of a key are contiguous
  and newest first, which is exactly ListObjectVersions order, and the latest version of a
  key is one index seek. `versions_by_id` (unique) finds a version by its id.
- `latest` holds one row per key pointing at its latest version (maintained in the same
  transaction as every change of `versions`), so ListObjects walks only keys, not versions.
- `journal.seq` is the rowid: appending and reading ranges are b-tree seeks at the end.
- `pending_frees` lists the data of multipart parts a transaction dropped (abort, DeleteBucket,
  the parts a Complete left out) until the caller has freed it: a crash in between leaves
  it to the next cleanup, whatever that pass's limits on orphans say.
- `store_state.trimmed_through` remembers the highest seq retention removed, so that
  `last_seq` survives trimming the whole journal and truncated reads are detected.
Documents are JSON (orjson) stored as BLOBs; columns hold only what is indexed.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

SCHEMA_VERSION = 1

DDL = """
CREATE TABLE IF NOT EXISTS buckets (
    name TEXT PRIMARY KEY,
    doc BLOB NOT NULL
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS versions (
    bucket TEXT NOT NULL,
    key TEXT NOT NULL,
    sort_key TEXT NOT NULL,
    version_id TEXT NOT NULL,
    is_delete_marker INTEGER NOT NULL,
    doc BLOB NOT NULL,
    PRIMARY KEY (bucket, key, sort_key DESC)
) WITHOUT ROWID;
CREATE UNIQUE INDEX IF NOT EXISTS versions_by_id ON versions (bucket, key, version_id);

CREATE TABLE IF NOT EXISTS latest (
    bucket TEXT NOT NULL,
    key TEXT NOT NULL,
    sort_key TEXT NOT NULL,
    is_delete_marker INTEGER NOT NULL,
    PRIMARY KEY (bucket, key)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS uploads (
    upload_id TEXT PRIMARY KEY,
    bucket TEXT NOT NULL,
    key TEXT NOT NULL,
    doc BLOB NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS uploads_by_key ON uploads (bucket, key, upload_id);

CREATE TABLE IF NOT EXISTS parts (
    upload_id TEXT NOT NULL,
    part_number INTEGER NOT NULL,
    doc BLOB NOT NULL,
    PRIMARY KEY (upload_id, part_number)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS journal (
    seq INTEGER PRIMARY KEY,
    op TEXT NOT NULL,
    bucket TEXT NOT NULL,
    key TEXT NOT NULL,
    version_id TEXT,
    value BLOB,
    ts TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS checkpoints (
    consumer TEXT PRIMARY KEY,
    seq INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS pending_frees (
    data_key TEXT PRIMARY KEY,
    location TEXT NOT NULL
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS store_state (
    name TEXT PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;
"""


class Connection(sqlite3.Connection):
    """A plain sqlite3 connection that can be weakly referenced (the base class cannot)."""


def connect(path: Path, *, busy_timeout_ms: int) -> sqlite3.Connection:
    """A connection in autocommit mode (we issue BEGIN/SAVEPOINT/COMMIT ourselves).

    WAL lets readers run beside the one writer; synchronous=FULL makes every COMMIT fsync
    the WAL, so a committed change survives power loss, not only a process crash.
    """
    conn = sqlite3.connect(
        path,
        isolation_level=None,
        check_same_thread=False,
        timeout=busy_timeout_ms / 1000,
        factory=Connection,
    )
    conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
    conn.execute("PRAGMA synchronous = FULL")
    return conn


_DDL_NAMES = frozenset(re.findall(r"CREATE (?:UNIQUE )?(?:TABLE|INDEX) IF NOT EXISTS (\w+)", DDL))


def _current(conn: sqlite3.Connection) -> bool:
    """Whether the schema is this crossbeat's already: then opening writes nothing, so that a
    gateway can start (and serve reads) on a full disk."""
    if conn.execute("PRAGMA user_version").fetchone()[0] != SCHEMA_VERSION:
        return False
    names = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    return _DDL_NAMES.issubset(names)


def initialise(conn: sqlite3.Connection) -> None:
    """Switch the file to WAL and create the schema (idempotent; writes only if the schema
    is not current)."""
    mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
    if str(mode).lower() != "wal":
        raise RuntimeError(f"could not switch the metadata database to WAL (mode {mode})")
    if _current(conn):
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise RuntimeError(
                f"metadata database schema {version} is newer than this crossbeat ({SCHEMA_VERSION})"
            )
        for statement in DDL.split(";"):
            if statement.strip():
                conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:  # a failed COMMIT (SQLITE_FULL) has already rolled back
            conn.execute("ROLLBACK")
        raise
