"""The buckets generation: what lets gateway processes cache buckets (see bucket_generation)."""

from __future__ import annotations

from pathlib import Path

import pytest

from crossbeat.metadata import open_store
from crossbeat.metadata.errors import BucketExists, NoSuchBucket
from crossbeat.metadata.models import Bucket


def bucket(name: str, owner: str) -> Bucket:
    return Bucket(name=name, owner=owner, location="default", created="2026-11-26T00:00:00.000Z")


def test_every_bucket_change_in_any_store_changes_the_generation(tmp_path: Path) -> None:
    one, other = open_store(tmp_path / "m.sqlite"), open_store(tmp_path / "m.sqlite")  # two processes'
    try:
        seen = {one.buckets_generation()}
        assert other.buckets_generation() in seen

        def changed() -> bool:
            now = other.buckets_generation()
            assert now == one.buckets_generation()
            fresh = now not in seen
            seen.add(now)
            return fresh

        one.create_bucket(bucket("b", "alice"))
        assert changed()
        one.put_version({"bucket": "b", "key": "k", "versionId": "null", "sortKey": "0", "size": 0})
        assert not changed()  # objects are not buckets
        one.update_bucket("b", versioning="Enabled")
        assert changed()
        one.delete_version("b", "k", "null")
        one.delete_bucket("b")
        assert changed()
        with pytest.raises(NoSuchBucket):
            one.delete_bucket("b")  # refused, nothing changed: every cache stays good
        assert not changed()
        one.create_bucket(bucket("b", "bob"))
        assert changed()
        with pytest.raises(BucketExists):
            one.create_bucket(bucket("b", "bob"))  # its owner's CreateBucket, repeated
        assert not changed()
    finally:
        one.close()
        other.close()
    one.buckets_generation()  # closed: an answer, not an error
    one.close()  # twice: nothing
