"""Durable committed offsets of consumer groups (OffsetCommit / OffsetFetch).

Storage: one append-only file, `offsets.log`, one line per commit request::

    <crc32c of the JSON, 8 hex digits> <JSON>\\n
    JSON = {"g": group, "ts": commit ms, "o": [[topic, partition, offset, leader_epoch, metadata], …]}

An offset of null is a tombstone (topic deleted). A line with `"drop": true` (DeleteGroups)
removes every offset of its group that lines before it committed; it carries `"o": []`. A commit is acknowledged only after its line
is fsynced; concurrent commits share one fsync (group commit). On open the file is read
front to back: a line that is torn (no newline) or fails its CRC ends the log and is cut
off, so a crash loses only unacknowledged commits. When the log has grown past
`compact_after` lines it is rewritten as a snapshot (write, fsync, rename, fsync dir).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from crc32c import crc32c

log = logging.getLogger(__name__)

FILE_NAME = "offsets.log"


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    """What a group committed for one partition."""

    offset: int
    leader_epoch: int
    metadata: str | None
    commit_ms: int


Key = tuple[str, int]  # (topic, partition)
Entry = tuple[str, int, int | None, int, str | None]  # topic, partition, offset|None, epoch, meta


def _encode_line(doc: dict[str, Any]) -> bytes:
    body = orjson.dumps(doc)
    return b"%08x %s\n" % (crc32c(body), body)


def _decode_line(line: bytes) -> dict[str, Any] | None:
    if len(line) < 10 or line[8:9] != b" ":
        return None
    body = line[9:]
    try:
        if int(line[:8], 16) != crc32c(body):
            return None
        doc = orjson.loads(body)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


class OffsetStore:
    """Committed offsets per group, kept in memory and made durable in `offsets.log`."""

    def __init__(self, directory: Path, compact_after: int = 10000) -> None:
        self._dir = directory
        self._path = directory / FILE_NAME
        self._compact_after = compact_after
        self._groups: dict[str, dict[Key, CommittedOffset]] = {}
        self._lines = 0
        self._fd = -1
        self._queue: list[tuple[dict[str, Any], asyncio.Future[None]]] = []
        self._wakeup = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None
        self._closed = False

    @classmethod
    async def open(cls, directory: Path, compact_after: int = 10000) -> OffsetStore:
        store = cls(directory, compact_after)
        await asyncio.to_thread(store._load)
        store._writer = asyncio.create_task(store._write_loop(), name="offsets-writer")
        return store

    # -- reading ---------------------------------------------------------------------------
    def _load(self) -> None:
        self._dir.mkdir(parents=True, exist_ok=True)
        data = self._path.read_bytes() if self._path.exists() else b""
        pos = 0
        while pos < len(data):
            end = data.find(b"\n", pos)
            if end < 0:
                break
            doc = _decode_line(data[pos:end])
            if doc is None:
                break
            self._apply(doc)
            self._lines += 1
            pos = end + 1
        if pos < len(data):
            log.warning("offsets log %s: cutting %d bytes of torn or corrupt tail",
                        self._path, len(data) - pos)
        self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o644)
        os.ftruncate(self._fd, pos)
        os.lseek(self._fd, pos, os.SEEK_SET)
        os.fsync(self._fd)

    def _apply(self, doc: dict[str, Any]) -> None:
        group = doc["g"]
        if doc.get("drop"):
            self._groups.pop(group, None)
        offsets = self._groups.setdefault(group, {})
        ts = int(doc.get("ts", 0))
        for topic, partition, offset, epoch, metadata in doc["o"]:
            if offset is None:
                offsets.pop((topic, partition), None)
            else:
                offsets[(topic, partition)] = CommittedOffset(offset, epoch, metadata, ts)
        if not offsets:
            del self._groups[group]

    def get(self, group: str, topic: str, partition: int) -> CommittedOffset | None:
        return self._groups.get(group, {}).get((topic, partition))

    def group_offsets(self, group: str) -> dict[Key, CommittedOffset]:
        return dict(self._groups.get(group, {}))

    def groups(self) -> list[str]:
        return list(self._groups)

    # -- writing ---------------------------------------------------------------------------
    async def commit(self, group: str, entries: list[Entry]) -> None:
        """Make `entries` durable, then visible to `get`. Raises OSError if the write fails."""
        await self._submit({"g": group, "ts": int(time.time() * 1000),
                            "o": [list(e) for e in entries]})

    async def drop_group(self, group: str) -> None:
        """Durably remove every offset `group` committed, then answer (DeleteGroups).

        Commits queued before this call are written before it and so removed too; those
        queued after it survive. Raises OSError if the write fails (nothing is removed).
        """
        await self._submit({"g": group, "ts": int(time.time() * 1000), "o": [], "drop": True})

    async def _submit(self, doc: dict[str, Any]) -> None:
        if self._closed:
            raise RuntimeError("offset store is closed")
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.append((doc, done))
        self._wakeup.set()
        await done

    def forget_topic(self, topic: str) -> list[tuple[str, list[Entry]]]:
        """Tombstones for every group's offsets of `topic` (to pass to `commit`)."""
        out = []
        for group, offsets in self._groups.items():
            entries: list[Entry] = [(t, p, None, -1, None) for (t, p) in offsets if t == topic]
            if entries:
                out.append((group, entries))
        return out

    async def _write_loop(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            batch, self._queue = self._queue, []
            if not batch:
                if self._closed:
                    return
                continue
            data = b"".join(_encode_line(doc) for doc, _ in batch)
            try:
                await asyncio.to_thread(self._write, data)
            except OSError as exc:
                log.error("offsets log write failed: %s", exc)
                for _, fut in batch:
                    if not fut.done():
                        fut.set_exception(exc)
                continue
            for doc, fut in batch:
                self._apply(doc)
                self._lines += 1
                if not fut.done():
                    fut.set_result(None)
            if self._lines > self._compact_after:
                try:
                    await asyncio.to_thread(self._compact, self._snapshot())
                except OSError as exc:
                    log.error("offsets log compaction failed (log kept as is): %s", exc)

    def _write(self, data: bytes) -> None:
        _write_all(self._fd, data)
        os.fsync(self._fd)

    def _snapshot(self) -> bytes:
        lines = []
        for group, offsets in self._groups.items():
            entries = [[t, p, c.offset, c.leader_epoch, c.metadata] for (t, p), c in offsets.items()]
            ts = max((c.commit_ms for c in offsets.values()), default=0)
            lines.append(_encode_line({"g": group, "ts": ts, "o": entries}))
        return b"".join(lines)

    def _compact(self, snapshot: bytes) -> None:
        tmp = self._path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            _write_all(fd, snapshot)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self._path)
        dfd = os.open(self._dir, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
        new_fd = os.open(self._path, os.O_RDWR)
        os.lseek(new_fd, 0, os.SEEK_END)
        old, self._fd = self._fd, new_fd
        os.close(old)
        self._lines = snapshot.count(b"\n")

    async def close(self) -> None:
        """Finish pending commits and close the file."""
        self._closed = True
        self._wakeup.set()
        if self._writer is not None:
            await self._writer
            self._writer = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
