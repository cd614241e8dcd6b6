from __future__ import annotations

from typing import Any

import orjson

from crossbeat.extensions.replication import ReplicationExtension
from crossbeat.extensions.replication.settings import ReplicationSettings
from crossbeat.populator import ExtensionContext, JournalEntry


def ext(**settings: Any) -> ReplicationExtension:
    return ReplicationExtension(ReplicationSettings(**settings), ExtensionContext())


def entry(value: dict[str, Any] | None, *, op: str = "put", key: str = "k") -> JournalEntry:
    return JournalEntry(7, op, "bk", key, "V1", value, "2026-01-01T00:00:00.000Z")


def info(status: str = "PENDING", **backends: str) -> dict[str, Any]:
    return {
        "status": status,
        "storageClass": ",".join(backends),
        "backends": [{"site": s, "status": st, "dataStoreVersionId": ""} for s, st in backends.items()],
    }


def test_pending_version_goes_to_the_replication_topic_keyed_by_object() -> None:
    [msg] = ext().filter(entry({"replicationInfo": info(b="PENDING")}, key="a/b c"))
    assert msg.topic == "crossbeat-replication"
    assert msg.key == b"bk%2Fa%2Fb%20c"
    doc = orjson.loads(msg.encoded_value())
    assert doc["kind"] == "replication.entry" and doc["schema"] == 1
    assert (doc["seq"], doc["bucket"], doc["key"], doc["versionId"]) == (7, "bk", "a/b c", "V1")
    assert doc["sites"] == ["b"]


def test_only_pending_sites_are_named() -> None:
    [msg] = ext().filter(entry({"replicationInfo": info(b="COMPLETED", c="PENDING")}))
    assert msg.value["sites"] == ["c"]


def test_not_selected() -> None:
    e = ext()
    assert e.filter(entry(None)) == []
    assert e.filter(entry({"replicationInfo": info(b="PENDING")}, op="del")) == []
    assert e.filter(entry({"replicationInfo": info("COMPLETED", b="COMPLETED")})) == []
    assert e.filter(entry({"replicationInfo": info("PROCESSING", b="COMPLETED", c="PENDING")})) == []
    assert e.filter(entry({"replicationInfo": info("FAILED", b="FAILED")})) == []
    assert e.filter(entry({"replicationInfo": {"status": "REPLICA"}})) == []
    assert e.filter(entry({"size": 3})) == []
    assert e.filter(JournalEntry(1, "put", "bk", "", None, {"replication": {}}, "")) == []


def test_delete_markers_follow_the_setting() -> None:
    marker = {"isDeleteMarker": True, "replicationInfo": info(b="PENDING")}
    [msg] = ext().filter(entry(marker))
    assert msg.value["isDeleteMarker"] is True
    assert ext(delete_markers=False).filter(entry(marker)) == []


def test_sites_fall_back_to_the_storage_class() -> None:
    value = {"replicationInfo": {"status": "PENDING", "storageClass": "b, c:preferred_read"}}
    [msg] = ext().filter(entry(value))
    assert msg.value["sites"] == ["b", "c"]


def test_entries_carry_the_size_as_a_routing_hint() -> None:
    [msg] = ext().filter(entry({"size": 5 << 20, "replicationInfo": info(b="PENDING")}))
    assert msg.value["size"] == 5 << 20
    [marker] = ext().filter(entry({"isDeleteMarker": True, "replicationInfo": info(b="PENDING")}))
    assert marker.value["size"] == 0
    [odd] = ext().filter(entry({"size": "n/a", "replicationInfo": info(b="PENDING")}))
    assert "size" not in odd.value
