"""Opening and closing the store, background retention, misuse that must fail loudly."""

from __future__ import annotations

import gc
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from crossbeat.metadata import (
    Bucket,
    InvalidMetadata,
    JournalTruncated,
    MetadataSettings,
    StoreClosed,
    open_store,
)
from crossbeat.metadata.sqlite import SqliteMetadataStore

from .conftest import version


def test_open_store_accepts_paths_and_sqlite_urls(tmp_path: Path) -> None:
    for target in (tmp_path / "a.db", f"sqlite://{tmp_path}/b.db", f"sqlite:///{tmp_path}/c.db"):
        store = open_store(target)
        try:
            store.create_bucket(Bucket("b", "o", "l", "2024-01-01T00:00:00.000Z"))
        finally:
            store.close()
    assert {p.name for p in tmp_path.glob("*.db")} == {"a.db", "b.db", "c.db"}
    with pytest.raises(NotImplementedError):
        open_store("postgresql://localhost/crossbeat")
    with pytest.raises(InvalidMetadata):
        open_store("mysql://localhost/x")


def test_state_survives_reopen_and_closed_store_refuses(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    with SqliteMetadataStore(path) as store:
        store.create_bucket(Bucket("b", "o", "l", "2024-01-01T00:00:00.000Z"))
        v = version("b", "k")
        store.put_version(v)
        store.set_checkpoint("populator", 1)
    store.close()  # idempotent
    with pytest.raises(StoreClosed):
        store.put_version(version("b", "k"))
    with pytest.raises(StoreClosed):
        store.get_version("b", "k")
    with SqliteMetadataStore(path) as again:
        assert again.get_version("b", "k")["versionId"] == v["versionId"]  # type: ignore[index]
        assert again.checkpoints() == {"populator": 1} and again.last_seq() == 2


def test_reader_connections_do_not_outlive_their_threads(
    store: SqliteMetadataStore, bucket: str
) -> None:
    def read() -> None:
        assert store.get_bucket(bucket) is not None

    for _ in range(20):
        t = threading.Thread(target=read)
        t.start()
        t.join(timeout=30)
    gc.collect()
    assert store.open_readers() <= 2


def test_calling_the_store_from_a_precondition_fails_loudly(
    store: SqliteMetadataStore, bucket: str
) -> None:
    def reentrant(current: dict[str, Any] | None) -> None:
        store.put_version(version(bucket, "other"))

    with pytest.raises(RuntimeError, match="inside a write operation"):
        store.put_version(version(bucket, "k"), precondition=reentrant)
    assert store.list_latest(bucket) == []


def test_retention_runs_in_the_background(tmp_path: Path) -> None:
    settings = MetadataSettings(
        journal_retention_entries=2,
        journal_retention_seconds=None,
        journal_trim_interval_seconds=0.05,
    )
    with SqliteMetadataStore(tmp_path / "m.db", settings) as store:
        store.create_bucket(Bucket("b", "o", "l", "2024-01-01T00:00:00.000Z"))
        for i in range(5):
            store.put_version(version("b", f"k{i}"))
        deadline = time.monotonic() + 20
        while True:
            try:
                store.read_journal(0, 10)
            except JournalTruncated as exc:
                # It may have run between the puts; once it runs after them, 5 and 6 remain.
                if exc.first_available == 5:
                    break
            assert time.monotonic() < deadline, "background retention never ran"
            time.sleep(0.01)
        assert [e.seq for e in store.read_journal(4, 10)] == [5, 6]
