"""Versioning semantics of the store: latest, null version, replicas, CAS, preconditions."""

from __future__ import annotations

from typing import Any

import pytest

from crossbeat.metadata import (
    InvalidMetadata,
    NoSuchBucket,
    NoSuchVersion,
    RevisionMismatch,
    new_version_id,
)
from crossbeat.metadata.sqlite import SqliteMetadataStore

from .conftest import version


def ids(metas: list[dict[str, Any]]) -> list[str]:
    return [m["versionId"] for m in metas]


def test_latest_is_the_greatest_sort_key_and_listing_is_newest_first(
    store: SqliteMetadataStore, bucket: str
) -> None:
    v1, v2, v3 = (version(bucket, "k", size=i) for i in range(3))
    for v in (v1, v2, v3):
        assert store.put_version(v) == []
    latest = store.get_version(bucket, "k")
    assert latest is not None and latest["versionId"] == v3["versionId"]
    assert latest["isLatest"] is True and latest["revision"] == 1
    old = store.get_version(bucket, "k", v1["versionId"])
    assert old is not None and old["isLatest"] is False and old["size"] == 0
    assert ids(store.list_versions(bucket)) == [v3["versionId"], v2["versionId"], v1["versionId"]]
    assert [m["isLatest"] for m in store.list_versions(bucket)] == [True, False, False]


def test_older_sort_key_does_not_become_latest(store: SqliteMetadataStore, bucket: str) -> None:
    older = version(bucket, "k")  # sortKey made first
    newer = version(bucket, "k")
    store.put_version(newer)
    store.put_version(older)  # e.g. a replica arriving late
    latest = store.get_version(bucket, "k")
    assert latest is not None and latest["versionId"] == newer["versionId"]
    assert ids(store.list_versions(bucket)) == [newer["versionId"], older["versionId"]]
    assert store.read_journal(0, 10)[-1].value["isLatest"] is False  # type: ignore[index]


def test_null_version_is_replaced_and_returned_as_displaced(
    store: SqliteMetadataStore, bucket: str
) -> None:
    first = version(bucket, "k", "null", size=1)
    assert store.put_version(first) == []
    kept = version(bucket, "k", size=2)  # a real version in between (versioning enabled once)
    store.put_version(kept)
    second = version(bucket, "k", "null", size=3)
    displaced = store.put_version(second)
    assert [(d["versionId"], d["size"]) for d in displaced] == [("null", 1)]
    listed = store.list_versions(bucket)
    assert [(m["versionId"], m["size"]) for m in listed] == [
        ("null", 3),
        (kept["versionId"], 2),
    ]
    null = store.get_version(bucket, "k", "null")
    # The replacement continues the revision count: a CAS holding the old row's revision fails.
    assert null is not None and null["isLatest"] and null["revision"] == 2


def test_replica_with_same_version_id_is_replaced_in_place(
    store: SqliteMetadataStore, bucket: str
) -> None:
    a, b, c = (version(bucket, "k") for _ in range(3))
    for v in (a, b, c):
        store.put_version(v)
    redelivered = dict(b, etag='"other"', replicationInfo={"status": "REPLICA"})
    displaced = store.put_version(redelivered)
    assert ids(displaced) == [b["versionId"]]
    listed = store.list_versions(bucket)
    assert ids(listed) == [c["versionId"], b["versionId"], a["versionId"]]
    assert listed[1]["etag"] == '"other"' and listed[1]["revision"] == 2
    assert store.get_version(bucket, "k")["versionId"] == c["versionId"]  # type: ignore[index]


def test_latest_moves_on_delete(store: SqliteMetadataStore, bucket: str) -> None:
    a, b = version(bucket, "k"), version(bucket, "k")
    marker = version(bucket, "k", isDeleteMarker=True)
    for v in (a, b, marker):
        store.put_version(v)
    assert store.get_version(bucket, "k")["isDeleteMarker"] is True  # type: ignore[index]
    assert store.count_objects(bucket) == 0
    assert store.list_latest(bucket)[0]["versionId"] == marker["versionId"]

    removed = store.delete_version(bucket, "k", marker["versionId"])
    assert removed is not None and removed["isLatest"] is True
    assert store.get_version(bucket, "k")["versionId"] == b["versionId"]  # type: ignore[index]
    assert store.count_objects(bucket) == 1
    store.delete_version(bucket, "k", b["versionId"])
    assert store.get_version(bucket, "k")["versionId"] == a["versionId"]  # type: ignore[index]
    store.delete_version(bucket, "k", a["versionId"])
    assert store.get_version(bucket, "k") is None
    assert store.list_latest(bucket) == [] and store.list_versions(bucket) == []
    assert store.delete_version(bucket, "k", a["versionId"]) is None
    assert [e.op for e in store.read_journal(0, 100)] == ["put"] * 4 + ["del"] * 3


def test_precondition_sees_current_latest_and_aborts_cleanly(
    store: SqliteMetadataStore, bucket: str
) -> None:
    class PreconditionFailed(Exception):
        pass

    seen: list[Any] = []

    def if_none_match(current: dict[str, Any] | None) -> None:
        seen.append(current)
        if current is not None:
            raise PreconditionFailed()

    first = version(bucket, "k")
    store.put_version(first, precondition=if_none_match)
    before = store.last_seq()
    with pytest.raises(PreconditionFailed):
        store.put_version(version(bucket, "k"), precondition=if_none_match)
    assert seen[0] is None and seen[1]["versionId"] == first["versionId"]
    assert ids(store.list_versions(bucket)) == [first["versionId"]]
    assert store.last_seq() == before  # nothing journaled
    # The store is still fine afterwards and seqs stay dense.
    store.put_version(version(bucket, "k"))
    assert [e.seq for e in store.read_journal(0, 100)] == list(range(1, before + 2))


def test_update_version_is_compare_and_set(store: SqliteMetadataStore, bucket: str) -> None:
    v = version(bucket, "k", replicationInfo={"status": "PENDING"})
    store.put_version(v)
    vid = v["versionId"]
    done = dict(v, replicationInfo={"status": "COMPLETED"}, sortKey="zzz", key="moved")
    stored = store.update_version(bucket, "k", vid, done, expected_revision=1)
    assert stored["revision"] == 2 and stored["replicationInfo"]["status"] == "COMPLETED"
    assert stored["sortKey"] == v["sortKey"] and stored["key"] == "k"  # identity kept
    with pytest.raises(RevisionMismatch) as info:
        store.update_version(bucket, "k", vid, dict(v, x=1), expected_revision=1)
    assert info.value.current is not None and info.value.current["revision"] == 2
    got = store.get_version(bucket, "k", vid)
    assert got is not None and got["replicationInfo"]["status"] == "COMPLETED" and "x" not in got
    with pytest.raises(NoSuchVersion):
        store.update_version(bucket, "k", "nope", v, expected_revision=1)
    assert [e.value["revision"] for e in store.read_journal(1, 10)] == [1, 2]  # type: ignore[index]


def test_bad_input_changes_nothing(store: SqliteMetadataStore, bucket: str) -> None:
    before = store.last_seq()
    with pytest.raises(InvalidMetadata):
        store.put_version({"bucket": bucket, "key": "k"})
    with pytest.raises(InvalidMetadata):
        store.put_version(version(bucket, "k", blob=object()))
    with pytest.raises(InvalidMetadata):
        store.put_version(version(bucket, "\ud800"))
    with pytest.raises(NoSuchBucket):
        store.put_version(version("missing", "k"))
    with pytest.raises(InvalidMetadata):
        store.list_latest(bucket, limit=-1)
    assert store.last_seq() == before and store.list_versions(bucket) == []


def _utf8(keys: list[str]) -> list[str]:
    return sorted(keys, key=lambda k: k.encode("utf-8"))


KEYS = ["a", "a/b", "a/c", "ab", "b", "é", "z", "\uffef", "\U0001f600", "\ud7ff", "\ue000x"]


def test_list_latest_pages_in_utf8_order_with_prefix(
    store: SqliteMetadataStore, bucket: str
) -> None:
    keys = KEYS + [f"p/{i:04d}" for i in range(250)]
    for k in keys:
        store.put_version(version(bucket, k))
    store.put_version(version(bucket, "b"))  # a second version does not repeat the key
    pages: list[str] = []
    after = ""
    while True:
        page = store.list_latest(bucket, start_after=after, limit=7)
        if not page:
            break
        pages += [m["key"] for m in page]
        after = page[-1]["key"]
    assert pages == _utf8(keys)
    assert [m["key"] for m in store.list_latest(bucket, prefix="a/")] == ["a/b", "a/c"]
    assert [m["key"] for m in store.list_latest(bucket, prefix="\ud7ff")] == ["\ud7ff"]
    assert len(store.list_latest(bucket, prefix="p/", start_after="p/0100")) == 149
    assert all(m["isLatest"] for m in store.list_latest(bucket))


def test_list_versions_pages_by_key_and_version_marker(
    store: SqliteMetadataStore, bucket: str
) -> None:
    expected: list[tuple[str, str]] = []
    for k in ["x/1", "x/2", "y"]:
        vs = [version(bucket, k) for _ in range(3)]
        for v in vs:
            store.put_version(v)
        expected += [(k, v["versionId"]) for v in reversed(vs)]
    got: list[tuple[str, str]] = []
    key_marker = version_marker = ""
    while True:
        page = store.list_versions(
            bucket, key_marker=key_marker, version_marker=version_marker, limit=2
        )
        if not page:
            break
        got += [(m["key"], m["versionId"]) for m in page]
        key_marker, version_marker = page[-1]["key"], page[-1]["versionId"]
    assert got == expected
    # key_marker alone starts after all of that key's versions
    assert [m["key"] for m in store.list_versions(bucket, key_marker="x/2")] == ["y"] * 3
    assert len(store.list_versions(bucket, prefix="x/")) == 6
    first = store.list_versions(
        bucket, prefix="x/", key_marker="x/1", version_marker=expected[0][1]
    )
    assert [(m["key"], m["versionId"]) for m in first] == expected[1:6]


def test_sort_key_defaults_and_collisions(store: SqliteMetadataStore, bucket: str) -> None:
    v = version(bucket, "k")
    del v["sortKey"]
    store.put_version(v)
    stored = store.get_version(bucket, "k")
    assert stored is not None and stored["sortKey"] > "0"
    clash = version(bucket, "k", sortKey=stored["sortKey"], versionId=new_version_id())
    with pytest.raises(InvalidMetadata):
        store.put_version(clash)
    assert len(store.list_versions(bucket)) == 1


def test_batches_answer_per_item_and_share_commits(store: SqliteMetadataStore, bucket: str) -> None:
    vs = [version(bucket, f"k{i}") for i in range(50)]
    commits = store.writer_stats.commits
    displaced = store.put_versions([*vs, version("missing", "k"), {"bucket": bucket}])
    assert displaced[:50] == [[]] * 50
    assert isinstance(displaced[50], NoSuchBucket) and isinstance(displaced[51], InvalidMetadata)
    assert store.writer_stats.commits - commits < 50  # group-committed, not one per version
    got = store.get_versions([(bucket, v["key"], v["versionId"]) for v in vs] + [(bucket, "k0", "nope")])
    assert [g["revision"] if g else None for g in got] == [1] * 50 + [None]

    updates = [(dict(v, contentType="x"), 1) for v in vs[:3]]
    updates += [(vs[3], 7), (dict(vs[4], versionId="nope"), 1)]
    results = store.update_versions(updates)
    assert [r["revision"] for r in results[:3]] == [2, 2, 2]  # type: ignore[index]
    assert isinstance(results[3], RevisionMismatch) and results[3].current["revision"] == 1  # type: ignore[index]
    assert isinstance(results[4], NoSuchVersion)
    got4 = store.get_version(bucket, "k3", vs[3]["versionId"])
    assert got4 is not None and got4["revision"] == 1 and "contentType" not in got4


def test_list_versions_goes_on_after_a_marker_version_that_was_deleted(
    store: SqliteMetadataStore, bucket: str
) -> None:
    """The version a page ended on is deleted before the next page is asked for (another
    client, lifecycle): the key's older versions still follow. The listing went on at the
    next key, and they were never listed."""
    vs = [version(bucket, "k1") for _ in range(4)] + [version(bucket, "k2")]
    for v in vs:
        store.put_version(v)
    page = store.list_versions(bucket, limit=2)
    assert [m["versionId"] for m in page] == [vs[3]["versionId"], vs[2]["versionId"]]
    store.delete_version(bucket, "k1", vs[2]["versionId"])
    rest = store.list_versions(bucket, key_marker="k1", version_marker=vs[2]["versionId"])
    assert [(m["key"], m["versionId"]) for m in rest] == [
        ("k1", vs[1]["versionId"]), ("k1", vs[0]["versionId"]), ("k2", vs[4]["versionId"])]


def test_list_versions_after_a_deleted_null_marker_repeats_rather_than_skips(
    store: SqliteMetadataStore, bucket: str
) -> None:
    """The page ended on the 'null' version, deleted before the next page: 'null' does not
    say where it stood, so the key's versions are listed again from its newest. The listing
    went on at the next key: v1 was never listed, and a client deleting every version met
    BucketNotEmpty."""
    v1 = version(bucket, "k")
    null = version(bucket, "k", "null")
    v3 = version(bucket, "k")
    for v in (v1, null, v3):
        store.put_version(v)
    store.put_version(version(bucket, "z"))
    page = store.list_versions(bucket, limit=2)
    assert [m["versionId"] for m in page] == [v3["versionId"], "null"]
    store.delete_version(bucket, "k", "null")
    rest = store.list_versions(bucket, key_marker="k", version_marker="null")
    listed = [(m["key"], m["versionId"]) for m in rest]
    assert ("k", v1["versionId"]) in listed and listed[-1][0] == "z"
    assert listed[:2] == [("k", v3["versionId"]), ("k", v1["versionId"])]
