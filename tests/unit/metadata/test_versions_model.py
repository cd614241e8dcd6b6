"""Random operation sequences against a plain-Python model of S3 versioning (Hypothesis)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crossbeat.metadata import Bucket, InvalidMetadata, MetadataSettings
from crossbeat.metadata.sqlite import SqliteMetadataStore

KEYS = ["a", "a/b", "b", "é"]
VERSION_IDS = ["null", "v1", "v2", "v3"]

ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("put"),
            st.sampled_from(KEYS),
            st.sampled_from(VERSION_IDS),
            st.integers(0, 30),
            st.booleans(),
        ),
        st.tuples(st.just("del"), st.sampled_from(KEYS), st.sampled_from(VERSION_IDS)),
    ),
    max_size=25,
)


_bucket_names = itertools.count()


@pytest.fixture(scope="module")
def shared_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SqliteMetadataStore]:
    """One store for all examples (each example uses a fresh bucket): opening is the slow part."""
    path: Path = tmp_path_factory.mktemp("model") / "m.db"
    with SqliteMetadataStore(path, MetadataSettings(journal_trim_interval_seconds=None)) as s:
        yield s


@settings(max_examples=40, deadline=None)
@given(sequence=ops)
def test_store_matches_model(
    shared_store: SqliteMetadataStore, sequence: list[tuple[Any, ...]]
) -> None:
    model: dict[str, dict[str, tuple[str, bool]]] = {}  # key -> versionId -> (sortKey, marker)
    b = f"b{next(_bucket_names)}"
    store = shared_store
    start = store.last_seq()
    store.create_bucket(Bucket(b, "o", "l", "2024-01-01T00:00:00.000Z"))
    changes = 1
    for op in sequence:
        if op[0] == "put":
            _, key, vid, n, marker = op
            sort_key = f"{n:04d}"
            versions = model.setdefault(key, {})
            clash = any(sk == sort_key and v != vid for v, (sk, _) in versions.items())
            meta = {
                "bucket": b,
                "key": key,
                "versionId": vid,
                "sortKey": sort_key,
                "isDeleteMarker": marker,
            }
            try:
                displaced = store.put_version(meta)
            except InvalidMetadata:
                assert clash
                continue
            assert not clash
            assert [d["versionId"] for d in displaced] == ([vid] if vid in versions else [])
            versions[vid] = (sort_key, marker)
            changes += 1
        else:
            _, key, vid = op
            removed = store.delete_version(b, key, vid)
            had = model.get(key, {}).pop(vid, None)
            assert (removed is None) == (had is None)
            changes += had is not None

    expected = [
        (key, vid, sk, i == 0)
        for key in sorted(model, key=lambda k: k.encode())
        for i, (vid, (sk, _)) in enumerate(
            sorted(model[key].items(), key=lambda item: item[1][0], reverse=True)
        )
    ]
    got = [(m["key"], m["versionId"], m["sortKey"], m["isLatest"]) for m in store.list_versions(b)]
    assert got == expected
    latest = [(m["key"], m["versionId"]) for m in store.list_latest(b)]
    assert latest == [(k, v) for k, v, _, is_latest in expected if is_latest]
    live = sum(1 for k, v, _, is_latest in expected if is_latest and not model[k][v][1])
    assert store.count_objects(b) == live
    entries = store.read_journal(start, 1000)
    assert [e.seq for e in entries] == list(range(start + 1, start + changes + 1))
    assert {e.bucket for e in entries} == {b}
