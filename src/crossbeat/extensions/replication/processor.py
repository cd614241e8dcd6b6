"""Replicating versions to one destination site and reporting the outcome.

For each `ReplicationEntry` naming this site, the processor re-reads the source version
(so redelivered and stale entries act on the present state), skips the site when it is
already COMPLETED or the version is gone, replicates with bounded retries, and returns a
`ReplicationOutcome` (COMPLETED or FAILED) for `crossbeat-replication-status`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from crossbeat.extensions.replication.destinations import Destination, make_destination
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
        md = seen.get("md") or {}
        if error is not None:
            log.warning("replication of %s/%s %s to %s failed after %d attempts: %s",
                        entry.bucket, entry.key, entry.versionId, self.site, attempts, error)
        return ReplicationOutcome(
            bucket=entry.bucket,
            key=entry.key,
            versionId=entry.versionId,
            site=self.site,
            status=COMPLETED if error is None else FAILED,
            dataStoreVersionId=result or "",
            fingerprint=content_fingerprint(md) if md else "",
            attempts=attempts,
            error=None if error is None else str(error),
            ts=time.time(),
            source=md or None,
        )

    def process_batch(self, entries: Sequence[ReplicationEntry]) -> list[ReplicationOutcome]:
        """Outcomes for `entries`: per object in order, objects in parallel (`concurrency`)."""
        results = run_keyed(
            entries, lambda e: (e.bucket, e.key), self.process, self.settings.concurrency
        )
        return [r for r in results if r is not None]
