"""A token beside the store that changes after every bucket change, for caches of buckets.

Gateway processes keep the buckets they read (owner, location, configurations) so that an
object request costs no bucket query. A bucket's owner and location are fixed for its life,
but its name is not: deleted, it may be created again by another user, elsewhere. A process
that went on answering from the old bucket let its former owner read and change the new
owner's objects. Every process sharing the store reads this token (8 bytes through a shared
mapping: well under a microsecond, no system call) and drops what it cached when it changed.

Contract: `bump()` is called after a bucket change commits (create, update, delete), by
whichever process made it; `current()` then returns a value no process saw before the
change. A reader that sees the old value may act on the old state: it raced the change. A
process that dies between a commit and its bump leaves the others unaware of that change
until the next bump; callers bound that with an age limit on what they cache.
"""

from __future__ import annotations

import mmap
import os
import threading
from pathlib import Path

_SIZE = 8


class BucketGeneration:
    """The token in file `path` (created if missing), shared by every process opening it."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            if os.fstat(fd).st_size < _SIZE:
                os.ftruncate(fd, _SIZE)
            self._map = mmap.mmap(fd, _SIZE, mmap.MAP_SHARED, mmap.PROT_READ)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        # bump and close exclude each other: a write to a closed descriptor's number could
        # land in whatever file reused it
        self._lock = threading.Lock()

    def current(self) -> bytes:
        try:
            return self._map[:_SIZE]
        except ValueError:  # closed: a value no cache was made under
            return b"closed"

    def bump(self) -> None:
        """A new random value: no counter to lose to a crash or to two processes bumping at
        once. Not synced: the token means nothing after a restart, when caches start empty.
        Does nothing once closed."""
        with self._lock:
            if self._fd >= 0:
                os.pwrite(self._fd, os.urandom(_SIZE), 0)

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                self._map.close()
                os.close(self._fd)
                self._fd = -1
