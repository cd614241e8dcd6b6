"""Small objects' directories made ahead by an idle-priority helper process (sfs_prepared):
each id handed out once with its directories, a bounded pool, nothing left behind."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from crossbeat.repositories import syncgroup
from crossbeat.repositories.object_ids import ID_WIDTH, is_object_id
from crossbeat.repositories.sfs import SfsRepository, SfsWriter
from crossbeat.repositories.sfs_prepared import PreparedDirs
from tests.support.procs import wait_until

pytestmark = pytest.mark.skipif(not syncgroup.available(), reason="syncfs(2) is Linux-only")


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[SfsRepository]:
    """A repository with a pool of prepared directories, closed (its helper stopped) after."""
    repo = SfsRepository("r", tmp_path / "sfs", prepared_objects=8)
    yield repo
    repo.close()


def take_prepared(repo: SfsRepository, data: bytes = b"data") -> SfsWriter:
    """A small writer whose id came from the pool (the first calls start the helper)."""

    def prepared() -> SfsWriter | None:
        writer = repo.small_writer(data)
        assert isinstance(writer, SfsWriter)
        if writer._prepared:
            return writer
        writer.abort()
        return None

    writer: SfsWriter = wait_until(prepared, timeout=30, interval=0.01, what="a prepared id")
    return writer


def object_dirs(repo: SfsRepository) -> set[str]:
    return {key for key, _ in repo._object_dirs()}


def gone(pid: int) -> bool:
    """The process has exited (a zombie waiting for its reaper counts as exited)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def helper_pid(repo: SfsRepository) -> int:
    assert repo._prepared is not None and repo._prepared._proc is not None
    return repo._prepared._proc.pid


def test_each_prepared_id_comes_once_with_its_directories(repo: SfsRepository) -> None:
    writers = [take_prepared(repo, f"object {i}".encode()) for i in range(30)]
    keys = [w.data_key for w in writers]
    assert len(set(keys)) == 30
    for key in keys:
        assert len(key) == ID_WIDTH and is_object_id(key)
        assert (repo.root / key[-3:] / key / "chunks" / "0").is_dir()
        # its chunk file is made ahead too, empty; the manifest is not (it commits the object)
        assert (repo.root / key[-3:] / key / "chunks" / "0" / f"{key}-0").read_bytes() == b""
        assert not (repo.root / key[-3:] / key / "manifest.json").exists()
    assert all(w.stage() for w in writers)
    locations = [w.commit() for w in writers]
    assert [repo.read_bytes(loc.dataKey) for loc in locations] == [
        f"object {i}".encode() for i in range(30)
    ]
    assert sorted(repo.keys()) == sorted(keys)


def test_the_helper_runs_at_idle_priority(repo: SfsRepository) -> None:
    take_prepared(repo).abort()
    assert os.sched_getscheduler(helper_pid(repo)) == os.SCHED_IDLE


def test_the_pool_is_bounded_by_its_pipe(repo: SfsRepository) -> None:
    take_prepared(repo).abort()
    pid = helper_pid(repo)
    # the helper is blocked writing to the full pipe: the pool is as large as it gets
    wait_until(lambda: Path(f"/proc/{pid}/wchan").read_text().endswith("pipe_write"), what="a full pool")
    assert repo._prepared is not None and repo._prepared._fd is not None
    pipe_bytes = fcntl.fcntl(repo._prepared._fd, fcntl.F_GETPIPE_SZ)
    held = len(repo._prepared._ids)
    # what the pipe holds, what this process read from it, and the one being handed over
    assert len(object_dirs(repo)) <= pipe_bytes // (ID_WIDTH + 1) + held + 1


def test_close_stops_the_helper_and_removes_what_it_made(repo: SfsRepository) -> None:
    kept = take_prepared(repo, b"kept")
    assert kept.stage()
    location = kept.commit()
    wait_until(lambda: len(object_dirs(repo)) > 5, what="directories made ahead")
    pid = helper_pid(repo)
    repo.close()
    assert repo._prepared is not None and repo._prepared._proc is None
    with pytest.raises(ChildProcessError):  # reaped by close()
        os.waitpid(pid, os.WNOHANG)
    assert object_dirs(repo) == {location.dataKey}
    assert repo.read_bytes(location.dataKey) == b"kept"
    assert repo.small_writer(b"after close") is not None  # makes its own directories


def test_a_prepared_object_whose_directories_went_away_is_written_anyway(repo: SfsRepository) -> None:
    writer = take_prepared(repo, b"still here")
    # a cleanup pass run while the gateway serves removes incomplete objects
    removed = repo.cleanup(lambda key: False, older_than_s=0)
    assert writer.data_key in removed
    assert writer.stage()
    location = writer.commit()
    assert location.dataKey == writer.data_key
    assert repo.read_bytes(location.dataKey) == b"still here"


def test_the_helper_ends_with_its_process_and_cleanup_removes_its_leftovers(tmp_path: Path) -> None:
    root = tmp_path / "sfs"
    # a gateway process that dies without closing anything (kill -9)
    code = (
        "import os, sys, time\n"
        "from crossbeat.repositories.sfs import SfsRepository\n"
        "repo = SfsRepository('r', sys.argv[1], prepared_objects=8)\n"
        "deadline = time.monotonic() + 30\n"
        "while repo._prepared.take() is None and time.monotonic() < deadline:\n"
        "    time.sleep(0.01)\n"
        "print(repo._prepared._proc.pid, flush=True)\n"
        "os._exit(0)\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(root)], capture_output=True, text=True,
                         check=True, timeout=60)  # fmt: skip
    pid = int(out.stdout)
    wait_until(lambda: gone(pid), what="the orphaned helper to exit")
    repo = SfsRepository("r", root)
    assert object_dirs(repo)  # directories made ahead, never used
    assert list(repo.keys()) == []  # none of them is an object
    repo.cleanup(lambda key: False, older_than_s=0)
    assert object_dirs(repo) == set()


def test_prepared_dirs_need_a_positive_count(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        PreparedDirs(str(tmp_path), 0)
    repo = SfsRepository("r", tmp_path / "sfs")  # off unless asked for
    assert repo._prepared is None


def test_small_objects_make_their_own_directories_once_the_helper_is_gone(repo: SfsRepository) -> None:
    take_prepared(repo).abort()
    os.kill(helper_pid(repo), 9)
    prepared = repo._prepared
    assert prepared is not None

    def drained() -> bool:  # what it made before it died is still handed out
        writer = repo.small_writer(b"x")
        assert writer is not None
        writer.abort()
        return prepared._gone

    wait_until(drained, what="the end of the helper's pipe")
    writer = repo.small_writer(b"own directories")
    assert isinstance(writer, SfsWriter) and not writer._prepared
    assert writer.stage()
    assert repo.read_bytes(writer.commit().dataKey) == b"own directories"
