"""The journal entry as the populator reads it from the gateway (ARCHITECTURE contract)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from crossbeat.errors import CrossbeatError


class JournalFormatError(CrossbeatError):
    """A journal line is not a valid entry; the message quotes the offending field."""


@dataclass(frozen=True)
class JournalEntry:
    """One metadata change: `{seq, op: put|del, bucket, key, versionId, value, ts}`.

    `seq` is dense and strictly increasing in commit order. For `put`, `value` is the object
    (or bucket) metadata document after the change; for `del` it may be None. Bucket-level
    changes carry `key == ""` and `versionId is None`.
    """

    seq: int
    op: str
    bucket: str
    key: str
    version_id: str | None
    value: dict[str, Any] | None
    ts: str

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> JournalEntry:
        try:
            seq = doc["seq"]
            op = doc["op"]
            bucket = doc["bucket"]
        except KeyError as exc:
            raise JournalFormatError(f"journal entry lacks {exc.args[0]!r}: {doc!r}") from exc
        if not isinstance(seq, int) or seq < 0:
            raise JournalFormatError(f"journal entry has a bad seq {seq!r}")
        if op not in ("put", "del"):
            raise JournalFormatError(f"journal entry {seq} has an unknown op {op!r}")
        value = doc.get("value")
        if value is not None and not isinstance(value, dict):
            raise JournalFormatError(f"journal entry {seq} has a non-object value")
        return cls(
            seq=seq,
            op=op,
            bucket=str(bucket),
            key=str(doc.get("key") or ""),
            version_id=doc.get("versionId"),
            value=value,
            ts=str(doc.get("ts") or ""),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "op": self.op,
            "bucket": self.bucket,
            "key": self.key,
            "versionId": self.version_id,
            "value": self.value,
            "ts": self.ts,
        }
