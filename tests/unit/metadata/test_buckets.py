from __future__ import annotations

import pytest

from crossbeat.metadata import (
    Bucket,
    BucketExists,
    BucketNotEmpty,
    InvalidMetadata,
    NoSuchBucket,
)
from crossbeat.metadata.sqlite import SqliteMetadataStore

from .conftest import version


def make(name: str, owner: str = "alice") -> Bucket:
    return Bucket(name, owner, "default", "2024-01-01T00:00:00.000Z")


def test_create_get_list_update_delete_are_journaled(store: SqliteMetadataStore) -> None:
    store.create_bucket(make("b2"))
    store.create_bucket(make("b1"))
    with pytest.raises(BucketExists) as info:
        store.create_bucket(make("b1", owner="bob"))
    assert info.value.existing.owner == "alice"
    assert [b.name for b in store.list_buckets()] == ["b1", "b2"]

    replication = {"role": "r", "rules": [{"id": "1", "storageClass": "site-b"}]}
    updated = store.update_bucket("b1", versioning="Enabled", replication=replication)
    assert updated.versioning == "Enabled"
    assert store.get_bucket("b1") == updated
    with pytest.raises(InvalidMetadata):
        store.update_bucket("b1", owner="mallory")
    with pytest.raises(InvalidMetadata):
        store.update_bucket("b1", versioning="Sometimes")
    with pytest.raises(NoSuchBucket):
        store.update_bucket("nope", versioning="Enabled")

    store.delete_bucket("b2")
    assert store.get_bucket("b2") is None
    with pytest.raises(NoSuchBucket):
        store.delete_bucket("b2")
    entries = [e.to_json() for e in store.read_journal(0, 100)]
    assert [(e["op"], e["bucket"], e["key"], e["versionId"]) for e in entries] == [
        ("put", "b2", "", None),
        ("put", "b1", "", None),
        ("put", "b1", "", None),
        ("del", "b2", "", None),
    ]
    assert entries[2]["value"]["replication"] == replication
    assert set(entries[0]) == {"seq", "op", "bucket", "key", "versionId", "value", "ts"}


def test_a_lifecycle_configuration_is_stored_and_journaled_like_the_others(store: SqliteMetadataStore) -> None:
    store.create_bucket(make("b"))
    lifecycle = {"rules": [{"id": "r", "status": "Enabled", "expiration": {"days": 1}}]}
    assert store.update_bucket("b", lifecycle=lifecycle).lifecycle == lifecycle
    assert store.get_bucket("b").lifecycle == lifecycle  # type: ignore[union-attr]
    store.update_bucket("b", lifecycle=None)
    values = [e.value for e in store.read_journal(0, 100)]
    assert [v["lifecycle"] for v in values if v is not None] == [None, lifecycle, None]
    # a bucket document written before the field existed reads as "no configuration"
    assert Bucket.from_dict({"name": "old", "owner": "o", "location": "l", "created": "c"}).lifecycle is None


def test_bucket_not_empty_while_versions_remain_and_uploads_go_with_it(store: SqliteMetadataStore) -> None:
    store.create_bucket(make("b"))
    store.create_bucket(make("other"))
    v = version("b", "k", isDeleteMarker=True)
    store.put_version(v)
    store.create_upload({"uploadId": "u1", "bucket": "b", "key": "k", "initiated": "t", "meta": {}})
    store.put_part("u1", {"partNumber": 1, "etag": "e", "size": 1, "location": [{"location": "l", "dataKey": "d1", "size": 1}]})
    store.create_upload({"uploadId": "u2", "bucket": "other", "key": "k", "initiated": "t", "meta": {}})
    with pytest.raises(BucketNotEmpty):
        store.delete_bucket("b")
    assert [u["uploadId"] for u in store.list_uploads("b")] == ["u1"]  # nothing changed
    store.delete_version("b", "k", v["versionId"])
    parts = store.delete_bucket("b")  # as on S3: the open upload goes with the bucket
    assert [p["location"][0]["dataKey"] for p in parts] == ["d1"]  # for the caller to free
    assert [b.name for b in store.list_buckets()] == ["other"]
    assert [u["uploadId"] for u in store.list_uploads("other")] == ["u2"]
    store.create_bucket(make("b"))
    assert store.list_uploads("b") == []
    store.delete_bucket("b")
    assert [b.name for b in store.list_buckets()] == ["other"]


def test_a_cors_configuration_is_stored_and_journaled_like_the_others(store: SqliteMetadataStore) -> None:
    store.create_bucket(make("b"))
    cors = {"rules": [{"id": None, "allowedMethods": ["GET"], "allowedOrigins": ["*"],
                       "allowedHeaders": [], "exposeHeaders": [], "maxAgeSeconds": None}]}
    assert store.update_bucket("b", cors=cors).cors == cors
    assert store.get_bucket("b").cors == cors  # type: ignore[union-attr]
    store.update_bucket("b", cors=None)
    values = [e.value for e in store.read_journal(0, 100)]
    assert [v["cors"] for v in values if v is not None] == [None, cors, None]
    # a bucket document written before the field existed reads as "no configuration"
    assert Bucket.from_dict({"name": "old", "owner": "o", "location": "l", "created": "c"}).cors is None
