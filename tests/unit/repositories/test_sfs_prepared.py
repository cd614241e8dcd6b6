"""Small objects' directories made ahead by an idle-priority helper process (sfs_prepared):
each id handed out once with its directories, a bounded pool, nothing left behind."""

from __future__ import annotations

import array
import fcntl
import os
import subprocess
import sys
import termios
from collections.abc import Iterator
from pathlib import Path

import pytest

from crossbeat.repositories import syncgroup
from crossbeat.repositories.object_ids import ID_WIDTH, is_object_id
from crossbeat.repositories.sfs import SfsRepository, SfsWriter
from crossbeat.repositories.sfs_prepared import QUIET_BATCH, PreparedDirs, RefillPolicy
from tests.support.procs import wait_until
from tests.support.smallfs import small_filesystem

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


def pool_level(prepared: PreparedDirs) -> int:
    """Ids waiting in the helper's pipe."""
    assert prepared._fd is not None
    buf = array.array("i", [0])
    fcntl.ioctl(prepared._fd, termios.FIONREAD, buf)
    return buf[0] // (ID_WIDTH + 1)


def test_the_pool_holds_at_most_count_ids(repo: SfsRepository) -> None:
    take_prepared(repo).abort()
    prepared = repo._prepared
    assert prepared is not None
    wait_until(lambda: pool_level(prepared) >= 8, what="a full pool")
    # what the pipe holds and what this process read from it (the id taken was aborted)
    assert pool_level(prepared) == 8
    assert len(object_dirs(repo)) == 8 + len(prepared._ids)


def test_the_pool_grows_to_the_largest_burst_in_quiet_times(tmp_path: Path) -> None:
    root = tmp_path / "sfs"
    root.mkdir()
    prepared = PreparedDirs(str(root), 200, low=8, quiet_s=1.0)
    try:
        taken = []
        for _ in range(40):  # one burst: never a second without a take
            taken.append(wait_until(prepared.take, timeout=30, interval=0.001, what="an id"))
        assert len(set(taken)) == 40
        # a quarter more than the burst, made once nobody takes any; not the 200 allowed. The
        # helper counts the ids read from its pipe: the 40 taken and the few (<= low) this
        # process read with the last of them
        wait_until(lambda: pool_level(prepared) + len(prepared._ids) >= 50, timeout=60,
                   what="a pool sized to the burst")  # fmt: skip
        assert pool_level(prepared) <= (40 + 8) * 5 // 4
    finally:
        prepared.close()
    # the ids handed out are their takers'; the 50 made ahead went with the helper
    assert {d.name for d in root.glob("*/*")} == set(taken)


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


def test_a_helper_with_a_full_pool_ends_with_its_process(tmp_path: Path) -> None:
    """The pool full, the helper writes nothing that could fail: it must still notice that
    its gateway died (kill -9), not sleep on for ever."""
    code = (
        "import os, sys, time\n"
        "from crossbeat.repositories.sfs import SfsRepository\n"
        "from crossbeat.repositories.sfs_prepared import _pool_level\n"
        "repo = SfsRepository('r', sys.argv[1], prepared_objects=8)\n"
        "deadline = time.monotonic() + 30\n"
        "while repo._prepared.take() is None and time.monotonic() < deadline:\n"
        "    time.sleep(0.01)\n"
        "while _pool_level(repo._prepared._fd) < 8 and time.monotonic() < deadline:\n"
        "    time.sleep(0.01)\n"
        "print(repo._prepared._proc.pid, _pool_level(repo._prepared._fd), flush=True)\n"
        "os._exit(0)\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "sfs")], capture_output=True, text=True,
                         check=True, timeout=60)  # fmt: skip
    pid, level = map(int, out.stdout.split())
    assert level == 8  # full: the helper was waiting, not writing
    wait_until(lambda: gone(pid), timeout=10, what="the orphaned helper to exit")


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


# -- the helper's refill policy, on its own ------------------------------------------------


def burst(policy: RefillPolicy, taken: int, now: float) -> None:
    """The gateway takes `taken` ids, a few at a time, 10 ms apart, from `now` on."""
    level = policy.written
    for i in range(taken):
        level -= 1
        policy.saw(level, now + i * 0.01)


def test_below_low_one_id_at_a_time_even_while_busy() -> None:
    policy = RefillPolicy(200, 8, quiet_s=0.1, now=0.0, level=3)
    assert policy.plan(free_share=0.0, now=0.0) == (1, False)  # unsynced: no quiet time needed
    policy.wrote(5)
    assert policy.written == 8
    assert policy.plan(free_share=1.0, now=10.0) == (0, False)  # at low, no burst seen yet


def test_the_target_grows_to_the_largest_burst_and_refills_only_when_quiet() -> None:
    policy = RefillPolicy(200, 8, quiet_s=0.1, now=0.0, level=50)
    burst(policy, 40, now=1.0)  # 1.00 .. 1.39: 50 -> 10
    assert policy.plan(free_share=1.0, now=1.45) == (0, False)  # a take 60 ms ago: not quiet
    policy.saw(10, now=1.50)  # 110 ms without a take: the burst of 40 is over
    assert policy.target == 50
    assert policy.plan(free_share=0.1, now=1.50) == (0, False)  # others keep the machine busy
    assert policy.plan(free_share=0.5, now=1.50) == (40, True)  # 10 -> 50, synced first
    policy.wrote(40)
    policy.saw(50, now=1.6)
    assert policy.plan(free_share=1.0, now=5.0) == (0, False)  # full
    burst(policy, 45, now=6.0)  # 50 -> 5: below low, one at a time again, while it lasts
    assert policy.plan(free_share=0.0, now=6.5) == (1, False)


def test_batches_are_bounded_and_the_target_by_count() -> None:
    policy = RefillPolicy(100, 8, quiet_s=0.1, now=0.0, level=1000)
    burst(policy, 900, now=1.0)
    policy.saw(policy.written, now=20.0)
    assert policy.target == 100  # 900 + a quarter, at most count
    policy.written = 8
    n, sync = policy.plan(free_share=1.0, now=20.0)
    assert sync and n == QUIET_BATCH


def test_bursts_apart_are_not_added_up() -> None:
    policy = RefillPolicy(1000, 8, quiet_s=0.1, now=0.0, level=500)
    burst(policy, 30, now=1.0)
    policy.saw(policy.written, now=2.0)
    burst(policy, 20, now=3.0)
    policy.saw(policy.written, now=4.0)
    assert policy.target == 37  # the larger, 30, plus a quarter; not 50 plus a quarter


def test_without_cpu_figures_quiet_is_no_take() -> None:
    policy = RefillPolicy(100, 8, quiet_s=0.1, now=0.0, level=8)
    policy.target = 20
    assert policy.plan(free_share=None, now=0.05) == (0, False)
    assert policy.plan(free_share=None, now=0.2) == (12, True)


def test_the_helper_outlasts_a_full_disk(tmp_path: Path) -> None:
    """No inodes left (a full disk does the same to mkdir on ext4): the helper waits and
    tries again instead of exiting for good, so the pool fills again once there is room."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    with small_filesystem(mnt, 8) as root:
        repo = SfsRepository("r", root / "sfs", prepared_objects=8)
        try:
            take_prepared(repo)  # the helper runs
            pid = helper_pid(repo)
            fs = os.statvfs(root)
            used = fs.f_files - fs.f_ffree
            subprocess.run(["mount", "-o", f"remount,nr_inodes={used + 2}", str(root)], check=True)
            # take what the pool holds: its refill finds no inodes
            while repo._prepared is not None and repo._prepared.take() is not None:
                pass
            wait_until(lambda: os.statvfs(root).f_ffree == 0 or gone(pid), timeout=30,
                       what="the helper out of inodes")
            subprocess.run(["mount", "-o", "remount,nr_inodes=100000", str(root)], check=True)
            assert take_prepared(repo)._prepared  # the same helper makes them again
            assert helper_pid(repo) == pid and not gone(pid)
        finally:
            repo.close()


def test_a_helper_that_cannot_start_for_want_of_descriptors_is_tried_again(tmp_path: Path) -> None:
    """EMFILE under a burst of connections made the first start fail, and that turned the
    helper off for the worker's life (and logged a traceback)."""
    import resource

    pool = PreparedDirs(str(tmp_path), 8, low=4, start_retry_s=0.2)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    held: list[int] = []
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 16, hard))
        try:
            while True:
                held.append(os.open("/dev/null", os.O_RDONLY))
        except OSError:
            pass  # out of descriptors, as a worker serving too many connections is
        assert pool.take() is None  # could not start: nothing, and no exception
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    try:
        assert wait_until(pool.take, timeout=30, interval=0.05, what="an id once descriptors are back")
    finally:
        pool.close()
