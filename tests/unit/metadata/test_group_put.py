"""Versions stored as a group (`put_built_versions`, multi-row statements) end exactly as if
they had been put one by one: rows, latest, displaced versions, journal entries and seqs."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from crossbeat.metadata import Bucket, InvalidMetadata, MetadataSettings, NoSuchBucket
from crossbeat.metadata.sqlite import SqliteMetadataStore
from crossbeat.metadata.store import BuiltOutcome

from .conftest import version

B = "bkt"


def open_store(path: Path, settings: MetadataSettings) -> SqliteMetadataStore:
    store = SqliteMetadataStore(path, settings)
    store.create_bucket(Bucket(B, "owner", "loc", "2024-01-01T00:00:00.000Z"))
    return store


def put_group(store: SqliteMetadataStore, metas: list[dict[str, Any]]) -> list[BuiltOutcome]:
    got: list[BuiltOutcome] = []
    done = threading.Event()

    def finished(outcomes: list[BuiltOutcome]) -> None:
        got.extend(outcomes)
        done.set()

    def builder(meta: dict[str, Any]) -> Callable[[Bucket | None], dict[str, Any]]:
        return lambda _bucket: dict(meta)

    store.put_built_versions([(m["bucket"], builder(m)) for m in metas], finished)
    assert done.wait(30)
    return got


def state(store: SqliteMetadataStore) -> tuple[Any, ...]:
    versions = store.list_versions(B, limit=10_000)
    journal = [(e.seq, e.op, e.key, e.versionId, e.value) for e in store.read_journal(0, 10_000)]
    return versions, [store.get_version(B, m["key"]) for m in versions], journal


@pytest.fixture
def pair(tmp_path: Path, settings: MetadataSettings) -> Any:
    group, single = open_store(tmp_path / "g.db", settings), open_store(tmp_path / "s.db", settings)
    yield group, single
    group.close()
    single.close()


def both(pair: Any, before: list[dict[str, Any]], metas: list[dict[str, Any]]) -> list[BuiltOutcome]:
    group, single = pair
    for store in pair:
        for meta in before:
            store.put_version(dict(meta))
    outcomes = put_group(group, metas)
    for meta, outcome in zip(metas, outcomes, strict=True):
        try:
            displaced = single.put_version(dict(meta))
        except InvalidMetadata as exc:
            assert isinstance(outcome, InvalidMetadata), (meta, outcome, exc)
            continue
        assert not isinstance(outcome, BaseException), outcome
        assert outcome[1] == displaced
    assert state(group) == state(single)
    return outcomes


def test_many_new_keys_in_one_group_span_several_statements(pair: Any) -> None:
    metas = [version(B, f"k{i:04d}", size=i) for i in range(600)]
    assert all(o[1] == [] for o in both(pair, [], metas))  # type: ignore[index]


def test_null_versions_replaced_in_place_are_displaced(pair: Any) -> None:
    before = [version(B, f"k{i}", "null", size=1) for i in range(5)]
    metas = [version(B, f"k{i}", "null", size=2) for i in range(3)] + [version(B, "new")]
    outcomes = both(pair, before, metas)
    assert [len(o[1]) for o in outcomes] == [1, 1, 1, 0]  # type: ignore[index]


def test_a_late_replica_does_not_become_the_latest(pair: Any) -> None:
    older = version(B, "k")
    newer = version(B, "k")
    both(pair, [newer], [older, version(B, "other")])


def test_a_replaced_latest_with_an_older_sort_key_hands_latest_back(pair: Any) -> None:
    first = version(B, "k")
    null_old = version(B, "k", "null")
    null_new = {**null_old, "sortKey": first["sortKey"][:-1] + "0", "size": 9}  # older than both
    both(pair, [first, null_old], [null_new])


def test_the_same_null_key_twice_in_a_group(pair: Any) -> None:
    both(pair, [version(B, "k", "null")], [version(B, "k", "null", size=i) for i in range(3)])


def test_versions_of_one_key_in_one_group(pair: Any) -> None:
    both(pair, [], [version(B, "k", size=i) for i in range(4)])


def test_one_refused_version_leaves_the_others(pair: Any) -> None:
    taken = version(B, "k")
    clash = {**version(B, "k"), "sortKey": taken["sortKey"]}  # another version, same sortKey
    outcomes = both(pair, [taken], [version(B, "a"), clash, version(B, "b")])
    assert [isinstance(o, InvalidMetadata) for o in outcomes] == [False, True, False]


def test_a_build_that_raises_refuses_only_its_item(pair: Any) -> None:
    group, _ = pair
    got: list[BuiltOutcome] = []
    done = threading.Event()

    def boom(_bucket: Bucket | None) -> dict[str, Any]:
        raise ValueError("refused")

    def finished(outcomes: list[BuiltOutcome]) -> None:
        got.extend(outcomes)
        done.set()

    ok = version(B, "ok")
    gone = version("gone", "k")  # built even though its bucket is None: the store refuses it
    group.put_built_versions([(B, lambda _b: dict(ok)), (B, boom), ("gone", lambda _b: gone)], finished)
    assert done.wait(30)
    assert not isinstance(got[0], BaseException) and isinstance(got[1], ValueError)
    assert isinstance(got[2], NoSuchBucket)
    assert [e.key for e in group.read_journal(0, 10) if e.key] == ["ok"]  # ("" is the bucket)


def test_a_refused_group_that_replaced_in_place_is_undone(pair: Any) -> None:
    """The group deletes the null version it replaces before its INSERT is refused: that
    attempt is undone and the group stored item by item, as the one-by-one puts do."""
    taken = version(B, "k")
    clash = {**version(B, "k"), "sortKey": taken["sortKey"]}
    outcomes = both(
        pair, [taken, version(B, "n", "null", size=1)], [version(B, "n", "null", size=2), clash]
    )
    assert [isinstance(o, InvalidMetadata) for o in outcomes] == [False, True]
    assert len(outcomes[0][1]) == 1  # type: ignore[index]  # the old null version, displaced
