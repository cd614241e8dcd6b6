from __future__ import annotations

import threading
from pathlib import Path

import pytest

from crossbeat.repositories import syncgroup
from crossbeat.repositories.sfs import SfsRepository

pytestmark = pytest.mark.skipif(not syncgroup.available(), reason="syncfs(2) is Linux-only")


def test_concurrent_writers_share_syncs(tmp_path: Path) -> None:
    group = syncgroup.SyncGroup(tmp_path)
    barrier = threading.Barrier(32)

    def writer(i: int) -> None:
        (tmp_path / f"f{i}").write_bytes(b"x" * 4096)
        barrier.wait()
        group.sync()

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert 1 <= group.rounds < 32
    group.sync()  # a lone caller still gets its own round
    group.close()


def test_small_objects_commit_through_the_group(tmp_path: Path) -> None:
    repo = SfsRepository("r", tmp_path / "sfs", chunk_size=1024)
    assert repo._sync_group is not None
    with repo.writer() as w:
        w.write(b"small")
        loc = w.commit()
    assert b"".join(repo.read(loc.dataKey)) == b"small"
    assert repo._sync_group.rounds == 1
    with repo.writer() as w:  # a multi-chunk object takes the fsync path
        w.write(b"y" * 3000)
        big = w.commit()
    assert b"".join(repo.read(big.dataKey)) == b"y" * 3000
    assert repo._sync_group.rounds == 1
