"""The embedded metadata store: one SQLite file in WAL mode, group-committed writes.

Writes go through `GroupCommitWriter` (one thread, one connection, one fsync per batch).
Reads use one connection per calling thread; WAL lets them run while the writer commits,
and each read runs in its own read transaction so multi-statement reads see one state.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from crossbeat.metadata import buckets, journal, uploads, versions
from crossbeat.metadata.bucket_generation import BucketGeneration
from crossbeat.metadata.codec import check_text
from crossbeat.metadata.errors import (
    BucketExists,
    BucketNotEmpty,
    InvalidMetadata,
    MetadataError,
    NoSuchBucket,
    StoreClosed,
    StoreUnavailable,
)
from crossbeat.metadata.models import Bucket, JournalEntry
from crossbeat.metadata.schema import connect, initialise
from crossbeat.metadata.settings import MetadataSettings
from crossbeat.metadata.store import (
    BuildVersion,
    BuiltOutcome,
    Meta,
    MetadataStore,
    Precondition,
    build_versions,
)
from crossbeat.metadata.writer import GroupCommitWriter, WriterStats, WriteTxn

T = TypeVar("T")
log = logging.getLogger(__name__)
TRIM_CHUNK = 10_000


def _limit(limit: int) -> int:
    if not isinstance(limit, int) or limit < 0:
        raise InvalidMetadata(f"limit must be a non-negative integer, got {limit!r}")
    return limit


def _per_item(results: list[T | BaseException]) -> list[T | MetadataError]:
    """Per-item errors of the store are answers; anything else (I/O, a bug) is raised."""
    out: list[T | MetadataError] = []
    for r in results:
        if isinstance(r, BaseException) and (not isinstance(r, MetadataError) or isinstance(r, StoreClosed)):
            raise r
        out.append(r)
    return out


class _ItemRefused(Exception):
    """An item of a group was refused by the store: run the group again, isolated."""


def _store_built(
    txn: WriteTxn, items: Sequence[tuple[str, BuildVersion]], *, isolate: bool
) -> list[BuiltOutcome]:
    """Build the group's versions in `txn` and store them: all at once (`put_many`), or
    with `isolate` one by one, each in its own savepoint, so a refused one is left out."""
    outcomes, built = build_versions(items, lambda name: buckets.get(txn.conn, name))
    if not isolate:
        try:
            displaced = versions.put_many(
                txn, [meta for _, _, meta in built],
                buckets_checked=all(bucket is not None for _, bucket, _ in built),
            )  # fmt: skip
        except MetadataError as exc:
            raise _ItemRefused from exc
        for (i, _, meta), gone in zip(built, displaced, strict=True):
            outcomes[i] = (meta, gone)
    else:
        for i, bucket, meta in built:
            try:
                with txn.savepoint("item"):
                    _, gone = versions.put(txn, meta, None, bucket_checked=bucket is not None)
            except MetadataError as exc:
                outcomes[i] = exc
            else:
                outcomes[i] = (meta, gone)
    return [o for o in outcomes if o is not None]


def _unavailable(path: Path, exc: sqlite3.Error) -> StoreUnavailable:
    """A StoreUnavailable naming the database and, when it is so, a full disk (SQLite then
    says only "disk I/O error" if it cannot make its -wal or -shm file)."""
    why = str(exc)
    try:
        fs = os.statvfs(path.parent)
        if fs.f_bavail * fs.f_frsize < 1024 * 1024:
            why += " (the disk holding it has no space left)"
    except OSError:
        pass
    return StoreUnavailable(f"cannot open the metadata database {path}: {why}")


class SqliteMetadataStore(MetadataStore):
    def __init__(self, path: str | Path, settings: MetadataSettings | None = None) -> None:
        self.path = Path(path)
        self.settings = settings or MetadataSettings()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            conn = connect(self.path, busy_timeout_ms=self.settings.busy_timeout_ms)
        except sqlite3.Error as exc:
            raise _unavailable(self.path, exc) from exc
        try:
            initialise(conn)
            committed = journal.last_seq(conn)
        except sqlite3.Error as exc:
            conn.close()
            raise _unavailable(self.path, exc) from exc
        except BaseException:
            conn.close()
            raise
        # _committed is the newest seq this process has committed or observed; wait_journal
        # sleeps on _changed, which the writer notifies after each commit.
        self._committed = committed
        self._changed = threading.Condition()
        self._local = threading.local()
        # Weak: a reader connection lives as long as its thread's threading.local, so threads
        # that come and go do not pile up open connections; close() closes the rest.
        self._readers: weakref.WeakSet[sqlite3.Connection] = weakref.WeakSet()
        self._readers_lock = threading.Lock()
        self._closed = False
        self._bucket_generation = BucketGeneration(f"{self.path}-buckets.gen")
        self._writer = GroupCommitWriter(
            conn,
            seq_base=(journal.LAST_SEQ_SQL, journal.LAST_SEQ_PARAMS),
            now=journal.iso_now,
            on_commit=self._on_commit,
            max_batch=self.settings.max_batch,
            busy_timeout_s=self.settings.busy_timeout_ms / 1000,
            lock_path=f"{self.path}-writer.lock",
            db_path=str(self.path),
        )
        self._stop_trimming = threading.Event()
        self._trimmer: threading.Thread | None = None
        if self.settings.journal_trim_interval_seconds is not None:
            self._trimmer = threading.Thread(
                target=self._trim_periodically,
                args=(self.settings.journal_trim_interval_seconds,),
                name="metadata-journal-trim",
                daemon=True,
            )
            self._trimmer.start()

    # -- plumbing -----------------------------------------------------------------------------

    @property
    def writer_stats(self) -> WriterStats:
        """Commits and operations so far (group commit shows as operations > commits)."""
        return self._writer.stats

    def open_readers(self) -> int:
        """Reader connections currently open (one per thread that has read and still lives)."""
        with self._readers_lock:
            return len(self._readers)

    def pending_writes(self) -> int:
        """Write operations queued behind the batch being committed."""
        return self._writer.pending()

    def _on_commit(self, last_seq: int) -> None:
        with self._changed:
            if last_seq > self._committed:
                self._committed = last_seq
                self._changed.notify_all()

    def _trim_periodically(self, interval: float) -> None:
        while not self._stop_trimming.wait(interval):
            try:
                removed = self.trim_journal()
            except StoreClosed:
                return
            except Exception:  # keep trimming later; a failed trim loses nothing
                log.exception("journal retention failed")
            else:
                if removed:
                    log.info("journal retention removed %d entries", removed)

    def _write(self, fn: Callable[[WriteTxn], T]) -> T:
        return self._writer.submit(fn)

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        if self._closed:
            raise StoreClosed("metadata store is closed")
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = connect(self.path, busy_timeout_ms=self.settings.busy_timeout_ms)
            conn.execute("PRAGMA query_only = 1")
            with self._readers_lock:
                self._readers.add(conn)
            self._local.conn = conn
        conn.execute("BEGIN")
        try:
            yield conn
        finally:
            conn.execute("COMMIT")

    # -- buckets ------------------------------------------------------------------------------

    def create_bucket(self, bucket: Bucket) -> None:
        with self._bumping():
            self._write(lambda txn: buckets.create(txn, bucket))

    def get_bucket(self, name: str) -> Bucket | None:
        with self._read() as conn:
            return buckets.get(conn, name)

    def list_buckets(self) -> list[Bucket]:
        with self._read() as conn:
            return buckets.list_all(conn)

    def update_bucket(self, name: str, **changes: Any) -> Bucket:
        with self._bumping():
            return self._write(lambda txn: buckets.update(txn, name, changes))

    def delete_bucket(self, name: str) -> list[Meta]:
        def op(txn: WriteTxn) -> list[Meta]:
            buckets.delete(txn, name)
            return uploads.remove_all(txn.conn, name)

        with self._bumping():
            return self._write(op)

    @contextmanager
    def _bumping(self) -> Iterator[None]:
        """Bump the buckets generation after a bucket change: after it commits, and when its
        outcome is unknown (a spurious bump costs each process a query); not when the store
        refused it unchanged (a CreateBucket repeated by its owner, the most common)."""
        try:
            yield
        except (BucketExists, NoSuchBucket, BucketNotEmpty, InvalidMetadata, StoreClosed):
            raise
        except BaseException:
            self._bucket_generation.bump()
            raise
        self._bucket_generation.bump()

    def buckets_generation(self) -> bytes:
        return self._bucket_generation.current()

    # -- object versions ----------------------------------------------------------------------

    def get_version(self, bucket: str, key: str, version_id: str | None = None) -> Meta | None:
        with self._read() as conn:
            return versions.get(conn, bucket, key, version_id)

    def put_version(self, meta: Meta, *, precondition: Precondition | None = None) -> list[Meta]:
        return self._write(lambda txn: versions.put(txn, meta, precondition)[1])

    def put_version_stored(
        self, meta: Meta, *, precondition: Precondition | None = None
    ) -> tuple[Meta, list[Meta]]:
        """Like put_version, but also returns the stored metadata (revision, isLatest)."""
        return self._write(lambda txn: versions.put(txn, meta, precondition))

    def delete_version(
        self, bucket: str, key: str, version_id: str, *, precondition: Precondition | None = None
    ) -> Meta | None:
        return self._write(lambda txn: versions.delete(txn, bucket, key, version_id, precondition))

    def update_version(
        self, bucket: str, key: str, version_id: str, new_meta: Meta, *, expected_revision: int
    ) -> Meta:
        return self._write(
            lambda txn: versions.update(txn, bucket, key, version_id, new_meta, expected_revision)
        )

    def get_versions(self, refs: Sequence[tuple[str, str, str]]) -> list[Meta | None]:
        with self._read() as conn:  # one read transaction: one consistent state
            return [versions.get(conn, b, k, v) for b, k, v in refs]

    def put_versions(self, metas: Sequence[Meta]) -> list[list[Meta] | MetadataError]:
        def op(meta: Meta) -> Callable[[WriteTxn], list[Meta]]:
            return lambda txn: versions.put(txn, meta, None)[1]

        return _per_item(self._writer.submit_many([op(m) for m in metas]))

    def put_built_versions(
        self,
        items: Sequence[tuple[str, BuildVersion]],
        done: Callable[[list[BuiltOutcome]], None],
    ) -> None:
        """One writer operation for the group, queued without waiting (see the interface).

        Buckets are read and versions built inside the write transaction. The group is
        stored in a few multi-row statements (every statement is a GIL hand-off between
        this thread and the event loop); if the store refuses one, that attempt writes
        nothing (see `versions.put_many`) and the group is stored again with a savepoint per
        item, so that only the refused one is left out.
        """

        def op(txn: WriteTxn) -> list[BuiltOutcome]:
            try:
                return _store_built(txn, items, isolate=False)
            except _ItemRefused:  # nothing written: again, one by one
                return _store_built(txn, items, isolate=True)

        def finished(ok: bool, value: Any) -> None:
            done(value if ok else [value] * len(items))

        self._writer.submit_nowait(op, finished)

    def update_versions(self, updates: Sequence[tuple[Meta, int]]) -> list[Meta | MetadataError]:
        def op(meta: Meta, expected: int) -> Callable[[WriteTxn], Meta]:
            return lambda txn: versions.update(
                txn, meta["bucket"], meta["key"], meta["versionId"], meta, expected
            )

        return _per_item(self._writer.submit_many([op(m, e) for m, e in updates]))

    def list_latest(
        self, bucket: str, *, prefix: str = "", start_after: str = "", limit: int = 1000,
        live_only: bool = False,
    ) -> list[Meta]:
        check_text(prefix, "prefix")
        check_text(start_after, "start_after")
        with self._read() as conn:
            return versions.list_latest(conn, bucket, prefix, start_after, _limit(limit), live_only)

    def list_versions(
        self,
        bucket: str,
        *,
        prefix: str = "",
        key_marker: str = "",
        version_marker: str = "",
        limit: int = 1000,
    ) -> list[Meta]:
        check_text(prefix, "prefix")
        check_text(key_marker, "key_marker")
        with self._read() as conn:
            return versions.list_versions(
                conn, bucket, prefix, key_marker, version_marker, _limit(limit)
            )

    def count_objects(self, bucket: str) -> int:
        with self._read() as conn:
            return versions.count_objects(conn, bucket)

    # -- multipart uploads --------------------------------------------------------------------

    def create_upload(self, upload: Meta) -> None:
        self._write(lambda txn: uploads.create(txn, upload))

    def get_upload(self, bucket: str, key: str, upload_id: str) -> Meta | None:
        with self._read() as conn:
            return uploads.get(conn, bucket, key, upload_id)

    def put_part(self, upload_id: str, part: Meta) -> Meta | None:
        return self._write(lambda txn: uploads.put_part(txn, upload_id, part))

    def list_parts(self, upload_id: str, *, marker: int = 0, limit: int = 1000) -> list[Meta]:
        with self._read() as conn:
            return uploads.list_parts(conn, upload_id, marker, _limit(limit))

    def list_uploads(
        self,
        bucket: str,
        *,
        prefix: str = "",
        key_marker: str = "",
        upload_id_marker: str = "",
        limit: int = 1000,
    ) -> list[Meta]:
        check_text(prefix, "prefix")
        check_text(key_marker, "key_marker")
        with self._read() as conn:
            return uploads.list_uploads(
                conn, bucket, prefix, key_marker, upload_id_marker, _limit(limit)
            )

    def complete_upload(
        self, upload_id: str, meta: Meta, *, precondition: Precondition | None = None
    ) -> tuple[list[Meta], list[Meta]]:
        return self._write(lambda txn: uploads.complete(txn, upload_id, meta, precondition))

    def abort_upload(self, upload_id: str) -> list[Meta]:
        return self._write(lambda txn: uploads.abort(txn, upload_id))

    def pending_frees(self) -> list[tuple[str, str]]:
        with self._read() as conn:
            return uploads.pending_frees(conn)

    def intend_frees(self, locations: Sequence[tuple[str, str]]) -> None:
        if locations:
            rows = list(locations)
            self._write(lambda txn: uploads.record_frees(txn.conn, rows))

    def forget_frees(self, data_keys: Sequence[str]) -> None:
        if data_keys:
            keys = list(data_keys)
            self._write(lambda txn: uploads.forget_frees(txn.conn, keys))

    # -- journal ------------------------------------------------------------------------------

    def read_journal(self, after: int, limit: int) -> list[JournalEntry]:
        with self._read() as conn:
            return journal.read(conn, after, _limit(limit))

    def wait_journal(self, after: int, timeout: float) -> bool:
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            with self._changed:
                remaining = deadline - time.monotonic()
                if self._committed <= after and remaining > 0:
                    self._changed.wait(min(remaining, self.settings.journal_poll_seconds))
                if self._committed > after:
                    return True
            # Woken by the poll interval (or the deadline): look at the database itself, in
            # case another process committed to the same file.
            seen = self.last_seq()
            with self._changed:
                self._committed = max(self._committed, seen)
                if self._committed > after:
                    return True
            if time.monotonic() >= deadline:
                return False

    def last_seq(self) -> int:
        with self._read() as conn:
            return journal.last_seq(conn)

    def set_checkpoint(self, consumer: str, seq: int) -> None:
        if not isinstance(consumer, str) or not consumer:
            raise InvalidMetadata("checkpoint consumer must be a non-empty string")
        check_text(consumer, "checkpoint consumer")
        if not isinstance(seq, int) or seq < 0:
            raise InvalidMetadata(f"checkpoint seq must be a non-negative integer, got {seq!r}")

        def op(txn: WriteTxn) -> None:
            txn.conn.execute(
                "INSERT INTO checkpoints(consumer, seq) VALUES (?, ?) "
                "ON CONFLICT(consumer) DO UPDATE SET seq = excluded.seq",
                (consumer, seq),
            )

        self._write(op)

    def checkpoints(self) -> dict[str, int]:
        with self._read() as conn:
            rows = conn.execute("SELECT consumer, seq FROM checkpoints ORDER BY consumer")
            return {consumer: int(seq) for consumer, seq in rows}

    def delete_checkpoint(self, consumer: str) -> None:
        """Forget a consumer, so its checkpoint no longer holds back retention."""
        self._write(
            lambda txn: txn.conn.execute("DELETE FROM checkpoints WHERE consumer = ?", (consumer,))
        )

    def trim_journal(self, *, now: datetime | None = None) -> int:
        """Retention (see MetadataStore); `now` (aware datetime) overrides the clock.

        Removes in chunks of TRIM_CHUNK entries, one write operation each, so that PUTs
        queued meanwhile are committed between chunks instead of waiting for the whole trim.
        """
        when = now or datetime.now(UTC)
        total = 0
        while True:
            removed = self._write(
                lambda txn: journal.trim(txn.conn, self.settings, when, TRIM_CHUNK)
            )
            total += removed
            if removed < TRIM_CHUNK:
                return total

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._stop_trimming.set()
        if self._trimmer is not None:
            self._trimmer.join()
        self._writer.close()
        with self._readers_lock:
            for conn in list(self._readers):
                conn.close()
            self._readers.clear()
        self._bucket_generation.close()

    def __enter__(self) -> SqliteMetadataStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
