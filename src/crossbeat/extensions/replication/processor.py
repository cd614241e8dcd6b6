"""Replicating versions to one destination site and reporting the outcome.

For each `ReplicationEntry` naming this site, the processor re-reads the source version
(so redelivered and stale entries act on the present state), skips the site when it is
already COMPLETED or the version is gone, replicates with bounded retries, and returns a
`ReplicationOutcome` (COMPLETED or FAILED) for `crossbeat-replication-status`.

A site that no query replicates to (a rule's StorageClass naming a site that is not in
`[extensions.replication.sites]`: "STANDARD", a typo) would leave its backends PENDING for
ever, unnoticed. The processor of the first configured site (in name order; the pipeline
runs one per configured site) fails them instead, with the reason in its log and in the
outcome's `error`; once the rule or the configuration is fixed, `crossbeat replication
retry` requeues them.

An endpoint that does not answer is not a failure of the versions: `process_batch` holds
them and returns only once both endpoints answer and they are settled (or after
`unavailable_hold_s`), so the caller's offsets wait with them and an outage of the site,
however long within that bound, ends without FAILED versions or an operator's retry.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
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


@dataclass
class _Held:
    """An entry left unsettled because an endpoint was unavailable."""

    entry: ReplicationEntry
    error: ReplicationError
    attempts: int
    md: dict[str, Any]


class _Pass:
    """One pass over a batch's entries. Once an endpoint is found unavailable (an entry's
    retries spent on it), the pass holds every entry it has not settled without trying it:
    the next entry of that object must not overtake it, and the others would only spend
    their own retries on the same outage."""

    def __init__(self, hold: bool) -> None:
        self.hold = hold
        self.down: ReplicationError | None = None


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
        """The outcome of replicating `entry` here, or None when there was nothing to do
        (no holding: an unavailable endpoint fails it once its retries are spent)."""
        result = self._process(entry, _Pass(hold=False))
        assert not isinstance(result, _Held)
        return result

    def _process(self, entry: ReplicationEntry, pass_: _Pass) -> ReplicationOutcome | _Held | None:
        if self.site not in entry.sites:
            return None
        if pass_.down is not None:
            return _Held(entry, pass_.down, 0, {})
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
        md = seen.get("md") or {}
        if error is not None and error.unavailable and pass_.hold:
            pass_.down = error
            return _Held(entry, error, attempts, md)
        return self._outcome(entry, md, error, attempts, result or "")

    def process_batch(self, entries: Sequence[ReplicationEntry]) -> list[ReplicationOutcome]:
        """Outcomes for `entries` (redelivered duplicates count once), with the FAILED
        ones of sites that are not configured if this processor settles those.

        Against a crossbeat destination, small versions and delete markers travel in batches:
        one request reads a batch's metadata and inlined bytes at the source, one creates the
        replicas at the destination. Whatever the batch path cannot settle (a large version,
        bytes the source could not inline, a batch request or item that failed retryably)
        goes through `process`, per object in order and objects in parallel, with retries.

        Entries held for an unavailable endpoint (see `_Pass`) are passed over again, in
        their order, once both endpoints answer a probe; this call returns when none is
        held, or fails those still held after `unavailable_hold_s`.
        """
        unique: dict[tuple[str, str, str], ReplicationEntry] = {}
        for e in entries:
            if self.site in e.sites:
                unique.setdefault((e.bucket, e.key, e.versionId), e)
        todo = list(unique.values())
        hold_s = self.settings.unavailable_hold_s
        outcomes = self._unconfigured(entries)
        held_since: float | None = None
        while todo:
            settled, held = self._pass(todo, _Pass(hold=hold_s > 0))
            outcomes += settled
            if not held:
                break
            now = time.monotonic()
            if held_since is None:
                held_since = now
                log.warning("replication to %s: holding %d versions PENDING until the endpoints "
                            "answer again (up to %.0f s): %s", self.site, len(held), hold_s, held[0].error)
            if now - held_since >= hold_s:
                log.error("replication to %s: endpoints unavailable for %.0f s; failing the %d "
                          "versions held", self.site, now - held_since, len(held))
                return outcomes + [self._outcome(h.entry, h.md, h.error, h.attempts) for h in held]
            self._wait_until_answering(held_since + hold_s)
            order = {id(e): i for i, e in enumerate(todo)}
            todo = sorted((h.entry for h in held), key=lambda e: order[id(e)])
        if held_since is not None:
            log.warning("replication to %s: endpoints answer again after %.0f s of holding",
                        self.site, time.monotonic() - held_since)
        return outcomes

    def _unconfigured(self, entries: Sequence[ReplicationEntry]) -> list[ReplicationOutcome]:
        """FAILED outcomes for the sites `entries` name that are not configured, if this is
        the processor that settles them (the first configured site's; see the module
        docstring), else none. Nothing is read: applying a FAILED outcome leaves a COMPLETED
        site and a version gone as they are."""
        if self.site != min(self.settings.sites, default=self.site):
            return []
        unknown: dict[tuple[str, str, str, str], ReplicationEntry] = {}
        for e in entries:
            for site in e.sites:
                if site not in self.settings.sites:
                    unknown.setdefault((e.bucket, e.key, e.versionId, site), e)
        if not unknown:
            return []
        configured = ", ".join(sorted(self.settings.sites))
        names = ", ".join(sorted({site for *_, site in unknown}))
        bucket, key, version_id, _ = next(iter(unknown))
        log.error("replication: failing %d version(s) (first %s/%s %s) for sites that are not "
                  "configured: %s (configured: %s). Fix the bucket's replication rule "
                  "(StorageClass names the sites) or configure the site, then run `crossbeat "
                  "replication retry`", len(unknown), bucket, key, version_id, names, configured)
        now = time.time()
        return [
            ReplicationOutcome(
                bucket=e.bucket, key=e.key, versionId=e.versionId, site=site, status=FAILED,
                dataStoreVersionId="", fingerprint="", attempts=0, ts=now,
                error=f"site {site!r} is not configured for replication (configured: "
                      f"{configured}); the rule's StorageClass names the destination sites",
            )
            for (*_, site), e in unknown.items()
        ]

    def _wait_until_answering(self, deadline: float) -> None:
        """Probe the source and the site, backing off, until both answer (or `deadline`)."""
        delay = self.settings.retry.backoff_min_s
        while True:
            try:
                self.source.ping()
                self.destination.ping()
                return
            except ReplicationError as exc:
                if not exc.unavailable:
                    return  # it answers; what it says is for the versions' own attempts
            if time.monotonic() + delay >= deadline:
                return
            self._sleep(delay)
            delay = min(delay * 2, self.settings.unavailable_probe_max_s)

    def _pass(
        self, todo: list[ReplicationEntry], pass_: _Pass
    ) -> tuple[list[ReplicationOutcome], list[_Held]]:
        """One pass over `todo`: (outcomes settled, entries held)."""
        if isinstance(self.destination, CrossbeatDestination):
            results = self._batch_paths(self.destination, todo, pass_)
        else:
            results = self._one_by_one(todo, pass_)
        return ([r for r in results if isinstance(r, ReplicationOutcome)],
                [r for r in results if isinstance(r, _Held)])

    def _batch_paths(
        self, destination: CrossbeatDestination, todo: list[ReplicationEntry], pass_: _Pass
    ) -> list[ReplicationOutcome | _Held]:
        # Objects with a version known to be large stream on their own path from the start,
        # beside the batches of small ones, rather than after them (all of an object's
        # versions go one way, so they stay in order).
        large_objects = {(e.bucket, e.key) for e in todo
                         if e.size is not None and e.size > SMALL_VERSION_BYTES}
        large = [e for e in todo if (e.bucket, e.key) in large_objects]
        small = [e for e in todo if (e.bucket, e.key) not in large_objects]
        chunks = _chunks(small, BATCH_VERSIONS)
        results: list[ReplicationOutcome | _Held] = []
        rest: list[ReplicationEntry] = []
        with ThreadPoolExecutor(max_workers=1) as streaming:
            early = streaming.submit(self._one_by_one, large, pass_) if large else None
            # A few chunks in flight: one reads at the source while another writes at the
            # destination, and a multi-process destination gateway writes several at once.
            with ThreadPoolExecutor(max_workers=min(BATCHES_IN_FLIGHT, len(chunks) or 1)) as pool:
                for done, left in pool.map(lambda c: self._batched(destination, c, pass_), chunks):
                    results += done
                    rest += left
            if early is not None:
                results += early.result()
        return results + self._one_by_one(rest, pass_)

    def _one_by_one(
        self, entries: Sequence[ReplicationEntry], pass_: _Pass
    ) -> list[ReplicationOutcome | _Held]:
        results = run_keyed(
            entries, lambda e: (e.bucket, e.key), lambda e: self._process(e, pass_),
            self.settings.concurrency,
        )
        return [r for r in results if r is not None]

    def _batched(
        self, destination: CrossbeatDestination, entries: Sequence[ReplicationEntry], pass_: _Pass
    ) -> tuple[list[ReplicationOutcome | _Held], list[ReplicationEntry]]:
        """(outcomes settled by the batch path, entries left for `_process`)."""
        if pass_.down is not None:
            return [], list(entries)
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
        outcomes: list[ReplicationOutcome | _Held] = []
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
