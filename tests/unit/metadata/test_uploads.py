"""Multipart uploads: parts replace by number, complete and abort are atomic."""

from __future__ import annotations

from typing import Any

import pytest

from crossbeat.metadata import InvalidMetadata, NoSuchUpload, new_upload_id
from crossbeat.metadata.sqlite import SqliteMetadataStore

from .conftest import version


def part(n: int, data_key: str) -> dict[str, Any]:
    return {
        "partNumber": n,
        "etag": f'"e{n}"',
        "size": 5,
        "location": [{"location": "sfs", "dataKey": data_key, "size": 5}],
        "checksums": {},
        "lastModified": "2024-01-01T00:00:00.000Z",
    }


def start(store: SqliteMetadataStore, bucket: str, key: str = "big") -> str:
    upload_id = new_upload_id()
    store.create_upload(
        {"uploadId": upload_id, "bucket": bucket, "key": key, "initiated": "t", "meta": {"a": 1}}
    )
    return upload_id


def test_parts_replace_by_number_and_list_in_order(store: SqliteMetadataStore, bucket: str) -> None:
    uid = start(store, bucket)
    assert store.get_upload(bucket, "big", uid)["meta"] == {"a": 1}  # type: ignore[index]
    assert store.get_upload(bucket, "other", uid) is None
    assert store.put_part(uid, part(2, "d2")) is None
    assert store.put_part(uid, part(1, "d1")) is None
    displaced = store.put_part(uid, part(2, "d2b"))
    assert displaced is not None and displaced["location"][0]["dataKey"] == "d2"
    assert [p["partNumber"] for p in store.list_parts(uid)] == [1, 2]
    assert [p["partNumber"] for p in store.list_parts(uid, marker=1)] == [2]
    with pytest.raises(InvalidMetadata):
        store.put_part(uid, dict(part(1, "x"), partNumber=0))
    with pytest.raises(NoSuchUpload):
        store.put_part("missing", part(1, "x"))
    with pytest.raises(NoSuchUpload):
        store.list_parts("missing")


def test_complete_is_one_transaction(store: SqliteMetadataStore, bucket: str) -> None:
    uid = start(store, bucket)
    for n in (1, 2, 3):
        store.put_part(uid, part(n, f"d{n}"))
    old = version(bucket, "big", "null")
    store.put_version(old)
    meta = version(
        bucket,
        "big",
        "null",
        location=[
            {"location": "sfs", "dataKey": "d1", "size": 5},
            {"location": "sfs", "dataKey": "d3", "size": 5},
        ],
    )
    before = store.last_seq()
    displaced, unused = store.complete_upload(uid, meta)
    assert [d["versionId"] for d in displaced] == ["null"] and displaced[0]["sortKey"] == old[
        "sortKey"
    ]
    assert [p["partNumber"] for p in unused] == [2]
    assert store.get_upload(bucket, "big", uid) is None
    assert store.get_version(bucket, "big")["sortKey"] == meta["sortKey"]  # type: ignore[index]
    assert [e.op for e in store.read_journal(before, 10)] == ["put"]
    with pytest.raises(NoSuchUpload):
        store.complete_upload(uid, meta)
    with pytest.raises(NoSuchUpload):
        store.list_parts(uid)


def test_failed_complete_changes_nothing(store: SqliteMetadataStore, bucket: str) -> None:
    uid = start(store, bucket)
    store.put_part(uid, part(1, "d1"))
    before = store.last_seq()

    def refuse(current: dict[str, Any] | None) -> None:
        raise RuntimeError("precondition failed")

    with pytest.raises(RuntimeError):
        store.complete_upload(uid, version(bucket, "big"), precondition=refuse)
    with pytest.raises(InvalidMetadata):
        store.complete_upload(uid, version(bucket, "elsewhere"))
    assert store.last_seq() == before
    assert store.get_version(bucket, "big") is None
    assert [p["partNumber"] for p in store.list_parts(uid)] == [1]


def test_abort_returns_parts_and_removes_everything(
    store: SqliteMetadataStore, bucket: str
) -> None:
    uid = start(store, bucket)
    store.put_part(uid, part(1, "d1"))
    store.put_part(uid, part(2, "d2"))
    before = store.last_seq()
    parts = store.abort_upload(uid)
    assert [p["location"][0]["dataKey"] for p in parts] == ["d1", "d2"]
    assert store.get_upload(bucket, "big", uid) is None
    assert store.last_seq() == before  # uploads are not journaled
    with pytest.raises(NoSuchUpload):
        store.abort_upload(uid)


def test_list_uploads_by_key_then_age_with_markers(store: SqliteMetadataStore, bucket: str) -> None:
    made = [(k, start(store, bucket, k)) for k in ["b", "a", "b", "c/x", "c/y"]]
    expected = sorted(made)
    listed = [(u["key"], u["uploadId"]) for u in store.list_uploads(bucket)]
    assert listed == expected
    assert [u["key"] for u in store.list_uploads(bucket, prefix="c/")] == ["c/x", "c/y"]
    assert [u["key"] for u in store.list_uploads(bucket, key_marker="b")] == ["c/x", "c/y"]
    after_first_b = store.list_uploads(bucket, key_marker="b", upload_id_marker=expected[1][1])
    assert [(u["key"], u["uploadId"]) for u in after_first_b] == expected[2:]
    assert len(store.list_uploads(bucket, limit=2)) == 2


def test_complete_naming_a_replaced_part_changes_nothing(
    store: SqliteMetadataStore, bucket: str
) -> None:
    """The Complete read part 1 before an UploadPart replaced it (whose caller frees the old
    data): committing it would acknowledge an object whose data is gone."""
    from crossbeat.metadata import PartReplaced

    uid = start(store, bucket)
    store.put_part(uid, part(1, "d1"))
    store.put_part(uid, part(2, "d2"))
    seen = store.list_parts(uid)  # what the Complete chose from
    displaced = store.put_part(uid, part(1, "d1-again"))
    assert displaced is not None and displaced["location"][0]["dataKey"] == "d1"
    before = store.last_seq()
    meta = version(bucket, "big", location=[loc for p in seen for loc in p["location"]])
    with pytest.raises(PartReplaced):
        store.complete_upload(uid, meta)
    assert store.last_seq() == before
    assert store.get_version(bucket, "big") is None
    assert [p["location"][0]["dataKey"] for p in store.list_parts(uid)] == ["d1-again", "d2"]
    # chosen from what is stored now, it completes
    meta = version(bucket, "big", location=[loc for p in store.list_parts(uid) for loc in p["location"]])
    assert store.complete_upload(uid, meta) == ([], [])


def test_every_part_data_a_transaction_drops_is_recorded_until_forgotten(
    store: SqliteMetadataStore, bucket: str
) -> None:
    """A replaced part, an aborted upload's parts, the parts a Complete leaves out, a
    deleted bucket's uploads: recorded in pending_frees by the transaction that drops them
    (the caller frees them after it commits; a crash in between leaves them to the next
    cleanup), until forgotten. Nothing else is recorded."""
    uid = start(store, bucket)
    store.put_part(uid, part(1, "d1"))
    assert store.pending_frees() == []
    store.put_part(uid, part(1, "d1b"))  # replaces d1
    store.put_part(uid, part(2, "d2"))
    aborted = start(store, bucket, "other")
    store.put_part(aborted, part(1, "a1"))
    store.abort_upload(aborted)
    meta = version(bucket, "big", size=5, location=part(2, "d2")["location"])
    store.complete_upload(uid, meta)  # leaves d1b out
    left = start(store, bucket, "left")
    store.put_part(left, part(1, "l1"))
    assert sorted(key for _, key in store.pending_frees()) == ["a1", "d1", "d1b"]
    store.forget_frees(["a1", "d1", "d1b", "unknown"])
    assert store.pending_frees() == []
    store.delete_version(bucket, "big", meta["versionId"])
    store.delete_bucket(bucket)  # with `left` open
    assert store.pending_frees() == [("sfs", "l1")]
