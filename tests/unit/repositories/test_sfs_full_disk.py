"""sfs on a full disk: writes that fail leave no temporary files behind."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from crossbeat.repositories.sfs import SfsRepository
from tests.support.smallfs import fill, small_filesystem


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "mnt").mkdir()
    with small_filesystem(tmp_path / "mnt", 4) as mnt:
        yield mnt


def test_a_repository_opened_on_a_full_disk_leaves_no_key_file_half_made(small_fs: Path) -> None:
    fill(small_fs / "filler")
    for _ in range(3):
        with pytest.raises(OSError):
            SfsRepository("r", small_fs / "sfs")
    assert os.listdir(small_fs / "sfs") == []


def test_a_manifest_replaced_on_a_full_disk_leaves_no_temporary_file(small_fs: Path) -> None:
    repo = SfsRepository("r", small_fs / "sfs", group_sync=False)
    with repo.writer() as writer:
        writer.write(b"data")
        key = writer.commit().dataKey
    fill(small_fs / "filler")
    with pytest.raises(OSError):
        repo.lock(key)  # a migration's lock rewrites the manifest
    assert sorted(os.listdir(repo.object_dir(key))) == ["chunks", "manifest.json"]
    (small_fs / "filler").unlink()
    assert repo.read_bytes(key) == b"data"
