"""Group durability for many small files: one `syncfs` covers every writer waiting on it.

A small object in the seed-003 layout costs several fsyncs (chunk file, three directories,
manifest). When many such objects are written at once, one `syncfs(2)` of the filesystem
makes all of them durable together: each writer calls `sync()` after its writes and returns
only once a syncfs that *started after* those writes has completed (the classic group commit:
the first waiter runs the sync, the rest ride along or wait for the next round).

The group spans processes: syncfs covers the whole filesystem, so a round run by one gateway
worker also settles what the others wrote before it began. Rounds are therefore dated on the
machine-wide monotonic clock, and the start of the latest finished round is kept in a small
shared file on tmpfs (`/dev/shm`, so it starts empty after a reboot, when the clock starts
again), one per filesystem and user. A `flock` on that file lets one process at a time run a
round; a process that waited for it first checks whether the round it waited on covers it.
Without `/dev/shm` the group is this process's alone.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import mmap
import os
import struct
import threading
import time
from pathlib import Path

# libc through the running program's symbols: no find_library, which runs ldconfig (the
# directory helper of sfs_prepared imports this module and starts in milliseconds)
try:
    _syncfs = getattr(ctypes.CDLL(None, use_errno=True), "syncfs", None)
except (OSError, TypeError):  # a platform without a process-wide symbol table
    _syncfs = None
SHARED_DIR = "/dev/shm"
# The start of the latest finished round, twice: a reader that sees two different values
# caught a writer midway and takes it as "no round known" (a needless sync, never a missed one).
_STATE = struct.Struct("<QQ")


def available() -> bool:
    """Whether this platform has syncfs(2) (Linux)."""
    return _syncfs is not None


def syncfs(fd: int) -> int:
    """syncfs(2) of the filesystem holding `fd`: 0, or the errno it failed with (ctypes
    releases the GIL meanwhile). Only where `available()`."""
    if _syncfs(fd) != 0:  # type: ignore[misc]
        return ctypes.get_errno()
    return 0


class SyncGroup:
    """Shares `syncfs` calls on the filesystem holding `path` among concurrent writers, in
    this process and in every other one using a SyncGroup on the same filesystem."""

    def __init__(self, path: str | Path, shared_dir: str | None = SHARED_DIR) -> None:
        if _syncfs is None:
            raise OSError("syncfs(2) is not available on this platform")
        self._fd = os.open(str(path), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self._cond = threading.Condition()
        self._running = False  # a thread of this process runs (or waits to run) a round
        self._covered = 0  # start of the latest finished round this process knows of
        self._lock_fd: int | None = None
        self._state: mmap.mmap | bytearray = bytearray(_STATE.size)
        if shared_dir is not None:
            with contextlib.suppress(OSError):
                self._open_shared(shared_dir)
        self.rounds = 0  # syncfs calls made by this instance

    def _open_shared(self, shared_dir: str) -> None:
        name = f"crossbeat-syncfs-{os.getuid()}-{os.fstat(self._fd).st_dev:x}"
        fd = os.open(f"{shared_dir}/{name}", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            if os.fstat(fd).st_size < _STATE.size:
                os.ftruncate(fd, _STATE.size)  # zeros: no round known
            self._state = mmap.mmap(fd, _STATE.size)
        except BaseException:
            os.close(fd)
            raise
        self._lock_fd = fd

    def ticket(self) -> int:
        """A ticket for everything written before this call: pass it to `sync` later (from
        any thread) to wait for exactly that much."""
        return time.monotonic_ns()

    def _shared_covered(self) -> int:
        first, second = _STATE.unpack_from(self._state)
        return first if first == second else 0

    def sync(self, ticket: int | None = None) -> None:
        """Return once everything written before the call (or before `ticket()` returned
        `ticket`) is durable. A caller whose ticket a finished round already covers, run by
        this process or another, returns at once: one syncfs settles a whole batch of
        objects staged before it began."""
        target = time.monotonic_ns() if ticket is None else ticket
        with self._cond:
            while self._covered <= target:
                covered = self._shared_covered()
                if covered > target:
                    self._covered = max(self._covered, covered)
                    return
                if self._running:
                    self._cond.wait()
                    continue
                self._running = True
                self._cond.release()
                started, err = 0, 0
                try:
                    started, err = self._round(target)
                finally:
                    self._cond.acquire()
                    self._running = False
                    self._covered = max(self._covered, started)
                    self._cond.notify_all()
                if err:
                    raise OSError(err, os.strerror(err))

    def _round(self, target: int) -> tuple[int, int]:
        """Run a syncfs unless another process's round, finished while we waited for our
        turn, covers `target`; returns (start of the round that covers it, errno)."""
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX)  # blocks while another process syncs
        try:
            covered = self._shared_covered()
            if covered > target:
                return covered, 0
            started = time.monotonic_ns()
            err = syncfs(self._fd)
            self.rounds += 1
            if err:
                return 0, err
            if started > covered:
                _STATE.pack_into(self._state, 0, started, started)
            return started, 0
        finally:
            if self._lock_fd is not None:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def close(self) -> None:
        if isinstance(self._state, mmap.mmap):
            self._state.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        os.close(self._fd)
