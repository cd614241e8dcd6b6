"""Pure status arithmetic on `replicationInfo` (no I/O): global status and outcomes."""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

from crossbeat.extensions.replication.messages import ReplicationOutcome, content_fingerprint

PENDING = "PENDING"
PROCESSING = "PROCESSING"
COMPLETED = "COMPLETED"
FAILED = "FAILED"
REPLICA = "REPLICA"


def global_status(backend_statuses: Iterable[str]) -> str:
    """ARCHITECTURE: FAILED if any backend failed, else PROCESSING/PENDING while any is
    pending (PROCESSING once some site completed), else COMPLETED."""
    statuses = list(backend_statuses)
    if any(s == FAILED for s in statuses):
        return FAILED
    if any(s in (PENDING, PROCESSING) for s in statuses):
        return PROCESSING if any(s == COMPLETED for s in statuses) else PENDING
    return COMPLETED


def sites_of(replication_info: dict[str, Any]) -> list[str]:
    """Destination sites: the backends, else the rule's StorageClass ("b,c[:preferred_read]")."""
    backends = replication_info.get("backends") or []
    if backends:
        return [b["site"] for b in backends if b.get("site")]
    storage_class = str(replication_info.get("storageClass") or "")
    return [s.split(":")[0].strip() for s in storage_class.split(",") if s.strip()]


def backend_status(md: dict[str, Any], site: str) -> str | None:
    """The status of `site` in the version's replicationInfo (None if not a destination)."""
    for backend in (md.get("replicationInfo") or {}).get("backends") or []:
        if backend.get("site") == site:
            return str(backend.get("status") or PENDING)
    return None


def apply_outcome(md: dict[str, Any], outcome: ReplicationOutcome) -> dict[str, Any] | None:
    """The metadata with `outcome` applied, or None when it must not change anything.

    Rules (idempotent, order-tolerant):
    - a site already COMPLETED stays COMPLETED: a FAILED outcome is older news;
    - a COMPLETED outcome for content that has since changed (fingerprint) is stale: the
      change carries its own entry, whose outcome will complete the site;
    - an outcome that changes nothing writes nothing.
    """
    info = md.get("replicationInfo") or {}
    backends = info.get("backends") or []
    index = next((i for i, b in enumerate(backends) if b.get("site") == outcome.site), None)
    if index is None:
        return None
    current = backends[index].get("status") or PENDING
    if current == COMPLETED and outcome.status != COMPLETED:
        return None
    if outcome.status == COMPLETED and outcome.fingerprint != content_fingerprint(md):
        return None
    if current == outcome.status:
        return None
    new = copy.deepcopy(md)
    new_info = new["replicationInfo"]
    backend = new_info["backends"][index]
    backend["status"] = outcome.status
    if outcome.dataStoreVersionId:
        backend["dataStoreVersionId"] = outcome.dataStoreVersionId
    new_info["status"] = global_status(b.get("status") or PENDING for b in new_info["backends"])
    return new
