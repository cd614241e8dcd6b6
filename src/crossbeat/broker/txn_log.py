"""The transaction log: the durable state of every transactional id, in `transactions.log`.

One JSON line per change, holding the id's whole state (producer id and epoch, timeout,
transaction state, partitions, groups, staged offsets); the last line of an id wins, and a
line `{"tid": ..., "removed": true}` removes the id (an expired one). Each
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

from crossbeat.broker.line_log import append_durably, read_lines, replace_atomically

log = logging.getLogger(__name__)

FILE_NAME = "transactions.log"


def _decode(line: bytes) -> dict[str, Any] | None:
    """A line's document, or None for a torn or corrupt one (not JSON, not an object, no
    usable "tid")."""
    try:
        doc = json.loads(line)
        hash(doc["tid"])
    except (ValueError, KeyError, TypeError):
        return None
    return doc if isinstance(doc, dict) else None


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
        docs, pos = read_lines(data, _decode)
        for doc in docs:
            if doc.get("removed") is True:
                self._docs.pop(doc["tid"], None)
            else:
                self._docs[doc["tid"]] = doc
        if pos < len(data):
            log.warning("transaction log %s: cutting %d bytes of torn or corrupt tail",
                        self._path, len(data) - pos)
        self._rewrite()
        return dict(self._docs)

    def _rewrite(self) -> None:
        replace_atomically(self._path, b"".join(self._line(d) for d in self._docs.values()))
        if self._fd >= 0:
            os.close(self._fd)
        self._fd = os.open(self._path, os.O_WRONLY | os.O_APPEND)
        self._lines = len(self._docs)

    @staticmethod
    def _line(doc: dict[str, Any]) -> bytes:
        return json.dumps(doc, separators=(",", ":")).encode() + b"\n"

    def _append(self, doc: dict[str, Any]) -> None:
        append_durably(self._fd, self._line(doc))
        if doc.get("removed") is True:
            self._docs.pop(doc["tid"], None)
        else:
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

    async def remove(self, tid: str) -> None:
        """Remove `tid` durably (a removal line; compaction drops both). Raises OSError if
        the write fails."""
        await self.write({"tid": tid, "removed": True})

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
