"""Applying replication outcomes to the source version with compare-and-set."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

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
        """One result per outcome, in order. Outcomes go to the source in batch requests
        (one compare-and-set request per round); outcomes of one version are applied one
        after another, in order. What a batch request cannot settle (the request failed,
        too many lost races) goes through `apply`, with retries."""
        results, leftovers = self._batches(outcomes)
        rest = run_keyed([outcomes[i] for i in leftovers], lambda o: (o.bucket, o.key),
                         self.apply, self.settings.concurrency)
        for i, r in zip(leftovers, rest, strict=True):
            results[i] = r
        return [r or UNCHANGED for r in results]

    def try_batch(self, outcomes: Sequence[ReplicationOutcome]) -> list[str | None]:
        """Like `apply_batch` without the retries: None for each outcome the batch
        requests did not settle (the source did not answer, too many lost races). For a
        caller that can hand those to someone else rather than wait out the backoff."""
        results, _ = self._batches(outcomes)
        return results

    def _batches(
        self, outcomes: Sequence[ReplicationOutcome]
    ) -> tuple[list[str | None], list[int]]:
        """(results, indexes of the outcomes left unsettled, in order)."""
        results: list[str | None] = [None] * len(outcomes)
        queues: dict[tuple[str, str, str], list[int]] = {}
        for i, o in enumerate(outcomes):
            queues.setdefault((o.bucket, o.key, o.versionId), []).append(i)
        current: dict[tuple[str, str, str], dict[str, Any]] = {}
        leftovers: list[int] = []
        try:
            while queues:
                heads = {ref: q[0] for ref, q in queues.items()}
                settled = self._round(outcomes, heads, current, results)
                for ref in heads:
                    if ref not in settled:  # given up here: the rest of it is left over
                        leftovers += queues.pop(ref)
                    else:
                        queues[ref].pop(0)
                        if not queues[ref]:
                            del queues[ref]
        except ReplicationError:
            pass  # the source is not answering batches: all that is unsettled is left over
        for q in queues.values():
            leftovers += q
        return results, sorted(i for i in leftovers if results[i] is None)

    def _round(
        self,
        outcomes: Sequence[ReplicationOutcome],
        heads: dict[tuple[str, str, str], int],
        current: dict[tuple[str, str, str], dict[str, Any]],
        results: list[str | None],
    ) -> set[tuple[str, str, str]]:
        """Apply the head outcome of each version, racing up to `max_races` times; returns
        the versions whose head is settled (`results` filled in). The others (an item
        error, too many lost races) are left to `apply`."""
        pending = dict(heads)
        settled: set[tuple[str, str, str]] = set()
        for _ in range(self.max_races):
            if not pending:
                break
            missing = [ref for ref in pending if ref not in current]
            for o in (outcomes[pending[ref]] for ref in missing):
                if o.source and "revision" in o.source:
                    current[(o.bucket, o.key, o.versionId)] = o.source
            unread = [ref for ref in missing if ref not in current]
            if unread:
                for ref, (md, _) in zip(unread, self.source.batch_read(unread, 0), strict=True):
                    if md is None:
                        results[pending.pop(ref)] = GONE
                        settled.add(ref)
                    else:
                        current[ref] = md
            updates: list[tuple[tuple[str, str, str], dict[str, Any]]] = []
            for ref, i in list(pending.items()):
                new = apply_outcome(current[ref], outcomes[i])
                if new is None:
                    results[pending.pop(ref)] = UNCHANGED
                    settled.add(ref)
                else:
                    updates.append((ref, new))
            if not updates:
                break
            answers = self.source.batch_update(
                [(new, int(current[ref].get("revision", 0))) for ref, new in updates]
            )
            for (ref, _), answer in zip(updates, answers, strict=True):
                if isinstance(answer, RevisionMismatch):
                    current[ref] = answer.current  # lost a race: recompute on what is there
                    if not answer.current:
                        current.pop(ref)
                    continue
                if isinstance(answer, ReplicationError):
                    current.pop(ref, None)
                    del pending[ref]  # left for `apply`, which retries it
                    continue
                i = pending.pop(ref)
                if answer is None:
                    results[i] = GONE
                    current.pop(ref, None)
                else:
                    results[i] = APPLIED
                    current[ref] = answer
                settled.add(ref)
        return settled
