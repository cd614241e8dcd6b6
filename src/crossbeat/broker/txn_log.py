"""The transaction log: the durable state of every transactional id, in `transactions.log`.

One JSON line per change, holding the id's whole state (producer id and epoch, timeout,
transaction state, partitions, groups, staged offsets); the last line of an id wins. Each
line is fsynced before `write` returns, so the coordinator acts on a change (writes
markers, answers the client) only once a restart would see it. A torn or corrupt tail
(a crash mid-write) is cut at open. The file is rewritten with one line per id at open and
whenever it holds `compact_after` lines more than ids (atomically: temporary file, fsync,
rename, fsync of the directory).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

FILE_NAME = "transactions.log"


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class TxnLog:
    """Latest state document per transactional id, durable line by line."""

    def __init__(self, directory: Path, compact_after: int = 1000) -> None:
        self._dir = directory
        self._path = directory / FILE_NAME
        self._compact_after = compact_after
        self._docs: dict[str, dict[str, Any]] = {}
        self._lines = 0
        self._fd = -1
        self._lock = asyncio.Lock()

    def load(self) -> dict[str, dict[str, Any]]:
        """Read the file (cutting a bad tail), rewrite it compacted, return the documents
        by transactional id. Blocking."""
        self._dir.mkdir(parents=True, exist_ok=True)
        data = self._path.read_bytes() if self._path.exists() else b""
        pos = 0
        while pos < len(data):
            end = data.find(b"\n", pos)
            if end < 0:
                break
            try:
                doc = json.loads(data[pos:end])
                self._docs[doc["tid"]] = doc
            except (ValueError, KeyError, TypeError):
                break
            pos = end + 1
        if pos < len(data):
            log.warning("transaction log %s: cutting %d bytes of torn or corrupt tail",
                        self._path, len(data) - pos)
        self._rewrite()
        return dict(self._docs)

    def _rewrite(self) -> None:
        tmp = self._path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, b"".join(self._line(d) for d in self._docs.values()))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self._path)
        _fsync_dir(self._dir)
        if self._fd >= 0:
            os.close(self._fd)
        self._fd = os.open(self._path, os.O_WRONLY | os.O_APPEND)
        self._lines = len(self._docs)

    @staticmethod
    def _line(doc: dict[str, Any]) -> bytes:
        return json.dumps(doc, separators=(",", ":")).encode() + b"\n"

    def _append(self, doc: dict[str, Any]) -> None:
        line = self._line(doc)
        view = memoryview(line)
        while view:
            view = view[os.write(self._fd, view):]
        os.fsync(self._fd)
        self._docs[doc["tid"]] = doc
        self._lines += 1
        if self._lines > len(self._docs) + self._compact_after:
            self._rewrite()

    async def write(self, doc: dict[str, Any]) -> None:
        """Make `doc` (which names its id as "tid") the durable state of its id. Raises
        OSError if the write fails."""
        async with self._lock:
            if self._fd < 0:
                raise OSError("transaction log is closed")
            await asyncio.to_thread(self._append, doc)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
