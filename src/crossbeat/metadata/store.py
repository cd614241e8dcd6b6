"""The metadata store interface: buckets, object versions, multipart uploads, the journal.

All methods are synchronous and thread-safe; the ASGI gateway calls them from worker
threads. Every method that changes something returns only once the change is durable.

Object metadata is the ARCHITECTURE dict (`bucket, key, versionId, isDeleteMarker, size,
etag, …`); the store treats it as opaque JSON except for what it indexes, and maintains:
- `revision`: int per version, 1 on first write, +1 on every change of that version's row
  (including a replacement by a put with the same versionId, so a compare-and-set holding
  the old revision never overwrites the new object);
- `sortKey`: set by the gateway (`ids.new_version_id()`); versions of one key are ordered by
  sortKey descending, and the latest version is the one with the greatest sortKey;
- `isLatest`: computed when read (never stale).

Every change of a bucket or version appends one journal entry in the same transaction:
`put`/`del` with the bucket (`key` "", `versionId` None, value = the bucket as dict) or the
version (value = the stored metadata). Multipart uploads, parts and consumer checkpoints are
not journaled: they are not object metadata; completing an upload journals the version.
"""

from __future__ import annotations

import abc
import os
from collections.abc import Callable, Sequence
from typing import Any

from crossbeat.metadata.errors import MetadataError, StoreClosed
from crossbeat.metadata.models import Bucket, JournalEntry

Meta = dict[str, Any]
Precondition = Callable[[Meta | None], None]
# Makes the version to store from its bucket as the committing transaction sees it (None if
# the bucket is gone); raises to refuse that version.
BuildVersion = Callable[[Bucket | None], Meta]
# Per built version: (the version stored, the versions it displaced), or what refused it.
BuiltOutcome = tuple[Meta, list[Meta]] | BaseException


def build_versions(
    items: Sequence[tuple[str, BuildVersion]], get_bucket: Callable[[str], Bucket | None]
) -> tuple[list[BuiltOutcome | None], list[tuple[int, Bucket | None, Meta]]]:
    """Build each item's version, reading each bucket once (for `put_built_versions`).

    Returns the outcomes so far (the exception for an item whose build raised, None for
    the others) and (index, the bucket it was built from, version) for every version built.
    StoreClosed from `get_bucket` is raised.
    """
    seen: dict[str, Bucket | None] = {}
    outcomes: list[BuiltOutcome | None] = []
    built: list[tuple[int, Bucket | None, Meta]] = []
    for name, build in items:
        try:
            if name not in seen:
                seen[name] = get_bucket(name)
            meta = build(seen[name])
        except StoreClosed:
            raise
        except Exception as exc:  # noqa: BLE001 - that item's outcome
            outcomes.append(exc)
            continue
        built.append((len(outcomes), seen[name], meta))
        outcomes.append(None)
    return outcomes, built


class MetadataStore(abc.ABC):
    # -- buckets ------------------------------------------------------------------------------

    @abc.abstractmethod
    def create_bucket(self, bucket: Bucket) -> None:
        """Create `bucket`; BucketExists(existing) if the name is taken."""

    @abc.abstractmethod
    def get_bucket(self, name: str) -> Bucket | None: ...

    @abc.abstractmethod
    def list_buckets(self) -> list[Bucket]:
        """All buckets in name order."""

    @abc.abstractmethod
    def update_bucket(self, name: str, **changes: Any) -> Bucket:
        """Set any of versioning / replication / notification / lifecycle / cors / attrs (attrs is
        replaced as a whole); returns the stored bucket. NoSuchBucket; InvalidMetadata for
        other fields."""

    @abc.abstractmethod
    def delete_bucket(self, name: str) -> list[Meta]:
        """NoSuchBucket; BucketNotEmpty if any version or delete marker remains. Open multipart
        uploads go with the bucket, as on S3: returns their parts, whose data the caller frees."""

    @abc.abstractmethod
    def pending_frees(self) -> list[tuple[str, str]]:
        """(location, dataKey) of the multipart parts' data that aborting an upload, deleting
        a bucket with open uploads or completing an upload without some of its parts dropped,
        and that `forget_frees` has not been told is freed: the cleanup pass frees it (a
        crash came between the commit and the freeing)."""

    @abc.abstractmethod
    def intend_frees(self, locations: Sequence[tuple[str, str]]) -> None:
        """Record (location, dataKey) pairs in `pending_frees`: data no metadata points at
        any more that could not be deleted now (its repository unavailable), for the
        cleanup pass to free."""

    @abc.abstractmethod
    def forget_frees(self, data_keys: Sequence[str]) -> None:
        """The data of `data_keys` is freed: drop it from `pending_frees` (unknown keys are
        ignored)."""

    def buckets_generation(self) -> bytes:
        """A token that changes once any process sharing this store has changed a bucket
        (created, updated or deleted it): a cache of buckets is good while it stays the
        same (see metadata/bucket_generation.py). This default changes on every call, which
        allows no caching."""
        return os.urandom(8)

    # -- object versions ----------------------------------------------------------------------

    @abc.abstractmethod
    def get_version(self, bucket: str, key: str, version_id: str | None = None) -> Meta | None:
        """The version `version_id` ("null" is the null version), or with None the latest
        version (possibly a delete marker); None if there is no such version."""

    @abc.abstractmethod
    def put_version(self, meta: Meta, *, precondition: Precondition | None = None) -> list[Meta]:
        """Store `meta` as a version of (meta["bucket"], meta["key"]).

        A version with the same versionId (the null version, or a redelivered replica) is
        replaced in place; its position is given by the new sortKey. `precondition` is called
        inside the transaction with the current latest version (or None) and may raise to
        abort; its exception reaches the caller unchanged and nothing is changed. Returns the
        displaced versions, whose data the caller may free. NoSuchBucket if the bucket is gone.
        """

    @abc.abstractmethod
    def delete_version(
        self, bucket: str, key: str, version_id: str, *, precondition: Precondition | None = None
    ) -> Meta | None:
        """Permanently remove one version or delete marker and return it (None if absent);
        the next newest version becomes the latest. `precondition` is called inside the
        transaction with that version (or None) and may raise to abort, as in put_version."""

    @abc.abstractmethod
    def update_version(
        self, bucket: str, key: str, version_id: str, new_meta: Meta, *, expected_revision: int
    ) -> Meta:
        """Compare-and-set one version's metadata; bucket, key, versionId and sortKey are
        kept. RevisionMismatch(current) if the stored revision is not `expected_revision`
        (NoSuchVersion, a RevisionMismatch with current None, if the version is gone)."""

    # Batches (the replication engine moves many versions per request). These defaults loop
    # over the single-version calls; a store overrides them to share reads and commits.

    def get_versions(self, refs: Sequence[tuple[str, str, str]]) -> list[Meta | None]:
        """`get_version(bucket, key, versionId)` for each ref, in order."""
        return [self.get_version(b, k, v) for b, k, v in refs]

    def put_versions(self, metas: Sequence[Meta]) -> list[list[Meta] | MetadataError]:
        """`put_version` for each; each item is the displaced versions or the error that
        refused that one alone (the others are stored all the same)."""
        out: list[list[Meta] | MetadataError] = []
        for meta in metas:
            try:
                out.append(self.put_version(meta))
            except StoreClosed:
                raise
            except MetadataError as exc:
                out.append(exc)
        return out

    def put_built_versions(
        self,
        items: Sequence[tuple[str, BuildVersion]],
        done: Callable[[list[BuiltOutcome]], None],
    ) -> None:
        """Store versions that are built at commit time, as one group.

        For each (bucket name, build), `build(bucket)` gets the bucket as the storing
        transaction sees it (None if it is gone) and returns the version to store, or raises
        to refuse that item alone. `done(outcomes)` gets one outcome per item, in order, once
        every stored version is durable. An error that fails the whole commit (I/O) is every
        item's outcome. `done` may run on another thread after this returns; it must be quick
        and must not raise. StoreClosed, raised here, if the store is closed.

        This default runs synchronously through `get_bucket` and `put_versions`; a store
        overrides it to build inside its transaction without blocking the caller.
        """
        outcomes, built = build_versions(items, self.get_bucket)
        stored: list[list[Meta] | MetadataError] | list[Exception]
        try:
            stored = self.put_versions([meta for _, _, meta in built]) if built else []
        except StoreClosed:
            raise
        except Exception as exc:  # noqa: BLE001 - the outcome of every built item
            stored = [exc] * len(built)
        for (i, _, meta), result in zip(built, stored, strict=True):
            outcomes[i] = result if isinstance(result, BaseException) else (meta, result)
        done([o for o in outcomes if o is not None])

    def update_versions(self, updates: Sequence[tuple[Meta, int]]) -> list[Meta | MetadataError]:
        """`update_version` for each (new metadata, expected revision), identity taken from
        the metadata; each item is the stored metadata or the error for that one alone."""
        out: list[Meta | MetadataError] = []
        for meta, expected in updates:
            try:
                out.append(self.update_version(
                    meta["bucket"], meta["key"], meta["versionId"], meta, expected_revision=expected
                ))
            except StoreClosed:
                raise
            except MetadataError as exc:
                out.append(exc)
        return out

    @abc.abstractmethod
    def list_latest(
        self, bucket: str, *, prefix: str = "", start_after: str = "", limit: int = 1000,
        live_only: bool = False,
    ) -> list[Meta]:
        """The latest version of each key > start_after starting with prefix, in UTF-8 binary
        key order, delete markers included unless `live_only` (page by passing the last key
        as start_after)."""

    @abc.abstractmethod
    def list_versions(
        self,
        bucket: str,
        *,
        prefix: str = "",
        key_marker: str = "",
        version_marker: str = "",
        limit: int = 1000,
    ) -> list[Meta]:
        """All versions and delete markers in (key asc, sortKey desc) order. With key_marker
        only, start at keys > key_marker; with both markers, start after that version of
        key_marker (if that version no longer exists, at keys > key_marker)."""

    @abc.abstractmethod
    def count_objects(self, bucket: str) -> int:
        """How many keys have a latest version that is not a delete marker."""

    # -- multipart uploads --------------------------------------------------------------------

    @abc.abstractmethod
    def create_upload(self, upload: Meta) -> None:
        """Record {"uploadId","bucket","key","initiated","meta"}; NoSuchBucket."""

    @abc.abstractmethod
    def get_upload(self, bucket: str, key: str, upload_id: str) -> Meta | None: ...

    @abc.abstractmethod
    def put_part(self, upload_id: str, part: Meta) -> Meta | None:
        """Record a part {"partNumber","etag","size","location",…}; returns the part it
        displaced (same number) so its data can be freed. NoSuchUpload."""

    @abc.abstractmethod
    def list_parts(self, upload_id: str, *, marker: int = 0, limit: int = 1000) -> list[Meta]:
        """Parts with partNumber > marker in number order. NoSuchUpload."""

    @abc.abstractmethod
    def list_uploads(
        self,
        bucket: str,
        *,
        prefix: str = "",
        key_marker: str = "",
        upload_id_marker: str = "",
        limit: int = 1000,
    ) -> list[Meta]:
        """Open uploads in (key, uploadId) order, i.e. by key then age; markers as S3."""

    @abc.abstractmethod
    def complete_upload(
        self, upload_id: str, meta: Meta, *, precondition: Precondition | None = None
    ) -> tuple[list[Meta], list[Meta]]:
        """In one transaction put_version(meta) and remove the upload and its parts. Returns
        (displaced versions, unused parts): a part is unused when none of its location
        entries (location, dataKey) appears in meta["location"]. NoSuchUpload; PartReplaced
        (nothing changed) when a location entry of meta["location"] is no stored part's."""

    @abc.abstractmethod
    def abort_upload(self, upload_id: str) -> list[Meta]:
        """Remove the upload; returns its parts so their data can be freed. NoSuchUpload."""

    # -- journal ------------------------------------------------------------------------------

    @abc.abstractmethod
    def read_journal(self, after: int, limit: int) -> list[JournalEntry]:
        """Entries with seq > after, ascending, at most `limit`, without gaps.
        JournalTruncated(first_available) if some entries after `after` were trimmed;
        JournalAhead(last_seq) if `after` is past the last entry."""

    @abc.abstractmethod
    def wait_journal(self, after: int, timeout: float) -> bool:
        """Block until last_seq() > after (True) or `timeout` seconds pass (False)."""

    @abc.abstractmethod
    def last_seq(self) -> int:
        """The seq of the newest committed entry (0 if none was ever written)."""

    @abc.abstractmethod
    def set_checkpoint(self, consumer: str, seq: int) -> None:
        """Durably record that `consumer` has processed every entry up to `seq`."""

    @abc.abstractmethod
    def checkpoints(self) -> dict[str, int]: ...

    @abc.abstractmethod
    def trim_journal(self) -> int:
        """Drop entries every consumer's checkpoint has passed, and entries beyond the
        retention bounds (settings) whether consumed or not. Returns how many were removed."""

    @abc.abstractmethod
    def close(self) -> None:
        """Finish queued writes and release the database. Idempotent."""
