"""Durable committed offsets of consumer groups (OffsetCommit / OffsetFetch), and when each
group last gained members or became Empty (for offset expiry, see offset_expiry.py).

Storage: one append-only file, `offsets.log`, one line per commit request::

    <crc32c of the JSON, 8 hex digits> <JSON>\\n
    JSON = {"g": group, "ts": commit ms, "o": [[topic, partition, offset, leader_epoch, metadata], …]}

An offset of null is a tombstone (topic deleted, or offset expired). A line with `"drop": true`
(DeleteGroups) removes every offset of its group that lines before it committed; it carries
`"o": []`. A line with `"members": true` / `false` and `"o": []` says the group gained
members / became Empty at its `ts` (the coordinator's transitions; a group never so noted
only ever had standalone commits, or its log predates these lines). A commit is
acknowledged only after its line is fsynced; concurrent commits share one fsync (group
commit). On open the file is read front to back: a line that is torn (no newline) or
fails its CRC ends the log and is cut off, so a crash loses only unacknowledged commits.
A line with `"stable": {...}` (and `"members": true`) keeps a group's last state, as Kafka's
group metadata records do: a classic group's when it last became Stable (the coordinator's
`on_stable`, `groups.state.stable_doc`: generation, members, assignments), a KIP-848
group's whenever it changed (`groups.consumer_group.group_doc`, `"kind": "consumer"`); an
Empty note or a drop forgets it. On open, those groups are handed back (`stable_groups`) for the coordinator to
restore: their members carry on. Any other group the log leaves with members (a log that
predates these lines) had them when the last broker stopped; they are
gone now, so on open it is noted Empty as of then (durably, so a second restart keeps that
time).
When the log has grown past `compact_after` lines it is rewritten as a snapshot (write,
fsync, rename, fsync dir) that keeps each offset's commit time and each group's last note.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from crossbeat.broker.line_log import (
    append_durably,
    framed,
    read_lines,
    replace_atomically,
    unframed,
)

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


@dataclass
class _Group:
    """What the log says of one group; kept while it has offsets or members."""

    offsets: dict[Key, CommittedOffset] = field(default_factory=dict)
    has_members: bool = False
    noted_ms: int | None = None  # when has_members was last noted; None: never
    stable: dict[str, Any] | None = None  # the last Stable state of a classic group


def _encode_line(doc: dict[str, Any]) -> bytes:
    return framed(orjson.dumps(doc))


def _decode_line(line: bytes) -> dict[str, Any] | None:
    body = unframed(line)
    if body is None:
        return None
    try:
        doc = orjson.loads(body)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def _now_ms() -> int:
    return int(time.time() * 1000)


def _members_line(group: str, has_members: bool, ts: int,
                  stable: dict[str, Any] | None = None) -> dict[str, Any]:
    line = {"g": group, "ts": ts, "o": [], "members": has_members}
    if stable is not None:
        line["stable"] = stable
    return line


class OffsetStore:
    """Committed offsets per group, kept in memory and made durable in `offsets.log`."""

    def __init__(self, directory: Path, compact_after: int = 10000) -> None:
        self._dir = directory
        self._path = directory / FILE_NAME
        self._compact_after = compact_after
        self._compact_at = compact_after  # line count that triggers the next compaction
        self._groups: dict[str, _Group] = {}
        self._lines = 0
        self._fd = -1
        self._queue: list[tuple[dict[str, Any], asyncio.Future[None] | None]] = []
        self._pending: Counter[str] = Counter()  # group -> lines queued or being written
        self._wakeup = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None
        self._closed = False

    @classmethod
    async def open(cls, directory: Path, compact_after: int = 10000) -> OffsetStore:
        store = cls(directory, compact_after)
        await asyncio.to_thread(store._load)
        store._writer = asyncio.create_task(store._write_loop(), name="offsets-writer")
        now = _now_ms()
        try:
            # their members left with the broker that stopped: Empty from now on
            await asyncio.gather(*(store._submit(_members_line(g, False, now))
                                   for g, r in store._groups.items()
                                   if r.has_members and r.stable is None))
        except BaseException:
            await store.close()
            raise
        return store

    # -- reading ---------------------------------------------------------------------------
    def _load(self) -> None:
        self._dir.mkdir(parents=True, exist_ok=True)
        data = self._path.read_bytes() if self._path.exists() else b""
        docs, pos, bad = read_lines(data, _decode_line)
        for doc in docs:
            self._apply(doc)
        self._lines += len(docs)
        if bad:
            log.error("offsets log %s: skipped %d damaged lines (numbers %s): the commits they "
                      "held are lost; every other line is kept", self._path, len(bad),
                      ", ".join(map(str, bad[:20])) + (" ..." if len(bad) > 20 else ""))
        if pos < len(data):
            log.warning("offsets log %s: cutting %d bytes of a write cut short",
                        self._path, len(data) - pos)
        self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o644)
        os.ftruncate(self._fd, pos)
        os.lseek(self._fd, pos, os.SEEK_SET)
        os.fsync(self._fd)

    def _apply(self, doc: dict[str, Any]) -> None:
        group = doc["g"]
        if doc.get("drop"):
            self._groups.pop(group, None)
        record = self._groups.setdefault(group, _Group())
        offsets = record.offsets
        ts = int(doc.get("ts", 0))
        for topic, partition, offset, epoch, metadata in doc["o"]:
            if offset is None:
                offsets.pop((topic, partition), None)
            else:
                offsets[(topic, partition)] = CommittedOffset(offset, epoch, metadata, ts)
        if "members" in doc:
            record.has_members = bool(doc["members"])
            record.noted_ms = ts
            stable = doc.get("stable")
            if isinstance(stable, dict):
                record.stable = stable
            elif not record.has_members:
                record.stable = None
        if not offsets and not record.has_members:
            del self._groups[group]

    def get(self, group: str, topic: str, partition: int) -> CommittedOffset | None:
        record = self._groups.get(group)
        return record.offsets.get((topic, partition)) if record else None

    def group_offsets(self, group: str) -> dict[Key, CommittedOffset]:
        record = self._groups.get(group)
        return dict(record.offsets) if record else {}

    def groups(self) -> list[str]:
        """Groups with committed offsets."""
        return [g for g, r in self._groups.items() if r.offsets]

    def has_members(self, group: str) -> bool:
        """Whether the last durable note of `group` is that it gained members."""
        record = self._groups.get(group)
        return record is not None and record.has_members

    def stable_groups(self) -> dict[str, dict[str, Any]]:
        """The classic groups whose last durable note is a Stable state (see `note_stable`),
        with that state: the coordinator restores them at start."""
        return {g: r.stable for g, r in self._groups.items() if r.has_members and r.stable is not None}

    def empty_since(self, group: str) -> int | None:
        """Wall-clock ms at which `group` last became Empty, as durably noted; None if it
        has members, or was never noted (only standalone commits, or an older log)."""
        record = self._groups.get(group)
        if record is None or record.has_members:
            return None
        return record.noted_ms

    def has_pending(self, group: str) -> bool:
        """Whether a line of `group` is queued or being written (not yet visible here)."""
        return self._pending[group] > 0

    # -- writing ---------------------------------------------------------------------------
    async def commit(self, group: str, entries: list[Entry]) -> None:
        """Make `entries` durable, then visible to `get`. Raises OSError if the write fails."""
        await self._submit({"g": group, "ts": _now_ms(), "o": [list(e) for e in entries]})

    def note_members(self, group: str, has_members: bool) -> None:
        """Note, durably but without waiting, that `group` gained members (True) or became
        Empty (False) now; the coordinator calls this on those transitions.

        Ordered with commits (a member's last commit is written before its group's Empty
        note). Nobody waits for the note: if its write fails, the error is logged and the
        previous note stands until the next transition; after close it is dropped.
        """
        if self._closed:
            log.debug("offset store closed: group %s note dropped", group)
            return
        self._enqueue(_members_line(group, has_members, _now_ms()), None)

    def note_stable(self, group: str, state: dict[str, Any]) -> None:
        """Note, durably but without waiting, that classic `group` became Stable as `state`
        describes (it has members); kept until an Empty note or a drop. As `note_members`:
        ordered with commits, nobody waits, a failed write is logged (the group's members
        would then join again after a restart, as before this was kept)."""
        if self._closed:
            log.debug("offset store closed: group %s stable state dropped", group)
            return
        self._enqueue(_members_line(group, True, _now_ms(), state), None)

    async def drop_group(self, group: str) -> None:
        """Durably remove every offset `group` committed, then answer (DeleteGroups).

        Commits queued before this call are written before it and so removed too; those
        queued after it survive. Raises OSError if the write fails (nothing is removed).
        """
        await self._submit({"g": group, "ts": _now_ms(), "o": [], "drop": True})

    async def _submit(self, doc: dict[str, Any]) -> None:
        if self._closed:
            raise RuntimeError("offset store is closed")
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._enqueue(doc, done)
        await done

    def _enqueue(self, doc: dict[str, Any], done: asyncio.Future[None] | None) -> None:
        self._queue.append((doc, done))
        self._pending[doc["g"]] += 1
        self._wakeup.set()

    def forget_topic(self, topic: str) -> list[tuple[str, list[Entry]]]:
        """Tombstones for every group's offsets of `topic` (to pass to `commit`)."""
        out = []
        for group, record in self._groups.items():
            entries: list[Entry] = [(t, p, None, -1, None) for (t, p) in record.offsets
                                    if t == topic]
            if entries:
                out.append((group, entries))
        return out

    async def _write_loop(self) -> None:
        while True:
            if not self._queue:
                # looked at before each wait: a close() that came while a batch was being
                # written set the event before that batch's loop cleared it
                if self._closed:
                    return
                await self._wakeup.wait()
                self._wakeup.clear()
                continue
            batch, self._queue = self._queue, []
            data = b"".join(_encode_line(doc) for doc, _ in batch)
            try:
                await asyncio.to_thread(self._write, data)
            except OSError as exc:
                log.error("offsets log write failed: %s", exc)
                for doc, fut in batch:
                    self._written(doc)
                    if fut is not None and not fut.done():
                        fut.set_exception(exc)
                continue
            for doc, fut in batch:
                self._apply(doc)
                self._lines += 1
                self._written(doc)
                if fut is not None and not fut.done():
                    fut.set_result(None)
            if self._lines > self._compact_at:
                try:
                    await asyncio.to_thread(self._compact, self._snapshot())
                    self._compact_at = self._compact_after
                except OSError as exc:
                    # not again at every commit while the disk is full: after as many lines
                    self._compact_at = self._lines + self._compact_after
                    log.error("offsets log compaction failed (log kept as is; tried again after "
                              "%d more lines): %s", self._compact_after, exc)

    def _written(self, doc: dict[str, Any]) -> None:
        group = doc["g"]
        self._pending[group] -= 1
        if self._pending[group] <= 0:
            del self._pending[group]

    def _write(self, data: bytes) -> None:
        append_durably(self._fd, data)

    def _snapshot(self) -> bytes:
        lines = []
        for group, record in self._groups.items():
            # one line per commit time: expiry counts from each offset's own commit
            by_ts: dict[int, list[list[Any]]] = {}
            for (t, p), c in record.offsets.items():
                by_ts.setdefault(c.commit_ms, []).append([t, p, c.offset, c.leader_epoch,
                                                          c.metadata])
            for ts, entries in by_ts.items():
                lines.append(_encode_line({"g": group, "ts": ts, "o": entries}))
            if record.noted_ms is not None:  # after the offsets: an Empty note of none drops
                lines.append(_encode_line(_members_line(group, record.has_members,
                                                        record.noted_ms, record.stable)))
        return b"".join(lines)

    def _compact(self, snapshot: bytes) -> None:
        replace_atomically(self._path, snapshot)
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
