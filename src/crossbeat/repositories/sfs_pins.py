"""Reads that a deletion cannot cut short: sfs objects pinned by the reads of them.

S3 lets a GET that has begun finish on the bytes it began with, even if the object is
overwritten or deleted meanwhile; overwriting an object in an unversioned bucket deletes
the old data at once. An sfs object's chunks are files read one after the other, so:

- A read of one chunk opens that chunk file before `read` returns. A file unlinked after
  that stays readable through the open descriptor: nothing more is needed.
- A read of several chunks *pins* the object: it opens the object's directory and holds a
  shared `flock(2)` on it until the read ends (exhausted, closed or dropped), and opens each
  chunk relative to that descriptor, which follows the directory wherever it is renamed.
- `delete` renames the object's directory aside, to `{fanout}/.cleanup-{objectId}` (new
  reads find nothing from then on), and removes it only if it can take an exclusive lock on
  it. If a read holds it, the last read to end removes it instead (`Pin.release`).
- A crash leaves such a directory behind; the cleanup pass removes it unless it is pinned.

flock locks belong to an open file description: they hold between threads as between
processes (every gateway worker), and vanish with their holder.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import os
import shutil

TRASH_PREFIX = ".cleanup-"  # never an objectId: ids cannot contain dots
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


def trash_path(obj_dir: str) -> str:
    """Where `delete` puts an object directory aside: beside it, under a name no id has."""
    parent, name = os.path.split(obj_dir)
    return f"{parent}/{TRASH_PREFIX}{name}"


def remove_unless_pinned(path: str) -> bool:
    """Remove the directory `path` unless a read pins it; True if it is gone."""
    try:
        fd = os.open(path, _DIR_FLAGS)
    except (FileNotFoundError, NotADirectoryError):
        return True
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # the last read to end removes it
        shutil.rmtree(path, ignore_errors=True)
        return True
    finally:
        os.close(fd)


class Pin:
    """A shared lock on the object directory `obj_dir`, held while a read of it runs.

    Raises FileNotFoundError if the directory is gone or being removed (the object was
    deleted before the read began). Chunks are opened with `open`, relative to the
    directory. `release` (also on garbage collection) ends the pin, and removes the
    directory if it was deleted meanwhile and no other read pins it.
    """

    __slots__ = ("_fd", "obj_dir")

    def __init__(self, obj_dir: str) -> None:
        self._fd = -1
        self.obj_dir = obj_dir
        fd = os.open(obj_dir, _DIR_FLAGS)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:  # a delete holds it exclusively: it is removing it
            os.close(fd)
            raise FileNotFoundError(obj_dir) from None
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def open(self, relative: str) -> io.FileIO:
        """The file at `relative` under the pinned directory, opened for reading."""
        fd = os.open(relative, os.O_RDONLY | os.O_CLOEXEC, dir_fd=self._fd)
        return io.FileIO(fd, "r")

    def release(self) -> None:
        fd, self._fd = self._fd, -1
        if fd < 0:
            return
        try:
            if not os.path.lexists(self.obj_dir):
                self._remove_deleted(fd)
        finally:
            os.close(fd)

    def _remove_deleted(self, fd: int) -> None:
        """The object was deleted during the read: remove its directory, unless another
        read still pins it (that one will). Converting the lock may drop ours first (flock
        does not convert atomically): of several reads ending at once, one succeeds."""
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return
        trash = trash_path(self.obj_dir)
        with contextlib.suppress(OSError):
            if os.path.samestat(os.stat(trash), os.fstat(fd)):
                shutil.rmtree(trash, ignore_errors=True)
            # else it was put aside under another name: the cleanup pass removes it

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.release()
