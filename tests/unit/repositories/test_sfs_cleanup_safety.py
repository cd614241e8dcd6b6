"""The cleanup pass never destroys what metadata still needs: an object in use whose
manifest is lost keeps its chunks, and more unreferenced objects than a crash leaves (the
metadata lost or rolled back) are all kept, with an error saying why."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from crossbeat.repositories.base import ORPHAN_FLOOR
from crossbeat.repositories.errors import RepositoryError
from crossbeat.repositories.sfs import SfsRepository


def test_an_object_in_use_whose_manifest_is_lost_keeps_its_chunks(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    repo = SfsRepository("r", tmp_path / "sfs", chunk_size=1024, group_sync=False)
    key = repo.put_bytes(b"x" * 5000).dataKey
    manifest = Path(repo.object_dir(key)) / "manifest.json"
    manifest.unlink()
    with caplog.at_level(logging.ERROR, logger="crossbeat.repositories.sfs"):
        assert repo.cleanup(lambda k: k == key, older_than_s=0) == []
    assert len(list((Path(repo.object_dir(key)) / "chunks" / "0").iterdir())) == 5
    assert f"object {key} is in use but its manifest is missing" in caplog.text
    # not in use: an incomplete object like any other
    assert repo.cleanup(lambda k: False, older_than_s=0) == [key]


def test_more_orphans_than_a_crash_leaves_are_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    repo = SfsRepository("r", tmp_path / "sfs", group_sync=False)
    keys = [repo.put_bytes(b"%d" % i).dataKey for i in range(ORPHAN_FLOOR + 10)]
    in_use = set(keys[:5])  # the metadata rolled back: it names only the oldest few
    with caplog.at_level(logging.ERROR, logger="crossbeat.repositories.base"):
        assert repo.cleanup(lambda k: k in in_use, older_than_s=0) == []
    assert sorted(repo.keys()) == sorted(keys)
    assert f"{ORPHAN_FLOOR + 5} of its {ORPHAN_FLOOR + 10} objects are named by no metadata" in caplog.text
    # a crash's few leftovers still go
    in_use = set(keys[5:])
    assert sorted(repo.cleanup(lambda k: k in in_use, older_than_s=0)) == sorted(keys[:5])


def test_a_lost_key_file_is_not_replaced_while_objects_need_it(tmp_path: Path) -> None:
    """A fresh SipHash key made every stored digest fail to verify, silently."""
    root = tmp_path / "sfs"
    key = SfsRepository("r", root, group_sync=False).put_bytes(b"data").dataKey
    (root / "repository.json").unlink()
    with pytest.raises(RepositoryError, match="repository.json is missing but .* holds objects"):
        SfsRepository("r", root, group_sync=False)
    assert not (root / "repository.json").exists()
    assert key in {p.name for p in root.glob("*/*")}
