"""A new version (no sortKey given) goes on top of its key, whatever the clock says: after
versions whose sortKeys are ahead of it (the clock stepped back, or a replica came from a
site whose clock runs ahead), it still becomes the latest, as S3's last write wins. A version
with a sortKey (a replica) is stored at it, below the latest if it is older."""

from __future__ import annotations

from typing import Any

from crossbeat.metadata import new_version_id
from crossbeat.metadata.sqlite import SqliteMetadataStore

from .conftest import version
from .test_group_put import put_group


def ahead() -> str:
    """A sortKey from a clock far ahead of this one."""
    return "Z" + new_version_id()[1:]


def local(bucket: str, key: str, **fields: Any) -> dict[str, Any]:
    """A version as the gateway now writes one: no sortKey, the store chooses."""
    meta = version(bucket, key, **fields)
    del meta["sortKey"]
    return meta


def test_a_new_version_goes_on_top_of_one_from_ahead(store: SqliteMetadataStore, bucket: str) -> None:
    early = version(bucket, "k", sortKey=ahead(), size=1)
    store.put_version(early)
    new = local(bucket, "k", size=2)
    store.put_version(new)
    latest = store.get_version(bucket, "k")
    assert latest is not None and latest["versionId"] == new["versionId"] and latest["isLatest"]
    assert latest["sortKey"] > early["sortKey"]
    listed = store.list_versions(bucket, limit=10)
    assert [(m["versionId"], m["isLatest"]) for m in listed] == [
        (new["versionId"], True), (early["versionId"], False)
    ]


def test_a_new_delete_marker_and_null_version_go_on_top(store: SqliteMetadataStore, bucket: str) -> None:
    store.put_version(version(bucket, "k", sortKey=ahead()))
    marker = local(bucket, "k", isDeleteMarker=True)
    store.put_version(marker)
    assert store.get_version(bucket, "k")["versionId"] == marker["versionId"]  # type: ignore[index]
    null = local(bucket, "k", version_id="null")
    store.put_version(null)
    store.put_version(local(bucket, "k", version_id="null", size=7))  # replaces it
    got = store.get_version(bucket, "k")
    assert got is not None and got["versionId"] == "null" and got["size"] == 7


def test_a_replica_keeps_its_place(store: SqliteMetadataStore, bucket: str) -> None:
    store.put_version(local(bucket, "k"))
    older = version(bucket, "k", sortKey="0" * 10 + new_version_id()[10:])  # from 1970
    store.put_version(older)
    got = store.get_version(bucket, "k")
    assert got is not None and got["versionId"] != older["versionId"]
    assert store.get_version(bucket, "k", older["versionId"])["sortKey"] == older["sortKey"]  # type: ignore[index]


def test_new_versions_stored_as_a_group_go_on_top_in_order(store: SqliteMetadataStore, bucket: str) -> None:
    store.put_version(version(bucket, "k", sortKey=ahead()))
    first, second = local(bucket, "k", size=1), local(bucket, "k", size=2)
    outcomes = put_group(store, [first, second, local(bucket, "other")])
    assert all(not isinstance(o, BaseException) for o in outcomes)
    listed = [m for m in store.list_versions(bucket, limit=10) if m["key"] == "k"]
    assert [m["versionId"] for m in listed][:2] == [second["versionId"], first["versionId"]]
    assert listed[0]["isLatest"]
