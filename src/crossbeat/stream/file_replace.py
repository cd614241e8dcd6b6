"""Replacing a small file whole: a temporary file beside it, renamed over it.

Used for the stream store's placement and index files and the broker's state files. A
reader sees the old content or the new, never a mix. `durable` adds the fsyncs that make
the new content survive a power loss (the file before the rename, its directory after);
derived files checked on load (segment indexes) go without them, to keep rolls cheap.
"""

from __future__ import annotations

import os
from pathlib import Path


def replace_file(path: Path, data: bytes, *, durable: bool, tmp: Path | None = None) -> None:
    """Make `data` the content of `path` all at once, through `tmp` (default: `path` with
    `.tmp` appended). On any failure (a full disk part way) the temporary file is removed,
    so it holds no space, and `path` is as it was."""
    tmp = path.with_name(path.name + ".tmp") if tmp is None else tmp
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if durable:
        fsync_dir(path.parent)


def fsync_dir(directory: Path) -> None:
    """fsync `directory`, making the entries created, renamed or deleted in it durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
