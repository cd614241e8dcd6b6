"""Space held back so that a full disk can still be cleaned up.

Freeing space (retention, DeleteRecords) first rewrites the placement file with the new
start offset, and only then deletes segments: on a disk with no byte left the rewrite fails,
so nothing could ever be freed. The store keeps a file of `RESERVE_BYTES` allocated; a
placement rewrite that fails for want of space releases it and tries once more, and the
file is made again once there is room.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

log = logging.getLogger(__name__)

RESERVE_BYTES = 4 * 1024 * 1024
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
T = TypeVar("T")


class SpaceReserve:
    """A file of `size` allocated bytes at `path`, given up when space is needed."""

    def __init__(self, path: Path, size: int = RESERVE_BYTES) -> None:
        self.path = path
        self.size = size

    def make(self) -> bool:
        """Allocate the reserve if it is missing and the disk has room for it and as much
        again (blocking); whether it is in place. Never raises."""
        if self.path.is_file():
            return True
        if self.path.exists() or self.path.is_symlink():  # not ours to remove: say so
            log.warning("%s is not a file: no space is held in reserve", self.path)
            return False
        try:
            fs = os.statvfs(self.path.parent)
            if fs.f_bavail * fs.f_frsize < 2 * self.size:
                return False
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                os.posix_fallocate(fd, 0, self.size)  # real blocks, not a sparse file
            finally:
                os.close(fd)
            return True
        except OSError as exc:
            with contextlib.suppress(OSError):
                self.path.unlink()
            log.debug("no space reserve at %s: %s", self.path, exc)
            return False

    def release(self) -> bool:
        """Give the reserved space back to the disk; whether there was any to give."""
        if not self.path.is_file():
            return False
        try:
            self.path.unlink()
        except OSError:
            return False
        log.warning("disk full: released the %d bytes reserved at %s to free space", self.size, self.path)
        return True

    def spend_on(self, write: Callable[[], T]) -> T:
        """`write()`; if it fails for want of space, once more with the reserve given back
        (`write` must leave things as they were when it fails, as placement writes do)."""
        try:
            return write()
        except OSError as exc:
            if exc.errno not in NO_SPACE or not self.release():
                raise
        return write()
