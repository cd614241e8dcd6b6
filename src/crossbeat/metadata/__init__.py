"""crossbeat.metadata: the metadata store (buckets, object versions, uploads) and its journal.

`open_store(url_or_path, settings)` returns a `MetadataStore`; the embedded default is
SQLite (`sqlite.py`) with group commit (`writer.py`). Every change appends a journal entry
in its own transaction, with dense seqs in commit order (`journal.py` explains why a reader
never sees a gap). Version ids come from `ids.new_version_id()`.
"""

from __future__ import annotations

from pathlib import Path

from crossbeat.metadata.errors import (
    BucketExists,
    BucketNotEmpty,
    InvalidMetadata,
    JournalAhead,
    JournalTruncated,
    MetadataError,
    NoSuchBucket,
    NoSuchUpload,
    NoSuchVersion,
    PartReplaced,
    RevisionMismatch,
    StoreClosed,
    StoreUnavailable,
)
from crossbeat.metadata.ids import new_upload_id, new_version_id
from crossbeat.metadata.models import Bucket, JournalEntry
from crossbeat.metadata.settings import MetadataSettings
from crossbeat.metadata.store import MetadataStore

__all__ = [
    "Bucket",
    "BucketExists",
    "BucketNotEmpty",
    "InvalidMetadata",
    "JournalEntry",
    "JournalAhead",
    "JournalTruncated",
    "MetadataError",
    "MetadataSettings",
    "MetadataStore",
    "NoSuchBucket",
    "NoSuchUpload",
    "PartReplaced",
    "NoSuchVersion",
    "RevisionMismatch",
    "StoreClosed",
    "StoreUnavailable",
    "new_upload_id",
    "new_version_id",
    "open_store",
]


def open_store(url_or_path: str | Path, settings: MetadataSettings | None = None) -> MetadataStore:
    """Open the store at `sqlite:///abs/path`, `sqlite://rel/path` or a plain path.

    `postgresql://…` is named in ARCHITECTURE.md but not implemented yet.
    """
    from crossbeat.metadata.sqlite import SqliteMetadataStore

    target = str(url_or_path)
    if target.startswith(("postgresql://", "postgres://")):
        raise NotImplementedError("the PostgreSQL metadata backend is not implemented yet")
    if target.startswith("sqlite://"):
        target = target[len("sqlite://") :]
        if target.startswith("//"):  # sqlite:////abs → //abs
            target = target[1:]
    elif "://" in target:
        raise InvalidMetadata(f"unknown metadata store URL scheme: {target!r}")
    if not target:
        raise InvalidMetadata("metadata store path is empty")
    return SqliteMetadataStore(Path(target), settings)
