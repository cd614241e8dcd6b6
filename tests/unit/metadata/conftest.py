"""Fixtures for the metadata store tests: a real SQLite store in a temporary directory."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from crossbeat.metadata import Bucket, MetadataSettings, new_version_id
from crossbeat.metadata.sqlite import SqliteMetadataStore

NewVersion = Callable[..., dict[str, Any]]


@pytest.fixture
def settings() -> MetadataSettings:
    # No background retention: tests that trim call trim_journal themselves.
    return MetadataSettings(
        journal_retention_entries=None,
        journal_retention_seconds=None,
        journal_trim_interval_seconds=None,
    )


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "metadata.sqlite3"


@pytest.fixture
def store(db_path: Path, settings: MetadataSettings) -> Iterator[SqliteMetadataStore]:
    s = SqliteMetadataStore(db_path, settings)
    yield s
    s.close()


@pytest.fixture
def bucket(store: SqliteMetadataStore) -> str:
    store.create_bucket(Bucket("bkt", "owner", "loc", "2024-01-01T00:00:00.000Z"))
    return "bkt"


def version(bucket: str, key: str, version_id: str | None = None, **fields: Any) -> dict[str, Any]:
    """Object metadata as the gateway builds it: a fresh versionId doubles as sortKey."""
    sort_key = new_version_id()
    return {
        "bucket": bucket,
        "key": key,
        "versionId": version_id or sort_key,
        "sortKey": sort_key,
        "isDeleteMarker": False,
        "size": 0,
        "etag": '"d41d8cd98f00b204e9800998ecf8427e"',
        "location": [],
        **fields,
    }
