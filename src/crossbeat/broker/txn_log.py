"""The transaction log: the durable state of every transactional id, in `transactions.log`.

One JSON line per change, holding the id's whole state (producer id and epoch, timeout,
transaction state, partitions, groups, staged offsets); the last line of an id wins, and a
line `{"tid": ..., "removed": true}` removes the id (an expired one). Each
line is fsynced before `write` returns, so the coordinator acts on a change (writes
markers, answers the client) only once a restart would see it. A torn or corrupt tail
(a crash mid-write) is cut at open. The file is rewritten with one line per id (compacted)
at open when it holds superseded lines, and whenever it holds `compact_after` lines more
than ids (atomically: temporary file, fsync, rename, fsync of the directory). Compaction
is optional: one that fails (a full disk) is logged and leaves the file as it was, without
its temporary file, so neither a durable write nor opening the log fails for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from pathlib import Path
from typing import Any

from crossbeat.broker.line_log import (
    append_durably,
    framed,
    read_lines,
    replace_atomically,
    unframed,
)

log = logging.getLogger(__name__)

FILE_NAME = "transactions.log"


def _encode(doc: dict[str, Any]) -> bytes:
    """A checksummed line, as offsets.log's: damage to a line is found, not read as state."""
    return framed(json.dumps(doc, separators=(",", ":")).encode())


def _decode(line: bytes) -> dict[str, Any] | None:
    """A line's document, or None for a torn or corrupt one (a checksum that does not
    match, not JSON, not an object, no usable "tid"). Lines without a checksum, as earlier
    versions wrote, are read as plain JSON."""
    body = unframed(line, bare_json=True)
    if body is None:
        return None
    try:
        doc = json.loads(body)
        hash(doc["tid"])
    except (ValueError, KeyError, TypeError):
        return None
    return doc if isinstance(doc, dict) else None


class TxnLog:
    """Latest state document per transactional id, durable line by line."""

    def __init__(self, directory: Path, compact_after: int = 1000) -> None:
        self._dir = directory
        self._path = directory / FILE_NAME
        self._tmp = self._path.with_suffix(".tmp")  # replace_atomically's temporary file
        self._compact_after = compact_after
        self._docs: dict[str, dict[str, Any]] = {}
        self._lines = 0
        self._postponed = 0  # superseded lines a failed compaction left: wait for as many more
        self._fd = -1
        self._lock = asyncio.Lock()

    def load(self) -> dict[str, dict[str, Any]]:
        """Read the file (cutting a bad tail), compact it if it holds superseded lines,
        return the documents by transactional id. Blocking. Needs no free space: the cut is
        a truncation, and a compaction that fails is logged and skipped."""
        self._dir.mkdir(parents=True, exist_ok=True)
        # left by a rewrite that a crash interrupted
        self._tmp.unlink(missing_ok=True)
        data = self._path.read_bytes() if self._path.exists() else b""
        docs, pos, bad = read_lines(data, _decode)
        if bad:
            log.error("transaction log %s: skipped %d damaged lines (numbers %s): the states "
                      "they held are lost; every other line is kept", self._path, len(bad),
                      ", ".join(map(str, bad[:20])) + (" ..." if len(bad) > 20 else ""))
        for doc in docs:
            if doc.get("removed") is True:
                self._docs.pop(doc["tid"], None)
            else:
                self._docs[doc["tid"]] = doc
        self._fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        if pos < len(data):
            log.warning("transaction log %s: cutting %d bytes of a write cut short",
                        self._path, len(data) - pos)
            os.ftruncate(self._fd, pos)
            os.fsync(self._fd)
        self._lines = len(docs)
        if self._lines > len(self._docs):
            self._compact()
        return dict(self._docs)

    def _compact(self) -> None:
        """Rewrite the file with one line per id; a failure is logged, not raised (the
        file stays as it was, every line of it durable)."""
        try:
            self._rewrite()
        except OSError as exc:
            # not again at every append while the disk is full: after as many new lines
            self._postponed = self._lines - len(self._docs)
            log.warning("transaction log %s: compaction failed (log kept as is; tried again "
                        "after %d more lines): %s", self._path, self._compact_after, exc)

    def _rewrite(self) -> None:
        try:
            replace_atomically(self._path, b"".join(self._line(d) for d in self._docs.values()))
        except OSError:
            with contextlib.suppress(OSError):
                self._tmp.unlink(missing_ok=True)
            # renamed before the failure (the directory fsync): append to the new file
            if os.stat(self._path).st_ino != os.fstat(self._fd).st_ino:
                self._reopen()
            raise
        self._reopen()

    def _reopen(self) -> None:
        fd = os.open(self._path, os.O_WRONLY | os.O_APPEND)
        os.close(self._fd)
        self._fd = fd
        self._lines = len(self._docs)
        self._postponed = 0

    @staticmethod
    def _line(doc: dict[str, Any]) -> bytes:
        return _encode(doc)

    def _append(self, doc: dict[str, Any]) -> None:
        append_durably(self._fd, self._line(doc))
        if doc.get("removed") is True:
            self._docs.pop(doc["tid"], None)
        else:
            self._docs[doc["tid"]] = doc
        self._lines += 1
        if self._lines > len(self._docs) + self._compact_after + self._postponed:
            self._compact()

    async def write(self, doc: dict[str, Any]) -> None:
        """Make `doc` (which names its id as "tid") the durable state of its id. Raises
        OSError if the write fails."""
        async with self._lock:
            if self._fd < 0:
                raise OSError("transaction log is closed")
            await asyncio.to_thread(self._append, doc)

    async def remove(self, tid: str) -> None:
        """Remove `tid` durably (a removal line; compaction drops both). Raises OSError if
        the write fails."""
        await self.write({"tid": tid, "removed": True})

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
