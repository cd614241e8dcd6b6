"""Errors the metadata store raises on purpose (all derive from `CrossbeatError`).

A precondition callable passed to `put_version` / `complete_upload` may raise anything; the
store propagates that exception to the caller unchanged, after rolling back only that
operation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from crossbeat.errors import CrossbeatError

if TYPE_CHECKING:
    from crossbeat.metadata.models import Bucket


class MetadataError(CrossbeatError):
    """Base class of the metadata store's own errors."""


class InvalidMetadata(MetadataError, ValueError):
    """The caller passed malformed input (missing field, wrong type); nothing was changed."""


class StoreUnavailable(MetadataError):
    """The database could not be opened or set up (a full disk, a file that is not a database,
    a directory without write permission); the message says which and why."""


class StoreClosed(MetadataError):
    """The store was closed; no further operation is accepted."""


class BucketExists(MetadataError):
    """`create_bucket` found a bucket of that name; `existing` is it (owner check is the caller's)."""

    def __init__(self, existing: Bucket) -> None:
        super().__init__(f"bucket {existing.name!r} already exists")
        self.existing = existing


class NoSuchBucket(MetadataError):
    def __init__(self, name: str) -> None:
        super().__init__(f"no such bucket: {name!r}")
        self.bucket = name


class BucketNotEmpty(MetadataError):
    def __init__(self, name: str) -> None:
        super().__init__(f"bucket {name!r} still holds versions or multipart uploads")
        self.bucket = name


class NoSuchUpload(MetadataError):
    def __init__(self, upload_id: str) -> None:
        super().__init__(f"no such multipart upload: {upload_id!r}")
        self.upload_id = upload_id


class PartReplaced(MetadataError):
    """`complete_upload` was given data of a part that is no longer stored: an UploadPart of
    the same number replaced it (and its data is being freed) after the caller read it."""

    def __init__(self, upload_id: str) -> None:
        super().__init__(f"a part of upload {upload_id!r} named by the completion was replaced")
        self.upload_id = upload_id


class RevisionMismatch(MetadataError):
    """Compare-and-set lost: `current` is the stored metadata now (None if the version is gone)."""

    def __init__(self, current: dict[str, Any] | None, expected: int | None = None) -> None:
        have = None if current is None else current.get("revision")
        super().__init__(f"revision mismatch: expected {expected}, stored {have}")
        self.current = current
        self.expected = expected


class NoSuchVersion(RevisionMismatch):
    """`update_version` addressed a version that does not exist.

    A subclass of RevisionMismatch (with `current = None`) so a caller that only handles
    RevisionMismatch still fails cleanly: the version it expected is not what is stored.
    """

    def __init__(self, bucket: str, key: str, version_id: str, expected: int | None = None) -> None:
        super().__init__(None, expected)
        self.args = (f"no such version: {bucket}/{key}?versionId={version_id}",)
        self.bucket, self.key, self.version_id = bucket, key, version_id


class JournalTruncated(MetadataError):
    """Entries the reader asked for were already removed by retention.

    `first_available` is the lowest seq still readable (reading `after=first_available - 1`
    works); the entries in between are lost to this reader, which must resynchronise.
    """

    def __init__(self, after: int, first_available: int) -> None:
        super().__init__(
            f"journal entries after seq {after} were removed by retention; "
            f"first available seq is {first_available}"
        )
        self.after = after
        self.first_available = first_available


class JournalAhead(MetadataError):
    """The reader asked for entries after a seq this journal never reached: it has followed
    another journal (a replaced data dir, another gateway). `last_seq` is this one's newest."""

    def __init__(self, after: int, last_seq: int) -> None:
        super().__init__(
            f"after={after} is beyond this journal's last entry ({last_seq}): "
            "the reader has followed a different journal"
        )
        self.after = after
        self.last_seq = last_seq
