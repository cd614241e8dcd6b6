from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from crossbeat.repositories import syncgroup
from crossbeat.repositories.sfs import SfsRepository

pytestmark = pytest.mark.skipif(not syncgroup.available(), reason="syncfs(2) is Linux-only")


def test_concurrent_writers_share_syncs(tmp_path: Path) -> None:
    group = syncgroup.SyncGroup(tmp_path, shared_dir=str(tmp_path))
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


def test_one_round_covers_every_ticket_taken_before_it(tmp_path: Path) -> None:
    group = syncgroup.SyncGroup(tmp_path, shared_dir=str(tmp_path))
    tickets = []
    for i in range(5):
        (tmp_path / f"f{i}").write_bytes(b"x")
        tickets.append(group.ticket())
    for ticket in tickets:  # the first call runs the round; the others find it done
        group.sync(ticket)
    assert group.rounds == 1
    (tmp_path / "late").write_bytes(b"y")
    group.sync(group.ticket())  # written after that round: needs a new one
    assert group.rounds == 2
    group.close()


def test_staged_objects_share_one_round_and_abort_removes_them(tmp_path: Path) -> None:
    repo = SfsRepository("r", tmp_path / "sfs", chunk_size=1024)
    assert repo.small_writer(b"z" * 1024) is None  # a whole chunk: not stageable
    staged = [repo.small_writer(f"obj{i}".encode()) for i in range(3)]
    assert all(w is not None for w in staged)
    assert list(repo.keys()) == []  # held in memory until staged
    assert all(w.stage() for w in staged if w is not None)
    assert len(list(repo.keys())) == 3
    locations = [w.commit() for w in staged if w is not None]
    assert repo._sync_group is not None and repo._sync_group.rounds == 1
    assert [repo.read_bytes(loc.dataKey) for loc in locations] == [b"obj0", b"obj1", b"obj2"]
    dropped = repo.small_writer(b"dropped")
    assert dropped is not None and dropped.stage()
    dropped.abort()
    assert sorted(repo.keys()) == sorted(loc.dataKey for loc in locations)


def test_a_round_in_another_process_covers_what_was_written_before_it(tmp_path: Path) -> None:
    shared = tmp_path / "shm"
    shared.mkdir()
    mine = syncgroup.SyncGroup(tmp_path, shared_dir=str(shared))
    (tmp_path / "f").write_bytes(b"x")
    ticket = mine.ticket()
    # another gateway worker on the same filesystem runs a round after our writes
    code = (
        "import sys; from crossbeat.repositories import syncgroup;"
        "g = syncgroup.SyncGroup(sys.argv[1], shared_dir=sys.argv[2]); g.sync();"
        "assert g.rounds == 1; g.close()"
    )
    subprocess.run([sys.executable, "-c", code, str(tmp_path), str(shared)], check=True, timeout=60)
    mine.sync(ticket)
    assert mine.rounds == 0  # settled by the other process's syncfs
    (tmp_path / "late").write_bytes(b"y")
    mine.sync(mine.ticket())  # written after that round: needs one of our own
    assert mine.rounds == 1
    mine.close()


def test_a_torn_or_missing_shared_state_means_a_round_of_our_own(tmp_path: Path) -> None:
    group = syncgroup.SyncGroup(tmp_path, shared_dir=str(tmp_path))
    ticket = group.ticket()
    (state,) = tmp_path.glob("crossbeat-syncfs-*")
    later = ticket + 10**9
    state.write_bytes(later.to_bytes(8, "little") + (later + 1).to_bytes(8, "little"))  # halves differ
    group.sync(ticket)
    assert group.rounds == 1
    group.close()
    private = syncgroup.SyncGroup(tmp_path, shared_dir=str(tmp_path / "missing"))
    private.sync()
    assert private.rounds == 1
    private.close()


def test_concurrent_groups_run_one_round_at_a_time(tmp_path: Path) -> None:
    groups = [syncgroup.SyncGroup(tmp_path, shared_dir=str(tmp_path)) for _ in range(4)]
    barrier = threading.Barrier(len(groups) * 4)

    def writer(group: syncgroup.SyncGroup, i: int) -> None:
        (tmp_path / f"g{id(group)}-{i}").write_bytes(b"x" * 4096)
        ticket = group.ticket()
        barrier.wait()
        group.sync(ticket)

    threads = [threading.Thread(target=writer, args=(g, i)) for g in groups for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    # every ticket was taken before any round began: the first round covers all sixteen
    assert sum(g.rounds for g in groups) == 1
    for g in groups:
        g.close()
