"""Object directories made ahead of need, in CPU time nobody else wants, for small objects.

A small object in the seed-003 layout needs up to four new directories (its fan-out
directory, `{objectId}/`, `chunks/`, `chunks/0/`) before its two files. On ext4 each new
directory costs an inode and a zeroed directory block, about a tenth of the CPU a 4 KiB PUT
costs the whole machine (s5cmd client included; measured with perf). A gateway that
acknowledges only after fsync leaves the CPU idle part of the time while it waits for the
disk (11-12% with 64 s5cmd clients), so a helper process running at `SCHED_IDLE` priority
makes those directories in that idle time, for object ids it picks itself, and hands the ids
over a pipe. Measured (interleaved rounds of 2,000 4 KiB PUTs, 64 workers, two gateway
processes): +7-8% PUT/s with the default 256, machine idle 11.7% -> 6.0%. The helper also
makes the object's (empty) chunk file `chunks/0/{objectId}-0`, so the writer allocates no
inode for it either (10 interleaved rounds: +2% PUT/s, 4% less CPU per PUT, idle 5.6% ->
4.8%). The manifest is not made ahead: its presence is what makes an object complete.

Bursts: a pool that the helper refills during a burst of PUTs helps the burst little (its
directories must be written out by the burst's own syncfs rounds). So the helper keeps
`low` ids (256) ready at all times, refilling whenever a CPU idles, and beyond that
prepares for bursts like the largest it has seen (plus a quarter, up to `count`, default
4096 per gateway process), but only in quiet times: no PUT taking ids for 0.1 s and at least
a quarter of the machine's CPU left idle by others. Those it syncs before handing them out.
Measured (interleaved rounds of 2,000 4 KiB PUTs, 64 workers, two gateway processes, 6 s
between rounds): 2154 -> 2386 PUT/s, CPU per PUT 0.465 -> 0.360 ms. Under steady load
the pool stays near `low` and PUTs cost what they did.

Contract:
- `take()` never waits for the helper: it costs at most one non-blocking read (and, the
  first time, starting the helper). It returns an objectId whose directories
  `{fanout}/{id}/chunks/0` and empty chunk file `{id}-0` were made, or None when none is
  ready (the caller then makes an id and its directories itself). Each id is handed out
  once: one `PreparedDirs` per process and repository.
- At most `count` ids wait in the pipe (the helper asks the kernel for that much room and
  counts what the pipe holds), and this process holds at most 64 more it read from it. A
  full pool costs ten wake-ups a second of the helper.
- An id dates from when its directories were made, not from when its object is written.
- The shared syncfs that commits an object makes its directories durable too, whoever made
  them (syncfs covers the whole filesystem): durability never rests on the helper. Those
  made in a quiet time the helper also syncs before handing them out, so that this syncfs
  finds them written already (a failed sync of the helper's changes nothing else).
- Directories never used (a crash, a stop) are incomplete objects without a manifest: the
  cleanup pass removes them (the gateway runs it with no age limit at start), and `close()`
  removes those it was holding. If something removes a prepared directory before its
  object is written (a cleanup pass run while the gateway serves), the writer finds it
  missing and makes it again: the id is still its own.
- The helper exits on SIGTERM (`close()`) or as soon as the pipe's read end is closed (this
  process died, whatever the pool's level).

The helper imports this module, `object_ids` and `syncgroup` without the packages' `__init__` modules
(which import pydantic and take a fifth of a second), so it starts in milliseconds.
"""

from __future__ import annotations

import array
import collections
import contextlib
import errno
import fcntl
import logging
import os
import select
import shutil
import signal
import subprocess
import sys
import termios
import threading
import time

from crossbeat.repositories import syncgroup
from crossbeat.repositories.object_ids import ID_WIDTH, new_object_id

log = logging.getLogger("crossbeat.repositories")
_RECORD = ID_WIDTH + 1  # an id and a newline
# The helper's program: this module's `_helper`, imported under stand-in packages (stdlib
# only; -I -S: no environment, no site-packages).
_BOOTSTRAP = (
    "import sys, types\n"
    "for name, path in zip(('crossbeat', 'crossbeat.repositories'), sys.argv[1:3]):\n"
    "    pkg = types.ModuleType(name); pkg.__path__ = [path]; sys.modules[name] = pkg\n"
    "from crossbeat.repositories.sfs_prepared import _helper\n"
    "_helper(sys.argv[3], *map(int, sys.argv[4:7]), float(sys.argv[7]))\n"
)
_CHUNK_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
LOW_WATER = 256  # below it the pool refills whenever a CPU idles
_FULL_DISK_PAUSE_S = 1.0  # the helper's wait before trying again on a full disk
QUIET_S = 0.1  # above it, only after this long without a take
# A helper that could not start for want of descriptors, processes or memory is tried again
# this much later: the shortage passes (EMFILE under a burst of connections), and giving up
# for good left the worker making every small object's directories until it restarted.
START_RETRY_S = 10.0
_SHORTAGES = frozenset({errno.EMFILE, errno.ENFILE, errno.EAGAIN, errno.ENOMEM})
QUIET_IDLE = 0.25  # ... in which others left at least this share of the machine's CPU idle
QUIET_BATCH = 64  # ids made, synced and handed over together in a quiet time (under PIPE_BUF)
_READ_RECORDS = 64  # ids this process moves from the pipe at a time: the helper sees takes


class PreparedDirs:
    """Object ids with their directories made in advance, for the sfs repository at `root`."""

    def __init__(
        self, root: str, count: int, low: int = LOW_WATER, quiet_s: float = QUIET_S,
        start_retry_s: float = START_RETRY_S,
    ) -> None:
        if count <= 0 or low <= 0 or quiet_s <= 0:
            raise ValueError("count, low and quiet_s must be positive")
        self.root = root
        self.count = count  # the most ids made ahead
        self.low = min(low, count)  # below it the helper refills even while PUTs run
        self.quiet_s = quiet_s  # no take for this long: a burst has ended
        self._ids: collections.deque[str] = collections.deque()
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._closed = False
        self._gone = False  # the helper could not start, or ended: nothing more will come
        self._start_retry_s = start_retry_s
        self._retry_at = 0.0  # monotonic time before which a failed start is not tried again
        self.taken = 0  # ids handed out (tests and diagnostics)

    def take(self) -> str | None:
        """A prepared objectId, or None if none is ready; starts the helper on first use."""
        ids = self._ids
        if not ids:
            with self._lock:
                if self._closed or self._gone:
                    return None
                if self._fd is None:
                    if time.monotonic() < self._retry_at:
                        return None
                    try:
                        self._start()
                    except OSError as exc:
                        self._start_failed(exc)
                    return None
                self._read(self._fd)
            if not ids:
                return None
        try:
            key = ids.popleft()
        except IndexError:  # another thread took the last one
            return None
        self.taken += 1
        return key

    def _start_failed(self, exc: OSError) -> None:
        if exc.errno in _SHORTAGES:
            self._retry_at = time.monotonic() + self._start_retry_s
            log.warning("cannot start the sfs directory helper for %s now (%s): small objects "
                        "make their own directories; trying again in %.0f s",
                        self.root, exc, self._start_retry_s)
        else:
            self._gone = True
            log.warning("cannot start the sfs directory helper for %s (%s): small objects "
                        "make their own directories", self.root, exc)

    def _start(self) -> None:
        read_fd, write_fd = os.pipe2(os.O_CLOEXEC)
        try:
            with contextlib.suppress(OSError):  # at least one page whatever we ask
                fcntl.fcntl(write_fd, fcntl.F_SETPIPE_SZ, self.count * _RECORD)
            os.set_blocking(read_fd, False)
            self._proc = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _BOOTSTRAP, os.path.dirname(_PACKAGE_DIR),
                 _PACKAGE_DIR, self.root, str(write_fd), str(self.count), str(self.low),
                 str(self.quiet_s)],
                pass_fds=(write_fd,),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
            )
        except BaseException:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)  # the helper holds the only write end
        self._fd = read_fd

    def _read(self, fd: int) -> int:
        """Move what the helper has made from the pipe to `_ids`; how many ids came."""
        try:
            # records are written whole (each is under PIPE_BUF, so atomic), so a read of a
            # multiple of the record size returns whole records
            data = os.read(fd, _READ_RECORDS * _RECORD)
        except BlockingIOError:
            return 0
        if not data and not self._gone:  # end of file: the helper is gone
            self._gone = True
            if self._proc is not None:
                self._proc.poll()  # reap it: no zombie until the gateway stops
            if not self._closed:
                log.warning("the sfs directory helper for %s ended: small objects make their "
                            "own directories", self.root)
        self._ids.extend(data[i : i + ID_WIDTH].decode() for i in range(0, len(data), _RECORD))
        return len(data) // _RECORD

    def close(self) -> None:
        """Stop the helper and remove the directories made and not handed out."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            fd, self._fd = self._fd, None
            proc, self._proc = self._proc, None
        if fd is None:
            return
        if proc is not None:
            proc.terminate()  # it removes the directories it is making, then exits
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        while self._read(fd):  # what it made before it stopped
            pass
        os.close(fd)
        for key in self._ids:
            shutil.rmtree(object_dir(self.root, key), ignore_errors=True)
        self._ids.clear()


class _Stop(Exception):
    """SIGTERM in the helper."""


def _stop(signum: int, frame: object) -> None:
    raise _Stop


def object_dir(root: str, key: str) -> str:
    """`{root}/{last 3 chars}/{objectId}`: an object's directory in the seed-003 layout."""
    return f"{root}/{key[-3:]}/{key}"


def make_object_dirs(root: str, key: str, group: int = 0) -> None:
    """Make `{root}/{fanout}/{key}/chunks/{group}` with as few syscalls as possible."""
    obj_dir = object_dir(root, key)
    try:
        os.mkdir(obj_dir)
    except FileNotFoundError:  # the first object of its fan-out directory
        with contextlib.suppress(FileExistsError):
            os.mkdir(obj_dir[: -len(key) - 1])
        os.mkdir(obj_dir)
    os.mkdir(f"{obj_dir}/chunks")
    os.mkdir(f"{obj_dir}/chunks/{group}")


def _pool_level(fd: int) -> int:
    """How many ids wait in the pipe (FIONREAD works on either end of a Linux pipe)."""
    buf = array.array("i", [0])
    fcntl.ioctl(fd, termios.FIONREAD, buf)
    return buf[0] // _RECORD


def _cpu_times() -> tuple[float, float]:
    """(free, total) CPU time of the whole machine so far, in seconds: free is idle time,
    iowait (a CPU waiting for the disk is free for us) and this process's own time."""
    with open("/proc/stat", "rb") as f:
        fields = [int(x) for x in f.readline().split()[1:9]]
    tick = os.sysconf("SC_CLK_TCK")
    return (fields[3] + fields[4]) / tick + time.process_time(), sum(fields) / tick


def _make(root: str, key: str) -> bool:
    """Make `key`'s directories and empty chunk file; False if the id was taken."""
    try:
        make_object_dirs(root, key)
        # the empty chunk file too: the writer then opens it without making an inode
        os.close(os.open(f"{object_dir(root, key)}/chunks/0/{key}-0", _CHUNK_FLAGS, 0o644))
    except FileExistsError:  # an id made twice: never seen, but not this helper's end
        return False
    return True


class RefillPolicy:
    """When the helper makes ids and how many, from what it sees of the pipe: the
    bookkeeping of `_helper`, apart from its I/O.

    Below `low` ids: one at a time, whenever the helper runs at all (a gateway under steady
    load; SCHED_IDLE gives it the CPU only when nobody else wants it). Above: up to the
    target, which grows to the largest burst seen (ids taken with no gap of `quiet_s`) plus
    a quarter, at most `count`; in batches of at most QUIET_BATCH, synced before they are
    handed out, and only in a quiet time: no take for `quiet_s`, and others left at least
    QUIET_IDLE of the machine's CPU idle (when that is known)."""

    def __init__(self, count: int, low: int, quiet_s: float, now: float, level: int = 0) -> None:
        self.count = count
        self.low = max(1, min(count, low))
        self.quiet_s = quiet_s
        self.target = self.low
        self.burst = 0  # ids taken in the current burst
        self.last_take = now
        self.written = level  # what the pipe held after our last write

    def saw(self, level: int, now: float) -> None:
        """The pipe holds `level` ids at `now`: what went since our last write was taken."""
        if level < self.written:
            self.burst += self.written - level
            self.last_take = now
        elif self.burst and now - self.last_take >= self.quiet_s:  # the burst ended
            self.target = max(self.target, min(self.count, self.burst + self.burst // 4))
            self.burst = 0
        self.written = level

    def plan(self, free_share: float | None, now: float) -> tuple[int, bool]:
        """(ids to make now, whether to sync them before handing them out); (0, _): sleep
        `quiet_s`. `free_share`: the share of the machine's CPU others left idle since the
        last plan, None if unknown."""
        level = self.written
        if level < self.low:
            return 1, False
        quiet = now - self.last_take >= self.quiet_s
        if free_share is not None:
            quiet = quiet and free_share >= QUIET_IDLE
        if level >= self.target or not quiet:
            return 0, False
        return min(QUIET_BATCH, self.target - level), True

    def wrote(self, n: int) -> None:
        self.written += n


def _helper(root: str, fd: int, count: int, low: int, quiet_s: float = QUIET_S) -> None:
    """Keep prepared ids in the pipe `fd`, as `RefillPolicy` says, until SIGTERM or until
    the pipe's reader is gone; then remove the directories being made, which nobody will get.

    A helper that works during a burst of PUTs costs the burst more than its own CPU time
    (the gateway's syncfs must then also write out what it made), and one that works while
    other programs are busy would take from them what SCHED_IDLE does not cover (disk
    writes, kernel locks): hence the quiet times. What it makes in a quiet time it syncs
    before handing it out, so that the first PUT after one does not write out the refill."""
    try:  # run only when a CPU would otherwise idle
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (OSError, AttributeError):  # not Linux
        with contextlib.suppress(OSError):
            os.nice(19)
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the gateway, which stops us
    with contextlib.suppress(OSError):  # the pool never blocks on a pipe smaller than asked
        count = min(count, fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ) // _RECORD)
    try:
        cpu: tuple[float, float] | None = _cpu_times()
    except OSError:  # no /proc: quiet is only "no takes"
        cpu = None
    root_fd: int | None = None
    batch: list[str] = []
    making: str | None = None
    # the pipe's write end reports POLLERR once its reader is gone: the gateway process died
    # (kill -9 included) while the pool was full and nothing was being written to fail
    reader_gone = select.poll()
    reader_gone.register(fd, 0)
    try:
        root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        policy = RefillPolicy(count, low, quiet_s, time.monotonic(), _pool_level(fd))
        while True:
            now = time.monotonic()
            policy.saw(_pool_level(fd), now)
            free_share = None
            if cpu is not None and policy.written >= policy.low:
                then, cpu = cpu, _cpu_times()
                total = cpu[1] - then[1]
                free_share = (cpu[0] - then[0]) / total if total > 0 else 0.0
            n, sync = policy.plan(free_share, now)
            if n == 0:
                if reader_gone.poll(quiet_s * 1000):  # else `quiet_s` passed
                    break
                continue
            try:
                while len(batch) < n:
                    # named before it is made: a SIGTERM in the middle of making it must not
                    # leave directories that nobody will remove (close() reads only the pipe)
                    making = new_object_id()
                    if _make(root, making):
                        batch.append(making)
                    making = None
                if sync and syncgroup.available():
                    syncgroup.syncfs(root_fd)  # written out before anyone gets them: see the docstring
            except OSError as exc:
                if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                    raise
                # a full disk (or no inodes left) passes: try again later, keeping what is made
                if making is not None:
                    shutil.rmtree(object_dir(root, making), ignore_errors=True)
                    making = None
                if reader_gone.poll(_FULL_DISK_PAUSE_S * 1000):
                    break
                continue
            os.write(fd, "".join(f"{key}\n" for key in batch).encode())  # under PIPE_BUF: whole
            policy.wrote(len(batch))
            batch.clear()
    except (_Stop, OSError):  # stopped; EPIPE: the gateway died; the root is gone
        for key in [*batch, making] if making is not None else batch:
            shutil.rmtree(object_dir(root, key), ignore_errors=True)
    finally:
        if root_fd is not None:
            os.close(root_fd)
