"""Producer state snapshots: the files that let a partition's idempotent producers outlive a
restart (Kafka's `{offset}.snapshot` files; here one file per partition, the latest).

A snapshot holds what `ProducerStates` knew of one partition's producers as of an offset of
its log: every batch below that offset is accounted for in it, none at or above it. The
state after a restart is therefore the snapshot plus the batch headers from its offset to
the log end. A snapshot also names the CRC of the batch that ends right below its offset
(when that batch is still stored), so that one which no longer describes the log — the log
cut short by recovery and written again, or a partition made anew under the same name — is
recognised and not trusted.

File: `<directory>/<stream name>.snapshot` (a long name is shortened, with a hash), one
checksummed JSON line (`line_log.framed`) naming its stream. It is replaced atomically and
durably (temporary file, fsync, rename, fsync of the directory); `remove` (a deleted topic)
also stops any write under way from putting the file back.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crossbeat.broker.line_log import framed, unframed, write_all
from crossbeat.stream.file_replace import fsync_dir

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
SUFFIX = ".snapshot"
_MAX_PLAIN_NAME = 200  # file names stay under the usual 255-byte limit, with the suffix

# (first sequence, last sequence, base offset) of one batch
BatchDoc = tuple[int, int, int]


@dataclass(frozen=True, slots=True)
class ProducerDoc:
    """One producer as a snapshot holds it."""

    producer_id: int
    epoch: int
    last_ms: int  # when it last wrote here, by the broker's clock (expiry counts from it)
    last_timestamp: int  # its last batch's max timestamp, or its marker's time
    batches: tuple[BatchDoc, ...]  # its last (at most 5) batches, oldest first


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A partition's producers as of `offset` of its log."""

    stream: str
    offset: int
    crc: int  # of the batch ending at offset - 1; -1 when that batch was not stored
    taken_ms: int
    producers: tuple[ProducerDoc, ...]


class SnapshotError(Exception):
    """A snapshot file exists but cannot be used (damaged, or not this stream's)."""


def file_name(stream: str) -> str:
    """The file of `stream`'s snapshot: its name (stream names are made of
    [a-zA-Z0-9._-]), shortened with a hash when too long for a file name."""
    if len(stream) <= _MAX_PLAIN_NAME:
        return stream + SUFFIX
    digest = hashlib.sha256(stream.encode()).hexdigest()[:32]
    return f"{stream[:_MAX_PLAIN_NAME - 33]}~{digest}{SUFFIX}"


def encode(snapshot: Snapshot) -> bytes:
    doc = {
        "v": FORMAT_VERSION, "stream": snapshot.stream, "offset": snapshot.offset,
        "crc": snapshot.crc, "taken": snapshot.taken_ms,
        "producers": [[p.producer_id, p.epoch, p.last_ms, p.last_timestamp,
                       [list(b) for b in p.batches]] for p in snapshot.producers],
    }
    return framed(json.dumps(doc, separators=(",", ":")).encode())


def decode(data: bytes, stream: str) -> Snapshot:
    """The snapshot in `data`, which must be `stream`'s; raises SnapshotError."""
    body = unframed(data.rstrip(b"\n"))
    if body is None:
        raise SnapshotError("checksum mismatch or truncated")
    try:
        doc: Any = json.loads(body)
        if doc["v"] != FORMAT_VERSION:
            raise SnapshotError(f"unknown format version {doc['v']!r}")
        if doc["stream"] != stream:
            raise SnapshotError(f"it is the snapshot of {doc['stream']!r}")
        producers = tuple(
            ProducerDoc(int(pid), int(epoch), int(last_ms), int(last_ts),
                        tuple((int(f), int(la), int(o)) for f, la, o in batches))
            for pid, epoch, last_ms, last_ts, batches in doc["producers"]
        )
        snapshot = Snapshot(stream, int(doc["offset"]), int(doc["crc"]), int(doc["taken"]),
                            producers)
    except SnapshotError:
        raise
    except (ValueError, KeyError, TypeError) as exc:
        raise SnapshotError(f"unreadable: {exc!r}") from exc
    if snapshot.offset < 0:
        raise SnapshotError(f"negative offset {snapshot.offset}")
    return snapshot


class SnapshotFiles:
    """The snapshot files of every partition, in one directory."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        # a write renames its file into place only if no `remove` of that stream came
        # since the write's state was taken: the rename and the removal hold this lock
        self._lock = threading.Lock()
        self._removals: dict[str, int] = {}

    def path(self, stream: str) -> Path:
        return self.directory / file_name(stream)

    def generation(self, stream: str) -> int:
        """Pass to `write`: it then writes only if `stream` was not removed since."""
        return self._removals.get(stream, 0)

    def read(self, stream: str) -> Snapshot | None:
        """`stream`'s snapshot; None if it has none; SnapshotError if it is unusable."""
        try:
            data = self.path(stream).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise SnapshotError(f"unreadable: {exc}") from exc
        return decode(data, stream)

    def write(self, snapshot: Snapshot, generation: int) -> bool:
        """Make `snapshot` its stream's, durably, unless the stream was removed since
        `generation` was taken (returns False). Blocking; raises OSError (a full disk),
        leaving the previous snapshot and no temporary file."""
        if not self.directory.is_dir():
            self.directory.mkdir(parents=True, exist_ok=True)
            fsync_dir(self.directory.parent)
        path = self.path(snapshot.stream)
        tmp = path.with_name(path.name + ".tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                write_all(fd, encode(snapshot))
                os.fsync(fd)
            finally:
                os.close(fd)
            with self._lock:
                if self._removals.get(snapshot.stream, 0) != generation:
                    tmp.unlink(missing_ok=True)
                    return False
                os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
            raise
        fsync_dir(self.directory)
        return True

    def remove(self, stream: str) -> None:
        """Delete `stream`'s snapshot (its topic was deleted), and keep a write under way
        from bringing it back. A removal a crash undoes is redone by `prune`."""
        with self._lock:
            self._removals[stream] = self._removals.get(stream, 0) + 1
            try:
                self.path(stream).unlink(missing_ok=True)
            except OSError as exc:
                log.warning("cannot remove the producer state snapshot of %s: %s", stream, exc)

    def prune(self, streams: set[str]) -> int:
        """Delete the snapshots of streams not in `streams` (topics deleted while a crash
        kept their snapshot from going) and leftover temporary files; returns how many
        files went."""
        try:
            entries = list(self.directory.iterdir())
        except FileNotFoundError:
            return 0
        except OSError as exc:  # a later write reports it if it lasts
            log.warning("cannot list the producer state snapshots: %s", exc)
            return 0
        keep = {file_name(name) for name in streams}
        removed = 0
        for entry in entries:
            if entry.name in keep:
                continue
            if entry.name.endswith(SUFFIX) or entry.name.endswith(SUFFIX + ".tmp"):
                with contextlib.suppress(OSError):
                    entry.unlink()
                    removed += 1
        return removed
