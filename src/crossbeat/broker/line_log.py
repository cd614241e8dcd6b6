"""What the broker's append-only state files share (`offsets.log`, `transactions.log`):
one document per line, a torn tail cut and damaged lines skipped at open, and compaction by
an atomic rewrite. Each file keeps its own line format (a `decode` function) and its own meaning.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from crc32c import crc32c

from crossbeat.stream.file_replace import replace_file

Decode = Callable[[bytes], "dict[str, Any] | None"]


def framed(body: bytes) -> bytes:
    """`body` as a line: `crc32c-hex body\n`, so that damage to it is found, not read."""
    return b"%08x %s\n" % (crc32c(body), body)


def unframed(line: bytes, *, bare_json: bool = False) -> bytes | None:
    """The body of a `framed` line (without its newline), or None if its checksum does not
    match. With `bare_json`, a line that is a JSON object without a checksum (as earlier
    versions wrote some files) is taken as it is."""
    if bare_json and line[:1] == b"{":
        return line
    if len(line) < 10 or line[8:9] != b" ":
        return None
    body = line[9:]
    try:
        return body if int(line[:8], 16) == crc32c(body) else None
    except ValueError:
        return None


def read_lines(data: bytes, decode: Decode) -> tuple[list[dict[str, Any]], int, list[int]]:
    """The documents of `data`'s lines, in order; the end of its last complete line, where
    the file must be cut (bytes after it are a write cut short); and the numbers (from 1) of
    complete lines `decode` refused (None), which are skipped: lines are framed by their
    newlines, so one damaged line (bit rot, a bad sector) costs that line alone, never the
    acknowledged lines after it."""
    docs: list[dict[str, Any]] = []
    bad: list[int] = []
    pos = 0
    number = 0
    while pos < len(data):
        end = data.find(b"\n", pos)
        if end < 0:
            break
        number += 1
        doc = decode(data[pos:end])
        if doc is None:
            bad.append(number)
        else:
            docs.append(doc)
        pos = end + 1
    return docs, pos, bad


def write_all(fd: int, data: bytes) -> None:
    """os.write until all of `data` is written (a write may take only part of it)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def append_durably(fd: int, data: bytes) -> None:
    """Append `data` at the end of the file `fd` and fsync it, all or nothing: if a write or
    the fsync fails (a full disk), the file is cut back to where it ended and the error
    re-raised. Otherwise a line torn part-way would sit before the next appended line, and
    the next open would cut the file there, taking later acknowledged lines with it."""
    end = os.lseek(fd, 0, os.SEEK_END)
    try:
        write_all(fd, data)
        os.fsync(fd)
    except OSError:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, end)
            os.lseek(fd, end, os.SEEK_SET)  # without O_APPEND the next write goes here
        raise


def replace_atomically(path: Path, data: bytes) -> None:
    """Make `data` the content of `path` durably and all at once: written to a temporary
    file (`path` with its suffix `.tmp`), fsynced, renamed over `path`, then the directory
    fsynced, so that a crash leaves the old file or the new one."""
    replace_file(path, data, durable=True, tmp=path.with_suffix(".tmp"))
