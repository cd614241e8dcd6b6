"""Applying replication outcomes to the source version with compare-and-set."""

from __future__ import annotations

from collections.abc import Sequence

from crossbeat.extensions.replication.errors import ReplicationError, RevisionMismatch
from crossbeat.extensions.replication.gateway import GatewayClient
from crossbeat.extensions.replication.keyed import run_keyed
from crossbeat.extensions.replication.messages import ReplicationOutcome
from crossbeat.extensions.replication.retry import with_retries
from crossbeat.extensions.replication.settings import ReplicationSettings
from crossbeat.extensions.replication.status import apply_outcome

APPLIED, UNCHANGED, GONE = "applied", "unchanged", "gone"


class StatusUpdater:
    """Sets the site's status from an outcome and recomputes the global status.

    Each update reads the version, computes the new replicationInfo (`apply_outcome`: never
    turns COMPLETED into anything else, ignores outcomes for changed content) and writes
    it with `expectedRevision`; a lost race re-reads and recomputes. Redelivered outcomes
    change nothing.
    """

    def __init__(
        self, settings: ReplicationSettings, *, source: GatewayClient | None = None,
        max_races: int = 50,
    ) -> None:
        self.settings = settings
        self.source = source or GatewayClient(settings.source)
        self.max_races = max_races

    def _apply_once(self, outcome: ReplicationOutcome) -> str:
        # First try on the metadata the processor read; a lost race returns the current
        # metadata, so reads happen only when the outcome carries none.
        md = outcome.source if outcome.source and "revision" in outcome.source else None
        for _ in range(self.max_races):
            if md is None:
                md = self.source.get_metadata(outcome.bucket, outcome.key, outcome.versionId)
                if md is None:
                    return GONE
            new = apply_outcome(md, outcome)
            if new is None:
                return UNCHANGED
            try:
                stored = self.source.put_metadata_cas(new, int(md.get("revision", 0)))
            except RevisionMismatch as race:
                md = race.current or None
                continue
            return APPLIED if stored is not None else GONE
        raise ReplicationError("status update lost too many races", retryable=True)

    def apply(self, outcome: ReplicationOutcome) -> str:
        """APPLIED, UNCHANGED or GONE; raises ReplicationError if the source stays unreachable
        past the retry bounds (the pipeline then fails the batch and Spark retries it)."""
        result, error, _ = with_retries(self.settings.retry, lambda: self._apply_once(outcome))
        if error is not None:
            raise error
        assert result is not None
        return result

    def apply_batch(self, outcomes: Sequence[ReplicationOutcome]) -> list[str]:
        return run_keyed(
            outcomes, lambda o: (o.bucket, o.key), self.apply, self.settings.concurrency
        )
