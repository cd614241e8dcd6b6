"""The replication populator extension: which journal entries become replication work."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel

from crossbeat.extensions.replication.messages import ReplicationEntry
from crossbeat.extensions.replication.settings import ReplicationSettings
from crossbeat.extensions.replication.status import PENDING, REPLICA, sites_of
from crossbeat.populator import Extension, ExtensionContext, JournalEntry, Message, message_key


class ReplicationExtension(Extension):
    """Publishes PENDING object versions to `crossbeat-replication`.

    Selected: `put` entries of an object version whose global replication status is
    PENDING, and (when `delete_markers` is on) delete markers likewise marked: the gateway
    marks a delete marker PENDING only when the matching rule enables
    DeleteMarkerReplication. Not selected: replicas (no cascades), bucket changes, version
    deletions (`del`), and versions whose status is COMPLETED/PROCESSING/FAILED (status
    updates come back through the journal and must not loop). The message names the sites
    still pending, so a manual retry only re-sends the sites that failed.
    """

    name: ClassVar[str] = "replication"
    settings_model: ClassVar[type[BaseModel]] = ReplicationSettings

    def __init__(self, settings: BaseModel, context: ExtensionContext) -> None:
        super().__init__(settings, context)
        assert isinstance(settings, ReplicationSettings)
        self.replication = settings
        self.topic = context.topic(settings.topic)

    def topics(self) -> list[str]:
        return [self.topic]

    def filter(self, entry: JournalEntry) -> list[Message]:
        md = entry.value
        if entry.op != "put" or not entry.key or not entry.version_id or not md:
            return []
        info: dict[str, Any] = md.get("replicationInfo") or {}
        if info.get("status") != PENDING or info.get("role") == REPLICA:
            return []
        is_delete_marker = bool(md.get("isDeleteMarker"))
        if is_delete_marker and not self.replication.delete_markers:
            return []
        backends = info.get("backends") or []
        if backends:
            sites = [b["site"] for b in backends if (b.get("status") or PENDING) == PENDING]
        else:
            sites = sites_of(info)
        if not sites:
            return []
        work = ReplicationEntry(
            seq=entry.seq,
            bucket=entry.bucket,
            key=entry.key,
            versionId=entry.version_id,
            isDeleteMarker=is_delete_marker,
            sites=tuple(sites),
            ts=entry.ts,
            size=0 if is_delete_marker else _size(md),
        )
        return [Message(self.topic, message_key(entry.bucket, entry.key), work.to_json())]


def _size(md: dict[str, Any]) -> int | None:
    try:
        size = int(md.get("size") or 0)
    except (TypeError, ValueError):
        return None
    return size if size >= 0 else None
