"""Multipart uploads and their parts (not journaled: completing an upload journals the version)."""

from __future__ import annotations

import sqlite3
from typing import Any

from crossbeat.metadata import buckets, versions
from crossbeat.metadata.codec import dump, load, require_str
from crossbeat.metadata.errors import InvalidMetadata, NoSuchUpload, PartReplaced
from crossbeat.metadata.store import Meta, Precondition
from crossbeat.metadata.versions import prefix_end
from crossbeat.metadata.writer import WriteTxn


def _row(conn: sqlite3.Connection, upload_id: str) -> tuple[str, str, Meta]:
    row = conn.execute(
        "SELECT bucket, key, doc FROM uploads WHERE upload_id = ?", (upload_id,)
    ).fetchone()
    if row is None:
        raise NoSuchUpload(upload_id)
    return row[0], row[1], load(row[2])


def get(conn: sqlite3.Connection, bucket: str, key: str, upload_id: str) -> Meta | None:
    row = conn.execute(
        "SELECT doc FROM uploads WHERE upload_id = ? AND bucket = ? AND key = ?",
        (upload_id, bucket, key),
    ).fetchone()
    return None if row is None else load(row[0])


def create(txn: WriteTxn, upload: Meta) -> None:
    if not isinstance(upload, dict):
        raise InvalidMetadata("upload must be a dict")
    upload_id = require_str(upload, "uploadId")
    bucket = require_str(upload, "bucket")
    key = require_str(upload, "key")
    buckets.require_exists(txn.conn, bucket)
    try:
        txn.conn.execute(
            "INSERT INTO uploads(upload_id, bucket, key, doc) VALUES (?, ?, ?, ?)",
            (upload_id, bucket, key, dump(upload)),
        )
    except sqlite3.IntegrityError as exc:
        raise InvalidMetadata(f"upload id {upload_id!r} is already in use") from exc


def _parts(conn: sqlite3.Connection, upload_id: str) -> list[Meta]:
    rows = conn.execute(
        "SELECT doc FROM parts WHERE upload_id = ? ORDER BY part_number", (upload_id,)
    ).fetchall()
    return [load(doc) for (doc,) in rows]


def put_part(txn: WriteTxn, upload_id: str, part: Meta) -> Meta | None:
    if not isinstance(part, dict):
        raise InvalidMetadata("part must be a dict")
    number = part.get("partNumber")
    if not isinstance(number, int) or isinstance(number, bool) or number < 1:
        raise InvalidMetadata(f"partNumber must be a positive integer, got {number!r}")
    conn = txn.conn
    _row(conn, upload_id)
    old = conn.execute(
        "SELECT doc FROM parts WHERE upload_id = ? AND part_number = ?", (upload_id, number)
    ).fetchone()
    conn.execute(
        "INSERT INTO parts(upload_id, part_number, doc) VALUES (?, ?, ?) "
        "ON CONFLICT(upload_id, part_number) DO UPDATE SET doc = excluded.doc",
        (upload_id, number, dump(part)),
    )
    if old is None:
        return None
    replaced: Meta = load(old[0])
    intend_free(conn, [replaced])  # (its data is freed after the commit, as an abort's)
    return replaced


def list_parts(conn: sqlite3.Connection, upload_id: str, marker: int, limit: int) -> list[Meta]:
    _row(conn, upload_id)
    rows = conn.execute(
        "SELECT doc FROM parts WHERE upload_id = ? AND part_number > ? "
        "ORDER BY part_number LIMIT ?",
        (upload_id, marker, limit),
    ).fetchall()
    return [load(doc) for (doc,) in rows]


def list_uploads(
    conn: sqlite3.Connection,
    bucket: str,
    prefix: str,
    key_marker: str,
    upload_id_marker: str,
    limit: int,
) -> list[Meta]:
    args: list[Any] = [bucket]
    where = "bucket = ?"
    if prefix:
        where += " AND key >= ?"
        args.append(prefix)
        end = prefix_end(prefix)
        if end is not None:
            where += " AND key < ?"
            args.append(end)
    if key_marker and upload_id_marker:
        where += " AND (key > ? OR (key = ? AND upload_id > ?))"
        args += [key_marker, key_marker, upload_id_marker]
    elif key_marker:
        where += " AND key > ?"
        args.append(key_marker)
    rows = conn.execute(
        f"SELECT doc FROM uploads WHERE {where} ORDER BY key, upload_id LIMIT ?", [*args, limit]
    ).fetchall()
    return [load(doc) for (doc,) in rows]


def _remove(conn: sqlite3.Connection, upload_id: str) -> list[Meta]:
    parts = _parts(conn, upload_id)
    conn.execute("DELETE FROM parts WHERE upload_id = ?", (upload_id,))
    conn.execute("DELETE FROM uploads WHERE upload_id = ?", (upload_id,))
    return parts


def remove_all(conn: sqlite3.Connection, bucket: str) -> list[Meta]:
    """Remove every open upload of `bucket`; their parts, whose data the caller frees."""
    parts: list[Meta] = []
    for (upload_id,) in conn.execute("SELECT upload_id FROM uploads WHERE bucket = ?", (bucket,)).fetchall():
        parts += _remove(conn, upload_id)
    intend_free(conn, parts)
    return parts


def intend_free(conn: sqlite3.Connection, parts: list[Meta]) -> None:
    """Record the data of `parts`, dropped by this transaction, as to be freed (the table
    `pending_frees`): freed by the caller after the commit, or by the next cleanup pass if
    the process dies first. An upload of thousands of parts takes seconds to free; without
    the record a crash then left them to a cleanup pass that keeps orphans past a bound."""
    rows = [(loc["dataKey"], str(loc.get("location") or ""))
            for part in parts for loc in part.get("location") or []
            if isinstance(loc, dict) and isinstance(loc.get("dataKey"), str)]  # fmt: skip
    record_frees(conn, [(location, key) for key, location in rows])


def record_frees(conn: sqlite3.Connection, locations: list[tuple[str, str]]) -> None:
    """Record (location, dataKey) pairs in `pending_frees` (see `intend_free`)."""
    if locations:
        conn.executemany("INSERT OR REPLACE INTO pending_frees (data_key, location) VALUES (?, ?)",
                         [(key, location) for location, key in locations])


def pending_frees(conn: sqlite3.Connection) -> list[tuple[str, str]]:
    """(location, dataKey) of every data recorded by `intend_free` and not yet forgotten."""
    return [(loc, key) for key, loc in conn.execute("SELECT data_key, location FROM pending_frees")]


def forget_frees(conn: sqlite3.Connection, data_keys: list[str]) -> None:
    conn.executemany("DELETE FROM pending_frees WHERE data_key = ?", [(k,) for k in data_keys])


def _location_keys(entries: Any) -> set[tuple[Any, Any]]:
    if not isinstance(entries, list):
        return set()
    return {(e.get("location"), e.get("dataKey")) for e in entries if isinstance(e, dict)}


def complete(
    txn: WriteTxn, upload_id: str, meta: Meta, precondition: Precondition | None
) -> tuple[list[Meta], list[Meta]]:
    bucket, key, _ = _row(txn.conn, upload_id)
    if not isinstance(meta, dict) or meta.get("bucket") != bucket or meta.get("key") != key:
        raise InvalidMetadata(f"upload {upload_id!r} belongs to {bucket}/{key}")
    used = _location_keys(meta.get("location"))
    # The caller chose the parts before this transaction: an UploadPart of the same number
    # may have replaced one since, and its replacer frees the old data. Committing a version
    # that points at it would acknowledge an object that can never be read.
    if not used <= _location_keys([loc for p in _parts(txn.conn, upload_id)
                                   for loc in p.get("location") or []]):
        raise PartReplaced(upload_id)
    _, displaced = versions.put(txn, meta, precondition)
    parts = _remove(txn.conn, upload_id)
    unused = [p for p in parts if not (_location_keys(p.get("location")) & used)]
    intend_free(txn.conn, unused)
    return displaced, unused


def abort(txn: WriteTxn, upload_id: str) -> list[Meta]:
    _row(txn.conn, upload_id)
    parts = _remove(txn.conn, upload_id)
    intend_free(txn.conn, parts)
    return parts
