"""The JSON documents on the replication topics (each has a `kind` and a `schema`).

`crossbeat-replication` (key = URL-encoded bucket/key):
    {kind: "replication.entry", schema: 1, seq, bucket, key, versionId, isDeleteMarker,
     sites: [site…], ts, size?: the version's size when published (a hint for routing)}
`crossbeat-replication-status` (same key):
    {kind: "replication.status", schema: 1, bucket, key, versionId, site,
     status: COMPLETED|FAILED, dataStoreVersionId, fingerprint, attempts, error, ts,
     source?: the source metadata as replicated (absent once applied),
     applied?: true when the replication pipeline already set this status at the source}
`crossbeat-replication-control` (key = site, one partition):
    {kind: "replication.control", schema: 1, site, paused: bool, ts}
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import orjson

ENTRY_KIND = "replication.entry"
STATUS_KIND = "replication.status"
CONTROL_KIND = "replication.control"
SCHEMA = 1


@dataclass(frozen=True)
class ReplicationEntry:
    """A version to replicate to `sites` (the message carries no metadata: the processor
    re-reads the source, so a redelivered or stale entry acts on the current state)."""

    seq: int
    bucket: str
    key: str
    versionId: str
    isDeleteMarker: bool
    sites: tuple[str, ...]
    ts: str
    # The size the version had when published: lets the processor start large versions
    # (their own streaming path) at once, beside the batched small ones. Only a hint: the
    # processor re-reads the metadata; absent in entries from older populators.
    size: int | None = None

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "kind": ENTRY_KIND, "schema": SCHEMA, "seq": self.seq, "bucket": self.bucket,
            "key": self.key, "versionId": self.versionId,
            "isDeleteMarker": self.isDeleteMarker, "sites": list(self.sites), "ts": self.ts,
        }
        if self.size is not None:
            doc["size"] = self.size
        return doc

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> ReplicationEntry:
        return cls(
            seq=int(doc.get("seq", 0)),
            bucket=doc["bucket"],
            key=doc["key"],
            versionId=doc["versionId"],
            isDeleteMarker=bool(doc.get("isDeleteMarker", False)),
            sites=tuple(doc.get("sites", ())),
            ts=str(doc.get("ts", "")),
            size=_size_hint(doc.get("size")),
        )


@dataclass(frozen=True)
class ReplicationOutcome:
    """The result of replicating one version to one site."""

    bucket: str
    key: str
    versionId: str
    site: str
    status: str  # COMPLETED | FAILED
    dataStoreVersionId: str
    fingerprint: str
    attempts: int
    error: str | None
    ts: float
    # The source metadata the processor replicated (with its revision): the status
    # updater tries its compare-and-set on it first, saving a read per outcome.
    source: dict[str, Any] | None = None
    # True once the outcome is set at the source (the replication pipeline applies what it
    # can itself): the status pipeline then has nothing to do for it, and the message
    # leaves `source` out.
    applied: bool = False

    def to_json(self) -> dict[str, Any]:
        """The message document. It shares `source` with this outcome rather than copying
        it (`dataclasses.asdict` deep-copies, which dominated publishing a batch): encode
        it, don't mutate it."""
        doc: dict[str, Any] = {
            "kind": STATUS_KIND, "schema": SCHEMA, "bucket": self.bucket, "key": self.key,
            "versionId": self.versionId, "site": self.site, "status": self.status,
            "dataStoreVersionId": self.dataStoreVersionId, "fingerprint": self.fingerprint,
            "attempts": self.attempts, "error": self.error, "ts": self.ts,
        }
        if self.applied:
            doc["applied"] = True
        elif self.source is not None:
            doc["source"] = self.source
        return doc

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> ReplicationOutcome:
        return cls(
            bucket=doc["bucket"],
            key=doc["key"],
            versionId=doc["versionId"],
            site=doc["site"],
            status=doc["status"],
            dataStoreVersionId=str(doc.get("dataStoreVersionId") or ""),
            fingerprint=str(doc.get("fingerprint") or ""),
            attempts=int(doc.get("attempts", 1)),
            error=doc.get("error"),
            ts=float(doc.get("ts", 0.0)),
            source=doc.get("source"),
            applied=doc.get("applied") is True,
        )


def _size_hint(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def content_fingerprint(md: dict[str, Any]) -> str:
    """A digest of what replication copies: data identity and the replicated metadata.

    A status outcome for an older fingerprint than the source's current one describes
    content that has since changed; it must not mark the new content COMPLETED.
    """
    doc = {
        "etag": md.get("etag"),
        "isDeleteMarker": bool(md.get("isDeleteMarker")),
        "size": md.get("size"),
        "contentType": md.get("contentType"),
        "userMetadata": md.get("userMetadata") or {},
        "tags": md.get("tags") or {},
    }
    return hashlib.sha256(orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)).hexdigest()[:32]
