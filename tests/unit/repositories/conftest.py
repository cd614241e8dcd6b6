"""Fixtures for the repository tests: an sfs repository in a temporary directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from crossbeat.repositories.sfs import SfsRepository

SMALL_CHUNK = 1024


@pytest.fixture
def sfs(tmp_path: Path) -> SfsRepository:
    """An sfs repository with 1 KiB chunks, so multi-chunk objects stay small."""
    return SfsRepository("local", tmp_path / "sfs", chunk_size=SMALL_CHUNK)
