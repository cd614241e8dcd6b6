"""Replicating versions to one destination site and reporting the outcome.

For each `ReplicationEntry` naming this site, the processor re-reads the source version
(so redelivered and stale entries act on the present state), skips the site when it is
already COMPLETED or the version is gone, replicates with bounded retries, and returns a
`ReplicationOutcome` (COMPLETED or FAILED) for `crossbeat-replication-status`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from crossbeat.extensions.replication.destinations import (
    SMALL_VERSION_BYTES,
    CrossbeatDestination,
    Destination,
    make_destination,
)
from crossbeat.extensions.replication.errors import ReplicationError
from crossbeat.extensions.replication.gateway import GatewayClient
from crossbeat.extensions.replication.keyed import run_keyed
from crossbeat.extensions.replication.messages import (
    ReplicationEntry,
    ReplicationOutcome,
    content_fingerprint,
)
from crossbeat.extensions.replication.retry import with_retries
from crossbeat.extensions.replication.settings import ReplicationSettings
from crossbeat.extensions.replication.status import COMPLETED, FAILED, backend_status

log = logging.getLogger(__name__)
BATCH_VERSIONS = 100  # versions per batch read at the source
BATCHES_IN_FLIGHT = 4
BATCH_BYTES = 8 * 1024 * 1024  # bytes per batch write at the destination


class _Skip(Exception):
    """Nothing to do for this entry (site already COMPLETED, not a destination, gone)."""


class ReplicationProcessor:
    """Replicates entries to `site`; thread-safe, one instance per process is enough."""

    def __init__(
        self,
        settings: ReplicationSettings,
        site: str,
        *,
        source: GatewayClient | None = None,
        destination: Destination | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.settings = settings
        self.site = site
        site_settings = settings.site(site)
        self.source = source or GatewayClient(settings.source)
        self.destination = destination or make_destination(
            site_settings,
            threshold=settings.multipart_threshold_bytes,
            part_size=settings.part_size_bytes,
        )
        self._sleep = sleep

    def process(self, entry: ReplicationEntry) -> ReplicationOutcome | None:
        """The outcome of replicating `entry` here, or None when there was nothing to do."""
        if self.site not in entry.sites:
            return None
        seen: dict[str, Any] = {}

        def attempt() -> str:
            md = self.source.get_metadata(entry.bucket, entry.key, entry.versionId)
            if md is None:
                raise _Skip("version gone")
            status = backend_status(md, self.site)
            if status is None or status == COMPLETED:
                raise _Skip(f"site status {status}")
            seen["md"] = md
            return self.destination.replicate(md, self.source)

        try:
            result, error, attempts = with_retries(self.settings.retry, attempt, sleep=self._sleep)
        except _Skip:
            return None
        return self._outcome(entry, seen.get("md") or {}, error, attempts, result or "")

    def process_batch(self, entries: Sequence[ReplicationEntry]) -> list[ReplicationOutcome]:
        """Outcomes for `entries` (redelivered duplicates count once).

        Against a crossbeat destination, small versions and delete markers travel in batches:
        one request reads a batch's metadata and inlined bytes at the source, one creates the
        replicas at the destination. Whatever the batch path cannot settle (a large version,
        bytes the source could not inline, a batch request or item that failed retryably)
        goes through `process`, per object in order and objects in parallel, with retries.
        """
        unique: dict[tuple[str, str, str], ReplicationEntry] = {}
        for e in entries:
            if self.site in e.sites:
                unique.setdefault((e.bucket, e.key, e.versionId), e)
        todo = list(unique.values())
        if not isinstance(self.destination, CrossbeatDestination):
            return self._one_by_one(todo)
        destination = self.destination
        # Objects with a version known to be large stream on their own path from the start,
        # beside the batches of small ones, rather than after them (all of an object's
        # versions go one way, so they stay in order).
        large_objects = {(e.bucket, e.key) for e in todo
                         if e.size is not None and e.size > SMALL_VERSION_BYTES}
        large = [e for e in todo if (e.bucket, e.key) in large_objects]
        small = [e for e in todo if (e.bucket, e.key) not in large_objects]
        chunks = _chunks(small, BATCH_VERSIONS)
        outcomes: list[ReplicationOutcome] = []
        rest: list[ReplicationEntry] = []
        with ThreadPoolExecutor(max_workers=1) as streaming:
            early = streaming.submit(self._one_by_one, large) if large else None
            # A few chunks in flight: one reads at the source while another writes at the
            # destination, and a multi-process destination gateway writes several at once.
            with ThreadPoolExecutor(max_workers=min(BATCHES_IN_FLIGHT, len(chunks) or 1)) as pool:
                for done, left in pool.map(lambda c: self._batched(destination, c), chunks):
                    outcomes += done
                    rest += left
            if early is not None:
                outcomes += early.result()
        return outcomes + self._one_by_one(rest)

    def _one_by_one(self, entries: Sequence[ReplicationEntry]) -> list[ReplicationOutcome]:
        results = run_keyed(
            entries, lambda e: (e.bucket, e.key), self.process, self.settings.concurrency
        )
        return [r for r in results if r is not None]

    def _batched(
        self, destination: CrossbeatDestination, entries: Sequence[ReplicationEntry]
    ) -> tuple[list[ReplicationOutcome], list[ReplicationEntry]]:
        """(outcomes settled by the batch path, entries left for `process`)."""
        try:
            read = self.source.batch_read(
                [(e.bucket, e.key, e.versionId) for e in entries], SMALL_VERSION_BYTES
            )
        except ReplicationError:
            return [], list(entries)  # `process` retries each with backoff
        small: list[tuple[ReplicationEntry, dict[str, Any], bytes]] = []
        rest: list[ReplicationEntry] = []
        for entry, (md, data) in zip(entries, read, strict=True):
            if md is None:
                continue  # version gone
            status = backend_status(md, self.site)
            if status is None or status == COMPLETED:
                continue
            if md.get("isDeleteMarker") or not int(md.get("size") or 0):
                small.append((entry, md, b""))
            elif data is not None:
                small.append((entry, md, data))
            else:
                rest.append(entry)
        outcomes: list[ReplicationOutcome] = []
        for group in _by_bytes(small, BATCH_BYTES):
            try:
                errors = destination.replicate_batch([(md, data) for _, md, data in group])
            except ReplicationError:
                rest += [entry for entry, _, _ in group]
                continue
            for (entry, md, _), error in zip(group, errors, strict=True):
                if error is not None and error.retryable:
                    rest.append(entry)
                else:
                    outcomes.append(self._outcome(entry, md, error, 1))
        return outcomes, rest

    def _outcome(
        self, entry: ReplicationEntry, md: dict[str, Any], error: ReplicationError | None,
        attempts: int, result: str | None = None,
    ) -> ReplicationOutcome:
        if error is not None:
            log.warning("replication of %s/%s %s to %s failed after %d attempts: %s",
                        entry.bucket, entry.key, entry.versionId, self.site, attempts, error)
        return ReplicationOutcome(
            bucket=entry.bucket,
            key=entry.key,
            versionId=entry.versionId,
            site=self.site,
            status=COMPLETED if error is None else FAILED,
            dataStoreVersionId=(result if result is not None else entry.versionId) if error is None else "",
            fingerprint=content_fingerprint(md) if md else "",
            attempts=attempts,
            error=None if error is None else str(error),
            ts=time.time(),
            source=md or None,
        )


def _chunks(entries: list[ReplicationEntry], size: int) -> list[list[ReplicationEntry]]:
    """Chunks of about `size` entries; all entries of one object stay in one chunk, in
    order, so chunks processed concurrently never race on an object."""
    by_object: dict[tuple[str, str], list[ReplicationEntry]] = {}
    for e in entries:
        by_object.setdefault((e.bucket, e.key), []).append(e)
    chunks: list[list[ReplicationEntry]] = [[]]
    for group in by_object.values():
        if len(chunks[-1]) >= size:
            chunks.append([])
        chunks[-1] += group
    return [c for c in chunks if c]


def _by_bytes(
    items: list[tuple[ReplicationEntry, dict[str, Any], bytes]], limit: int
) -> Iterator[list[tuple[ReplicationEntry, dict[str, Any], bytes]]]:
    """Consecutive groups of `items` whose data adds up to at most `limit` (or one item)."""
    group: list[tuple[ReplicationEntry, dict[str, Any], bytes]] = []
    size = 0
    for item in items:
        if group and size + len(item[2]) > limit:
            yield group
            group, size = [], 0
        group.append(item)
        size += len(item[2])
    if group:
        yield group
