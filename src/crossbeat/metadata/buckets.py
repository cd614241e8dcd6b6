"""Bucket rows: SQL over one connection (reads) or the open write transaction (changes)."""

from __future__ import annotations

import sqlite3
from typing import Any

from crossbeat.metadata.codec import check_text, dump, load
from crossbeat.metadata.errors import BucketExists, BucketNotEmpty, InvalidMetadata, NoSuchBucket
from crossbeat.metadata.models import BUCKET_MUTABLE_FIELDS, VERSIONING_STATES, Bucket
from crossbeat.metadata.writer import WriteTxn


def get(conn: sqlite3.Connection, name: str) -> Bucket | None:
    row = conn.execute("SELECT doc FROM buckets WHERE name = ?", (name,)).fetchone()
    return None if row is None else Bucket.from_dict(load(row[0]))


def require(conn: sqlite3.Connection, name: str) -> Bucket:
    bucket = get(conn, name)
    if bucket is None:
        raise NoSuchBucket(name)
    return bucket


def require_exists(conn: sqlite3.Connection, name: str) -> None:
    """NoSuchBucket unless `name` exists (cheaper than `require`: no document is parsed)."""
    if conn.execute("SELECT 1 FROM buckets WHERE name = ?", (name,)).fetchone() is None:
        raise NoSuchBucket(name)


def list_all(conn: sqlite3.Connection) -> list[Bucket]:
    rows = conn.execute("SELECT doc FROM buckets ORDER BY name").fetchall()
    return [Bucket.from_dict(load(doc)) for (doc,) in rows]


def _validate(bucket: Bucket) -> bytes:
    for field in ("name", "owner", "location", "created"):
        if not isinstance(getattr(bucket, field), str):
            raise InvalidMetadata(f"bucket field {field!r} must be a string")
    if not bucket.name:
        raise InvalidMetadata("bucket name must not be empty")
    check_text(bucket.name, "bucket name")
    if bucket.versioning not in VERSIONING_STATES:
        raise InvalidMetadata(f"bucket versioning must be one of {sorted(VERSIONING_STATES)}")
    if not isinstance(bucket.attrs, dict):
        raise InvalidMetadata("bucket attrs must be a dict")
    return dump(bucket.to_dict())


def create(txn: WriteTxn, bucket: Bucket) -> None:
    doc = _validate(bucket)
    existing = get(txn.conn, bucket.name)
    if existing is not None:
        raise BucketExists(existing)
    txn.conn.execute("INSERT INTO buckets(name, doc) VALUES (?, ?)", (bucket.name, doc))
    txn.append_journal("put", bucket.name, "", None, doc)


def update(txn: WriteTxn, name: str, changes: dict[str, Any]) -> Bucket:
    unknown = set(changes) - BUCKET_MUTABLE_FIELDS
    if unknown:
        raise InvalidMetadata(f"bucket fields cannot be changed: {sorted(unknown)}")
    bucket = require(txn.conn, name)
    for field, value in changes.items():
        setattr(bucket, field, value)
    doc = _validate(bucket)
    txn.conn.execute("UPDATE buckets SET doc = ? WHERE name = ?", (doc, name))
    txn.append_journal("put", name, "", None, doc)
    return bucket


def delete(txn: WriteTxn, name: str) -> None:
    """Remove the bucket; BucketNotEmpty while a version or delete marker remains (open
    uploads are the caller's to remove in the same transaction: `uploads.remove_all`)."""
    bucket = require(txn.conn, name)
    busy = txn.conn.execute("SELECT EXISTS (SELECT 1 FROM versions WHERE bucket = ?)", (name,)).fetchone()[0]
    if busy:
        raise BucketNotEmpty(name)
    txn.conn.execute("DELETE FROM buckets WHERE name = ?", (name,))
    txn.append_journal("del", name, "", None, dump(bucket.to_dict()))
