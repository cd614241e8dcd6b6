"""Object versions: the SQL behind get/put/delete/update/list of versions.

Reads take a connection inside a read transaction; changes take the open `WriteTxn`, keep
the `latest` table in step with `versions` and append their journal entry, all in the
transaction of the operation. `isLatest` is never trusted from a stored document: it is
computed against `latest` whenever a version is read.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from crossbeat.metadata import buckets
from crossbeat.metadata.codec import check_text, dump, load, require_str
from crossbeat.metadata.errors import InvalidMetadata, NoSuchVersion, RevisionMismatch
from crossbeat.metadata.ids import is_minted_id, new_version_id, version_id_after
from crossbeat.metadata.store import Meta, Precondition
from crossbeat.metadata.writer import WriteTxn

_SELECT = (
    "SELECT v.doc, v.sort_key = l.sort_key FROM versions v "
    "LEFT JOIN latest l ON l.bucket = v.bucket AND l.key = v.key "
)


def _meta(doc: bytes, is_latest: Any) -> Meta:
    meta: Meta = load(doc)
    meta["isLatest"] = bool(is_latest)
    return meta


def get(conn: sqlite3.Connection, bucket: str, key: str, version_id: str | None) -> Meta | None:
    if version_id is None:
        row = conn.execute(
            "SELECT v.doc, 1 FROM latest l JOIN versions v "
            "ON v.bucket = l.bucket AND v.key = l.key AND v.sort_key = l.sort_key "
            "WHERE l.bucket = ? AND l.key = ?",
            (bucket, key),
        ).fetchone()
    else:
        row = conn.execute(
            _SELECT + "WHERE v.bucket = ? AND v.key = ? AND v.version_id = ?",
            (bucket, key, version_id),
        ).fetchone()
    return None if row is None else _meta(*row)


def _refresh_latest(conn: sqlite3.Connection, bucket: str, key: str) -> str | None:
    """Point `latest` at the version with the greatest sortKey; return that sortKey."""
    top = conn.execute(
        "SELECT sort_key, is_delete_marker FROM versions WHERE bucket = ? AND key = ? "
        "ORDER BY sort_key DESC LIMIT 1",
        (bucket, key),
    ).fetchone()
    if top is None:
        conn.execute("DELETE FROM latest WHERE bucket = ? AND key = ?", (bucket, key))
        return None
    conn.execute(
        "INSERT INTO latest(bucket, key, sort_key, is_delete_marker) VALUES (?, ?, ?, ?) "
        "ON CONFLICT(bucket, key) DO UPDATE "
        "SET sort_key = excluded.sort_key, is_delete_marker = excluded.is_delete_marker",
        (bucket, key, top[0], top[1]),
    )
    return str(top[0])


def _latest_after_insert(conn: sqlite3.Connection, bucket: str, key: str) -> str:
    """`_refresh_latest` when the key is known to have a version: one statement."""
    row = conn.execute(
        "INSERT INTO latest(bucket, key, sort_key, is_delete_marker) "
        "SELECT bucket, key, sort_key, is_delete_marker FROM versions "
        "WHERE bucket = ? AND key = ? ORDER BY sort_key DESC LIMIT 1 "
        "ON CONFLICT(bucket, key) DO UPDATE "
        "SET sort_key = excluded.sort_key, is_delete_marker = excluded.is_delete_marker "
        "RETURNING sort_key",
        (bucket, key),
    ).fetchone()
    return str(row[0])


def _identity(meta: Meta) -> tuple[str, str, str, str | None]:
    """(bucket, key, versionId, sortKey or None if the store is to choose it) of a version
    to store, or InvalidMetadata."""
    if not isinstance(meta, dict):
        raise InvalidMetadata("version metadata must be a dict")
    bucket = require_str(meta, "bucket")
    key = require_str(meta, "key")
    version_id = require_str(meta, "versionId")
    sort_key = meta.get("sortKey") or None
    if sort_key is not None and not isinstance(sort_key, str):
        raise InvalidMetadata(f"sortKey must be a string, got {sort_key!r}")
    return bucket, key, version_id, None if sort_key is None else check_text(sort_key, "sortKey")


def put(
    txn: WriteTxn, meta: Meta, precondition: Precondition | None, *, bucket_checked: bool = False
) -> tuple[Meta, list[Meta]]:
    """Store `meta`; returns (stored meta, displaced versions). See MetadataStore.put_version.

    A version without a sortKey (a new one: PUT, copy, Complete, a delete marker) gets one
    that makes it the latest, as S3's last write wins: fresh from the clock, or, when the
    clock has stepped back behind the key's latest version, just above that. A version with
    a sortKey (a replica keeps its source's; an update of a version keeps its own) is stored
    at it. `bucket_checked`: the caller has seen the bucket in this transaction (skip the
    check).
    """
    bucket, key, version_id, given_sort_key = _identity(meta)
    sort_key = given_sort_key or new_version_id()
    conn = txn.conn
    if not bucket_checked:
        buckets.require_exists(conn, bucket)
    if precondition is not None:
        precondition(get(conn, bucket, key, None))

    displaced: list[Meta] = []
    revision = 1
    old_row = conn.execute(
        "SELECT doc FROM versions WHERE bucket = ? AND key = ? AND version_id = ?",
        (bucket, key, version_id),
    ).fetchone()
    if old_row is not None:
        old = get(conn, bucket, key, version_id)  # rare: parse it with isLatest
        assert old is not None
        # Same versionId: the null version, or a replica delivered again. Replace it, and
        # continue its revision count so a compare-and-set against the old row fails.
        displaced.append(old)
        revision = int(old.get("revision", 0)) + 1
        conn.execute(
            "DELETE FROM versions WHERE bucket = ? AND key = ? AND version_id = ?",
            (bucket, key, version_id),
        )
    stored = {k: v for k, v in meta.items() if k != "isLatest"}
    stored["sortKey"] = sort_key
    stored["revision"] = revision
    is_delete_marker = bool(stored.get("isDeleteMarker", False))

    def insert() -> None:
        try:
            conn.execute(
                "INSERT INTO versions(bucket, key, sort_key, version_id, is_delete_marker, doc) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (bucket, key, stored["sortKey"], version_id, is_delete_marker, dump(stored)),
            )
        except sqlite3.IntegrityError as exc:
            raise InvalidMetadata(
                f"sortKey {stored['sortKey']!r} is already used by another version of {bucket}/{key}"
            ) from exc

    insert()
    latest = _latest_after_insert(conn, bucket, key)
    if given_sort_key is None and latest != sort_key:
        # the clock stepped back (NTP, a restored VM) or another process's clock is ahead:
        # a new version still goes on top (rare: checked after the insert, so the usual
        # write pays no extra lookup)
        conn.execute(
            "DELETE FROM versions WHERE bucket = ? AND key = ? AND sort_key = ?",
            (bucket, key, sort_key),
        )
        sort_key = stored["sortKey"] = version_id_after(latest)
        insert()
        latest = _latest_after_insert(conn, bucket, key)
    stored["isLatest"] = latest == sort_key
    txn.append_journal("put", bucket, key, version_id, dump(stored))
    return stored, displaced


# Rows per multi-row statement in `put_many` (7 parameters a row at most: far below SQLite's
# 32766-parameter limit).
_GROUP_ROWS = 256


def put_many(txn: WriteTxn, metas: list[Meta], *, buckets_checked: bool = False) -> list[list[Meta]]:
    """`put(txn, meta, None)` for each, in order, in a few multi-row statements; returns
    each one's displaced versions.

    The result (rows, `latest`, journal entries and their seqs) is the one of the puts run
    one after another. The statements are per group, not per version, because each one is
    a GIL hand-off with the event loop (the sqlite3 module releases the GIL around every
    step). Raises MetadataError, having written nothing, if any version is refused, or if
    the group needs one-by-one treatment (a key replaced in place and written twice): the
    caller may then put them one by one. `buckets_checked`: every bucket named has been
    seen in this transaction.
    """
    conn = txn.conn
    rows: list[tuple[str, str, str, str | None, bool, Meta]] = []
    for meta in metas:
        rows.append((*_identity(meta), bool(meta.get("isDeleteMarker", False)), meta))
    if not buckets_checked:
        for name in {row[0] for row in rows}:
            buckets.require_exists(conn, name)
    ids = {(b, k, v) for b, k, v, *_ in rows}
    if len(ids) < len(rows):
        raise InvalidMetadata("the same version twice in one group")
    if not rows:
        return []
    if len(rows) <= _GROUP_ROWS:
        return _put_rows(txn, rows)
    out: list[list[Meta]] = []
    with txn.savepoint("put_many"):  # a later statement's refusal undoes the earlier ones
        for start in range(0, len(rows), _GROUP_ROWS):
            out += _put_rows(txn, rows[start : start + _GROUP_ROWS])
    return out


def _put_rows(
    txn: WriteTxn, given: list[tuple[str, str, str, str | None, bool, Meta]]
) -> list[list[Meta]]:
    """`put_many` for at most `_GROUP_ROWS` rows; writes nothing if it raises MetadataError."""
    conn = txn.conn
    # One statement reads what the group meets: the current latest sortKey of each key that
    # has versions, and the versions replaced in place (the null version, a replica
    # delivered again: rare). New keys return no row. (Every row fetched is a GIL hand-off
    # with the event loop, as every statement is.)
    met = conn.execute(
        "WITH x(b, k, v) AS (VALUES " + ", ".join(["(?, ?, ?)"] * len(given)) + ") "
        "SELECT DISTINCT x.b, x.k, l.sort_key, v.version_id FROM x "
        "JOIN latest l ON l.bucket = x.b AND l.key = x.k "
        "LEFT JOIN versions v ON v.bucket = x.b AND v.key = x.k AND v.version_id = x.v",
        [p for row in given for p in row[:3]],
    ).fetchall()
    latest = {(b, k): sort_key for b, k, sort_key, _ in met}
    rows = _with_sort_keys(given, latest)
    found = [(b, k, v) for b, k, _, v in met if v is not None]
    if found and len({(b, k) for b, k, *_ in rows}) < len(rows):
        # a key replaced in place and written again in the group: which version was the
        # latest when is only known one by one
        raise InvalidMetadata("a replaced key is written twice in one group")
    if not found:
        return _insert_rows(txn, rows, {}, latest)
    # the DELETEs below come before the INSERT that may refuse the group: undo them then
    with txn.savepoint("replace"):
        return _insert_rows(txn, rows, _take_replaced(conn, found), latest)


def _with_sort_keys(
    rows: list[tuple[str, str, str, str | None, bool, Meta]], latest: dict[tuple[str, str], str]
) -> list[tuple[str, str, str, str, bool, Meta]]:
    """The rows with a sortKey each: a new version (none given) gets one above its key's
    latest (`latest`, before the group) and the group's earlier rows, as `put` does."""
    top = dict(latest)
    out: list[tuple[str, str, str, str, bool, Meta]] = []
    for bucket, key, version_id, sort_key, is_delete_marker, meta in rows:
        if sort_key is None:
            sort_key = new_version_id()
            floor = top.get((bucket, key))
            if floor is not None and sort_key <= floor:  # the clock stepped back
                sort_key = version_id_after(floor)
        if sort_key > top.get((bucket, key), ""):
            top[(bucket, key)] = sort_key
        out.append((bucket, key, version_id, sort_key, is_delete_marker, meta))
    return out


def _take_replaced(conn: sqlite3.Connection, found: list[Any]) -> dict[tuple[str, str, str], Meta]:
    """Delete the versions about to be replaced in place; return them by (bucket, key, id)."""
    replaced: dict[tuple[str, str, str], Meta] = {}
    for bucket, key, version_id in found:
        old = get(conn, bucket, key, version_id)
        assert old is not None
        replaced[(bucket, key, version_id)] = old
        conn.execute(
            "DELETE FROM versions WHERE bucket = ? AND key = ? AND version_id = ?",
            (bucket, key, version_id),
        )
    return replaced


def _insert_rows(
    txn: WriteTxn,
    rows: list[tuple[str, str, str, str, bool, Meta]],
    replaced: dict[tuple[str, str, str], Meta],
    latest: dict[tuple[str, str], str],
) -> list[list[Meta]]:
    """Insert the rows' versions, move `latest` (given: each existing key's latest sortKey
    before the group), append their journal entries. Only the first statement can refuse
    (a sortKey already used), and a refused statement writes nothing: SQLite's ABORT
    undoes that statement alone."""
    conn = txn.conn
    stored_docs: list[Meta] = []
    params: list[Any] = []
    for bucket, key, version_id, sort_key, is_delete_marker, meta in rows:
        old = replaced.get((bucket, key, version_id))
        stored = {k: v for k, v in meta.items() if k != "isLatest"}
        stored["sortKey"] = sort_key
        stored["revision"] = 1 if old is None else int(old.get("revision", 0)) + 1
        stored_docs.append(stored)
        params += (bucket, key, sort_key, version_id, is_delete_marker, dump(stored))
    try:
        conn.execute(
            "INSERT INTO versions(bucket, key, sort_key, version_id, is_delete_marker, doc) "
            "VALUES " + ", ".join(["(?, ?, ?, ?, ?, ?)"] * len(rows)),
            params,
        )
    except sqlite3.IntegrityError as exc:
        raise InvalidMetadata(f"a sortKey of the group is already used: {exc}") from exc
    # `latest`: a new version is the key's latest if its sortKey is the greatest so far,
    # which the rows and the sortKeys read before tell (the statement's own rule, in SQL,
    # is the same). A replaced version may have been the latest with a greater sortKey:
    # those keys are recomputed from `versions`, one by one.
    became_latest: set[tuple[str, str, str]] = set()
    replaced_keys = {(b, k) for b, k, _ in replaced}
    simple = [row for row in rows if (row[0], row[1]) not in replaced_keys]
    if simple:
        conn.execute(
            "INSERT INTO latest(bucket, key, sort_key, is_delete_marker) VALUES "
            + ", ".join(["(?, ?, ?, ?)"] * len(simple))
            + " ON CONFLICT(bucket, key) DO UPDATE "
            "SET sort_key = excluded.sort_key, is_delete_marker = excluded.is_delete_marker "
            "WHERE excluded.sort_key > latest.sort_key",
            [p for b, k, _, sk, dm, _ in simple for p in (b, k, sk, dm)],
        )
        for bucket, key, _, sort_key, _, _ in simple:
            top = latest.get((bucket, key))
            if top is None or sort_key > top:
                latest[(bucket, key)] = sort_key
                became_latest.add((bucket, key, sort_key))
    for bucket, key in replaced_keys:
        became_latest.add((bucket, key, _latest_after_insert(conn, bucket, key)))
    entries: list[tuple[str, str, str, str | None, bytes | None]] = []
    for (bucket, key, version_id, sort_key, _, _), stored in zip(rows, stored_docs, strict=True):
        stored["isLatest"] = (bucket, key, sort_key) in became_latest
        entries.append(("put", bucket, key, version_id, dump(stored)))
    txn.append_journal_many(entries)
    return [
        [replaced[(b, k, v)]] if (b, k, v) in replaced else [] for b, k, v, *_ in rows
    ]


def delete(
    txn: WriteTxn, bucket: str, key: str, version_id: str, precondition: Precondition | None = None
) -> Meta | None:
    conn = txn.conn
    old = get(conn, bucket, key, version_id)
    if precondition is not None:
        precondition(old)
    if old is None:
        return None
    conn.execute(
        "DELETE FROM versions WHERE bucket = ? AND key = ? AND version_id = ?",
        (bucket, key, version_id),
    )
    _refresh_latest(conn, bucket, key)
    txn.append_journal("del", bucket, key, version_id, dump(old))
    return old


def update(
    txn: WriteTxn, bucket: str, key: str, version_id: str, new_meta: Meta, expected_revision: int
) -> Meta:
    if not isinstance(new_meta, dict):
        raise InvalidMetadata("version metadata must be a dict")
    conn = txn.conn
    current = get(conn, bucket, key, version_id)
    if current is None:
        raise NoSuchVersion(bucket, key, version_id, expected_revision)
    if current.get("revision") != expected_revision:
        raise RevisionMismatch(current, expected_revision)
    stored = {k: v for k, v in new_meta.items() if k != "isLatest"}
    # Identity and position are the store's: a metadata update never moves or renames.
    for field in ("bucket", "key", "versionId", "sortKey", "isDeleteMarker"):
        if field in current:
            stored[field] = current[field]
        else:
            stored.pop(field, None)
    stored["revision"] = expected_revision + 1
    conn.execute(
        "UPDATE versions SET doc = ? WHERE bucket = ? AND key = ? AND version_id = ?",
        (dump(stored), bucket, key, version_id),
    )
    stored["isLatest"] = current["isLatest"]
    txn.append_journal("put", bucket, key, version_id, dump(stored))
    return stored


def prefix_end(prefix: str) -> str | None:
    """The smallest string greater than every string starting with `prefix` (None: no bound).

    UTF-8 byte order equals code point order, so incrementing the last code point works;
    surrogates cannot be stored, so U+D7FF steps to U+E000.
    """
    chars = list(prefix)
    while chars:
        last = ord(chars.pop())
        if last < 0x10FFFF:
            nxt = 0xE000 if 0xD800 <= last + 1 <= 0xDFFF else last + 1
            return "".join(chars) + chr(nxt)
    return None


def _prefix_clause(column: str, prefix: str) -> tuple[str, list[Any]]:
    if not prefix:
        return "", []
    end = prefix_end(prefix)
    if end is None:
        return f" AND {column} >= ?", [prefix]
    return f" AND {column} >= ? AND {column} < ?", [prefix, end]


def list_latest(
    conn: sqlite3.Connection, bucket: str, prefix: str, start_after: str, limit: int,
    live_only: bool = False,
) -> list[Meta]:
    clause, args = _prefix_clause("l.key", prefix)
    # `latest` knows which keys end in a delete marker: skipped there, their documents are
    # neither read nor parsed (a listing past 120,000 of them took 200 ms for one key)
    live = " AND l.is_delete_marker = 0" if live_only else ""
    rows = conn.execute(
        "SELECT v.doc, 1 FROM latest l JOIN versions v "
        "ON v.bucket = l.bucket AND v.key = l.key AND v.sort_key = l.sort_key "
        "WHERE l.bucket = ? AND l.key > ?" + clause + live + " ORDER BY l.key LIMIT ?",
        [bucket, start_after, *args, limit],
    ).fetchall()
    return [_meta(*row) for row in rows]


def list_versions(
    conn: sqlite3.Connection,
    bucket: str,
    prefix: str,
    key_marker: str,
    version_marker: str,
    limit: int,
) -> list[Meta]:
    out: list[Meta] = []
    if key_marker and version_marker:
        marker = conn.execute(
            "SELECT sort_key FROM versions WHERE bucket = ? AND key = ? AND version_id = ?",
            (bucket, key_marker, version_marker),
        ).fetchone()
        # The marker version may be gone since the page that named it (deleted by a client
        # or lifecycle): the key's older versions must still follow. A minted id is its
        # version's sort key (or close to it), so it still places the page; before, the
        # listing went on at the next key and the older versions were never listed. Any
        # other id ('null', a replica's foreign id) cannot be placed: the key's versions are
        # listed again from its newest, repeating some rather than skipping any (a client
        # deleting every version would otherwise miss some and meet BucketNotEmpty).
        bound = marker[0] if marker is not None else (
            version_marker if is_minted_id(version_marker) else None)
        if key_marker.startswith(prefix):
            older = "AND v.sort_key < ? " if bound is not None else ""
            rows = conn.execute(
                _SELECT + "WHERE v.bucket = ? AND v.key = ? " + older + "ORDER BY v.sort_key DESC LIMIT ?",
                (bucket, key_marker, *([bound] if bound is not None else []), limit),
            ).fetchall()
            out.extend(_meta(*row) for row in rows)
    if len(out) >= limit:
        return out
    clause, args = _prefix_clause("v.key", prefix)
    rows = conn.execute(
        _SELECT
        + "WHERE v.bucket = ? AND v.key > ?"
        + clause
        + " ORDER BY v.key, v.sort_key DESC LIMIT ?",
        [bucket, key_marker, *args, limit - len(out)],
    ).fetchall()
    out.extend(_meta(*row) for row in rows)
    return out


def count_objects(conn: sqlite3.Connection, bucket: str) -> int:
    row = conn.execute(
        "SELECT count(*) FROM latest WHERE bucket = ? AND is_delete_marker = 0", (bucket,)
    ).fetchone()
    return int(row[0])
