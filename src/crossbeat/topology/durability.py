"""Per-workflow durability: how each workflow's topic is written and replicated (seed 001).

Two kinds of workflow share the brokers:

- non-replayable (bucket notification): a lost or doubled queue entry is a lost or doubled
  notification, so producers use acks=all and the topic keeps RF 4 with a copy on each of
  the two sites;
- replayable (replication, lifecycle, gc, ...): losing the last entries of a queue is
  repaired by the anti-entropy pass, so producers keep acks=1 and RF 3 for write latency.

Kafka's own topics (`__consumer_offsets`, `__transaction_state`) are the `kafka-internal`
workflow: Kafka writes offset commits and transaction markers with acks=all, RF 3.

`min.insync.replicas` is cluster-wide in the seed's deployment (2); a workflow spec leaves it
to the cluster unless it says otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from crossbeat.topology.errors import TopologyError

Acks = Literal["0", "1", "all"]


@dataclass(frozen=True)
class Durability:
    """The effective write and replication settings of one topic."""

    workflow: str
    acks: Acks
    replication_factor: int
    min_insync_replicas: int
    copy_on_each_site: bool
    replayable: bool
    safeguard: str

    @property
    def producer_properties(self) -> dict[str, str]:
        """Producer settings: idempotence needs acks=all, so it is off otherwise."""
        return {
            "acks": self.acks,
            "enable.idempotence": "true" if self.acks == "all" else "false",
        }


def _spec(
    workflow: str, acks: Acks, rf: int, each_site: bool, replayable: bool, safeguard: str
) -> Durability:
    # min_insync_replicas 0 means "the cluster's": filled in by `resolve`.
    return Durability(workflow, acks, rf, 0, each_site, replayable, safeguard)


_REPLAYABLE = "anti-entropy re-queues entries lost in the acks=1 window"
WORKFLOWS: dict[str, Durability] = {
    "notification": _spec(
        "notification",
        "all",
        4,
        True,
        False,
        "acks=all with a copy on each site; entries cannot be rebuilt",
    ),
    "replication": _spec("replication", "1", 3, False, True, _REPLAYABLE),
    "replication-status": _spec("replication-status", "1", 3, False, True, _REPLAYABLE),
    "lifecycle": _spec("lifecycle", "1", 3, False, True, _REPLAYABLE),
    "gc": _spec("gc", "1", 3, False, True, "the orphan scan finds data left by lost entries"),
    "metrics": _spec("metrics", "1", 3, False, True, "metrics are recomputed"),
    "migration-events": _spec("migration-events", "1", 3, False, True, _REPLAYABLE),
    "kafka-internal": _spec(
        "kafka-internal",
        "all",
        3,
        False,
        False,
        "Kafka's own topic: offset commits and transaction markers are written with acks=all",
    ),
}


def resolve(
    workflow: str,
    *,
    cluster_min_insync_replicas: int,
    acks: Acks | None = None,
    replication_factor: int | None = None,
    min_insync_replicas: int | None = None,
    copy_on_each_site: bool | None = None,
) -> Durability:
    """The workflow's defaults with the given overrides applied.

    A workflow not in WORKFLOWS is allowed when both `acks` and `replication_factor` are
    given (it is then treated as replayable only if acks is not "all"). Raises TopologyError
    for an unknown workflow without them, and when min.insync.replicas exceeds the
    replication factor (acks=all writes could never succeed).
    """
    base = WORKFLOWS.get(workflow)
    if base is None:
        if acks is None or replication_factor is None:
            raise TopologyError(
                f"unknown workflow {workflow!r} (known: {', '.join(WORKFLOWS)}); "
                "give acks and replication_factor to define another one"
            )
        base = _spec(
            workflow, acks, replication_factor, False, acks != "all", "defined by the site map"
        )
    result = replace(
        base,
        acks=acks or base.acks,
        replication_factor=replication_factor or base.replication_factor,
        min_insync_replicas=min_insync_replicas or cluster_min_insync_replicas,
        copy_on_each_site=base.copy_on_each_site
        if copy_on_each_site is None
        else copy_on_each_site,
    )
    if result.acks == "all" and result.min_insync_replicas > result.replication_factor:
        raise TopologyError(
            f"min.insync.replicas {result.min_insync_replicas} exceeds replication factor "
            f"{result.replication_factor}: acks=all writes would always fail"
        )
    return result
