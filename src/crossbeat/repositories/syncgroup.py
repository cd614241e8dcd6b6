"""Group durability for many small files: one `syncfs` covers every writer waiting on it.

A small object in the seed-003 layout costs several fsyncs (chunk file, three directories,
manifest). When many such objects are written at once, one `syncfs(2)` of the filesystem
makes all of them durable together: each writer calls `sync()` after its writes and returns
only once a syncfs that *started after* those writes has completed (the classic group commit:
the first waiter runs the sync, the rest ride along or wait for the next round).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
from pathlib import Path

_libc_name = ctypes.util.find_library("c")
_libc = ctypes.CDLL(_libc_name, use_errno=True) if _libc_name else None
_syncfs = getattr(_libc, "syncfs", None) if _libc is not None else None


def available() -> bool:
    """Whether this platform has syncfs(2) (Linux)."""
    return _syncfs is not None


class SyncGroup:
    """Shares `syncfs` calls on the filesystem holding `path` among concurrent writers."""

    def __init__(self, path: str | Path) -> None:
        if _syncfs is None:
            raise OSError("syncfs(2) is not available on this platform")
        self._fd = os.open(str(path), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self._cond = threading.Condition()
        self._started = 0  # syncs begun
        self._done = 0  # syncs finished
        self._running = False
        self.rounds = 0

    def ticket(self) -> int:
        """The round that will cover everything written before this call: pass it to
        `sync` later (from any thread) to wait for exactly that much."""
        with self._cond:
            return self._started + 1  # the round running now may have begun before our writes

    def sync(self, ticket: int | None = None) -> None:
        """Return once everything written before the call (or before `ticket()` returned
        `ticket`) is durable. A caller whose ticket a finished round already covers returns
        at once: one syncfs settles a whole batch of objects staged before it began."""
        with self._cond:
            target = self._started + 1 if ticket is None else ticket
            while self._done < target:
                if self._running:
                    self._cond.wait()
                    continue
                self._running = True
                self._started += 1
                mine = self._started
                self._cond.release()
                try:
                    rc = _syncfs(self._fd)  # type: ignore[misc]  # ctypes releases the GIL
                    err = ctypes.get_errno() if rc != 0 else 0
                finally:
                    self._cond.acquire()
                    self._running = False
                    self._done = mine
                    self.rounds += 1
                    self._cond.notify_all()
                if err:
                    raise OSError(err, os.strerror(err))

    def close(self) -> None:
        os.close(self._fd)
