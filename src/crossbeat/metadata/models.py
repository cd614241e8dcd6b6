"""Plain records the metadata store takes and returns: buckets and journal entries.

Object versions are plain dicts (the ARCHITECTURE object-metadata document) because the
gateway owns their shape; the store only adds `revision`, `sortKey` and `isLatest`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

# Fields of Bucket that update_bucket may change; name/owner/location/created are fixed.
BUCKET_MUTABLE_FIELDS = frozenset({"versioning", "replication", "notification", "lifecycle", "cors", "attrs"})
VERSIONING_STATES = frozenset({"", "Enabled", "Suspended"})


@dataclass
class Bucket:
    name: str
    owner: str
    location: str
    created: str  # ISO8601 with milliseconds and Z
    versioning: str = ""  # "", "Enabled", "Suspended"
    replication: dict[str, Any] | None = None  # parsed replication configuration
    notification: dict[str, Any] | None = None  # parsed notification configuration
    lifecycle: dict[str, Any] | None = None  # parsed lifecycle configuration
    cors: dict[str, Any] | None = None  # parsed CORS configuration
    attrs: dict[str, Any] = field(default_factory=dict)  # tagging, object lock flag, …

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> Bucket:
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in doc.items() if k in known})


@dataclass
class JournalEntry:
    """One metadata change, in commit order: `seq` is dense and strictly increasing."""

    seq: int
    op: str  # "put" | "del"
    bucket: str
    key: str  # "" for bucket changes
    versionId: str | None  # None for bucket changes
    value: dict[str, Any] | None
    ts: str  # ISO8601 ms Z, when the change was committed (writer clock)

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "op": self.op,
            "bucket": self.bucket,
            "key": self.key,
            "versionId": self.versionId,
            "value": self.value,
            "ts": self.ts,
        }
