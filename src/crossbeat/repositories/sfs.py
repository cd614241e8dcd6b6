"""The seed-003 "simple filesystem repository" (sfs).

Layout under the configured root, exactly as the seed draws it::

    {root}/{last 3 chars of objectId}/{objectId}/manifest.json
    {root}/{last 3 chars of objectId}/{objectId}/chunks/{chunkId // 100}/{objectId}-{chunkId}

plus `{root}/repository.json`, which persists the SipHash key so digests stay verifiable
across restarts. The manifest (see `sfs_manifest`) is written last: chunk files are written
and fsynced, their directories fsynced, then the manifest goes to a temporary file that is
fsynced and renamed into place, and the object's directories are fsynced. A crash at any
point therefore leaves either a complete, durable object or a directory without a manifest,
which reads treat as absent and `cleanup` removes. Empty directories are normal (the seed).

Small objects (under one chunk) are written unsynced and made durable by one shared syncfs
(`syncgroup`); with `prepared_objects`, their directories come ready-made from a helper that
makes them ahead, at idle CPU priority (`sfs_prepared`).
"""

from __future__ import annotations

import contextlib
import errno
import io
import logging
import os
import secrets
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
from siphash24 import siphash24

from crossbeat.repositories import syncgroup
from crossbeat.repositories.base import (
    ObjectStat,
    ObjectWriter,
    Repository,
    orphans_plausible,
    refuse_orphans,
)
from crossbeat.repositories.errors import CorruptData, NoSuchData, RepositoryError
from crossbeat.repositories.location import Location
from crossbeat.repositories.object_ids import check_object_id, is_object_id, new_object_id
from crossbeat.repositories.sfs_manifest import Manifest, ManifestInvalid
from crossbeat.repositories.sfs_pins import TRASH_PREFIX, Pin, remove_unless_pinned, trash_path
from crossbeat.repositories.sfs_prepared import PreparedDirs, make_object_dirs, object_dir
from crossbeat.repositories.syncgroup import SyncGroup

log = logging.getLogger(__name__)

DEFAULT_CHUNK_SIZE = 4 * 1024 * 1024
CHUNKS_PER_DIR = 100  # the seed: chunk files are grouped in directories of chunkId // 100
MANIFEST = "manifest.json"
REPOSITORY_INFO = "repository.json"

_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
_PREPARED_FLAGS = os.O_WRONLY | os.O_CLOEXEC
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


def _fsync_dir(path: str) -> None:
    fd = os.open(path, _DIR_FLAGS)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_file(
    path: str, data: bytes | bytearray | memoryview, sync: bool = True, flags: int = _WRITE_FLAGS
) -> None:
    """Write `data` to a new file at `path` and (unless `sync` is False) fsync it."""
    fd = os.open(path, flags, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def _read_file(path: str) -> bytes:
    """The whole (small) file: raw syscalls, no buffered file object."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        parts = []
        while True:
            part = os.read(fd, 65536)
            if not part:
                break
            parts.append(part)
    finally:
        os.close(fd)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _read_exact_or_more(f: io.FileIO, length: int) -> bytes:
    """Read up to `length + 1` bytes: enough to tell a too-long file from a right one."""
    parts = []
    wanted = length + 1
    while wanted > 0:
        part = f.read(wanted)
        if not part:
            break
        parts.append(part)
        wanted -= len(part)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _chunk_name(data_key: str, index: int) -> str:
    """A chunk file's path under its object directory (the seed: `chunkId // 100` groups)."""
    return f"chunks/{index // CHUNKS_PER_DIR}/{data_key}-{index}"


def _load_siphash_key(root: Path, configured: bytes | None) -> bytes:
    """Return the repository's SipHash key, persisting it on first use.

    The key lives in `{root}/repository.json`. A configured key that differs from the
    persisted one is refused: every stored digest would stop verifying.
    """
    info_path = root / REPOSITORY_INFO
    for _ in range(2):
        try:
            info = orjson.loads(info_path.read_bytes())
            persisted = bytes.fromhex(info["siphashKey"])
            if len(persisted) != 16:
                raise ValueError("siphashKey must be 16 bytes")
        except FileNotFoundError:
            pass
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise RepositoryError(f"{info_path} is unreadable: {exc}") from exc
        else:
            if configured is not None and configured != persisted:
                raise RepositoryError(
                    f"configured siphash key differs from the one persisted in {info_path}; "
                    "existing chunk digests would no longer verify"
                )
            return persisted
        if configured is None and _holds_objects(root):
            # a fresh key would make every stored digest fail to verify (and the objects
            # written next unreadable once the old file came back)
            raise RepositoryError(
                f"{info_path} is missing but {root} holds objects: their digests need the key "
                "it held. Restore it (or configure the repository's siphash_key)"
            )
        key = configured if configured is not None else secrets.token_bytes(16)
        tmp = root / f".{REPOSITORY_INFO}.{secrets.token_hex(8)}"
        try:
            _write_file(str(tmp), orjson.dumps({"type": "sfs", "siphashKey": key.hex()}))
            # link() fails if another process won the race; then we read its key instead.
            os.link(tmp, info_path)
            _fsync_dir(str(root))
        except FileExistsError:
            pass
        finally:
            tmp.unlink(missing_ok=True)  # also when the write failed (a full disk)
    raise RepositoryError(f"cannot establish the siphash key in {info_path}")


def _holds_objects(root: Path) -> bool:
    """Whether `root` has an object's manifest (a complete object) under a fan-out."""
    return any(os.path.exists(f"{path}/{MANIFEST}") for _, path in _object_dirs(str(root), str(root)))


def _object_dirs(root: str, name: str) -> Iterator[tuple[str, str]]:
    """(objectId, object directory) for every object directory under `root`, complete or
    not; a fan-out that cannot be listed is skipped with a warning naming repository `name`."""
    try:
        fanouts = [e for e in os.scandir(root) if len(e.name) == 3 and e.is_dir()]
    except FileNotFoundError:
        return
    for fanout in fanouts:
        try:
            entries = list(os.scandir(fanout.path))
        except FileNotFoundError:
            continue
        except OSError as exc:  # unreadable: the others still count
            log.warning("repository %r: cannot list %s: %s", name, fanout.path, exc)
            continue
        for entry in entries:
            if (
                entry.name.endswith(fanout.name)
                and is_object_id(entry.name)
                and entry.is_dir(follow_symlinks=False)
            ):
                yield entry.name, entry.path


class SfsRepository(Repository):
    """Objects as chunk files plus a JSON manifest under `root` (seed 003).

    Thread-safe: any number of writers and readers may run at once.
    """

    pins_reads = True

    def __init__(
        self,
        name: str,
        root: str | Path,
        *,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        siphash_key: bytes | None = None,
        group_sync: bool = True,
        prepared_objects: int = 0,
    ) -> None:
        if chunk_size <= 0:
            raise RepositoryError(f"chunk size must be positive, got {chunk_size}")
        if siphash_key is not None and len(siphash_key) != 16:
            raise RepositoryError("the siphash key must be exactly 16 bytes")
        self.name = name
        self.root = Path(root).absolute()
        self.chunk_size = chunk_size
        self.root.mkdir(parents=True, exist_ok=True)
        self._root = str(self.root)
        self.siphash_key = _load_siphash_key(self.root, siphash_key)
        # Fan-out directories whose entry in the root is known durable (we fsynced the root
        # after they appeared). Another writer may have created one and died before its
        # commit, so a writer that finds one not listed here fsyncs the root once.
        self._durable_fanout: set[str] = set()
        # Single-chunk objects commit through one shared syncfs instead of ~6 fsyncs each
        # (see syncgroup.py); on platforms without syncfs every object fsyncs its files.
        self._sync_group = SyncGroup(self.root) if group_sync and syncgroup.available() else None
        # Directories for small objects made ahead by an idle-priority helper (see
        # sfs_prepared.py); only with the sync group, which is what makes them durable.
        self._prepared = (
            PreparedDirs(self._root, prepared_objects)
            if prepared_objects > 0 and self._sync_group is not None
            else None
        )

    # -- paths ---------------------------------------------------------------------------

    def object_dir(self, data_key: str) -> str:
        """`{root}/{last 3 chars}/{objectId}` (the key must already be checked)."""
        return object_dir(self._root, data_key)

    def chunk_path(self, data_key: str, index: int) -> str:
        return f"{self._root}/{data_key[-3:]}/{data_key}/{_chunk_name(data_key, index)}"

    def manifest_path(self, data_key: str) -> str:
        return f"{self._root}/{data_key[-3:]}/{data_key}/{MANIFEST}"

    def digest(self, data: bytes | bytearray | memoryview) -> str:
        return siphash24(data, key=self.siphash_key).hexdigest()

    # -- manifests -----------------------------------------------------------------------

    def _manifest(self, data_key: str) -> Manifest | None:
        """The committed manifest (locked or not), None if there is none."""
        found = self._manifest_and_bytes(data_key)
        return None if found is None else found[0]

    def _manifest_and_bytes(self, data_key: str) -> tuple[Manifest, bytes] | None:
        """The committed manifest (locked or not) and its bytes, None if there is none."""
        check_object_id(data_key)
        try:
            raw = _read_file(self.manifest_path(data_key))
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise RepositoryError(f"reading the manifest of {data_key!r}: {exc}") from exc
        try:
            manifest = Manifest.from_bytes(raw)
        except ManifestInvalid as exc:
            raise CorruptData(self.name, data_key, None, str(exc)) from exc
        if manifest.object_id != data_key:
            raise CorruptData(
                self.name, data_key, None, f"manifest belongs to {manifest.object_id!r}"
            )
        return manifest, raw

    def _visible_manifest(self, data_key: str) -> tuple[Manifest, bytes]:
        found = self._manifest_and_bytes(data_key)
        if found is None:
            raise NoSuchData(self.name, data_key)
        if found[0].locked:
            raise NoSuchData(self.name, data_key, "locked")
        return found

    def _replace_manifest(self, data_key: str, manifest: Manifest) -> None:
        """Atomically and durably replace the manifest (temp + fsync + rename + fsync dir)."""
        obj_dir = self.object_dir(data_key)
        tmp = f"{obj_dir}/.{MANIFEST}.{secrets.token_hex(6)}"
        try:
            _write_file(tmp, manifest.to_bytes())
            os.rename(tmp, f"{obj_dir}/{MANIFEST}")
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)  # also when the write failed (a full disk)
            raise
        _fsync_dir(obj_dir)

    # -- the Repository contract ---------------------------------------------------------

    def writer(self, data_key: str | None = None, *, locked: bool = False) -> SfsWriter:
        if data_key is None:
            return SfsWriter(self, new_object_id(), locked, fresh=True)
        if self._manifest(data_key) is not None:
            raise RepositoryError(f"object {data_key!r} already exists in repository {self.name!r}")
        # Leftovers of an earlier, interrupted copy of this key (seed 003: "remove whatever
        # exists already").
        shutil.rmtree(self.object_dir(data_key), ignore_errors=True)
        return SfsWriter(self, data_key, locked)

    def small_writer(self, data: bytes) -> SfsWriter | None:
        """A new object of less than one chunk, held in memory: its `stage` writes the
        files unsynced, and its `commit` joins the next shared syncfs. None for a chunk or
        more, or without a sync group (each object then fsyncs its files)."""
        if self._sync_group is None or len(data) >= self.chunk_size:
            return None
        key = self._prepared.take() if self._prepared is not None and data else None
        writer = SfsWriter(self, key or new_object_id(), False, prepared=key is not None, fresh=True)
        writer.write(data)
        return writer

    def close(self) -> None:
        """Stop the directory-making helper, if one runs (see `sfs_prepared`)."""
        if self._prepared is not None:
            self._prepared.close()

    def read(self, data_key: str, start: int = 0, end: int | None = None) -> Iterator[bytes]:
        """As `Repository.read`; the bytes are those of the object when `read` returned,
        even if it is deleted before the stream ends (see `sfs_pins`)."""
        manifest, manifest_bytes = self._visible_manifest(data_key)
        if end is None or end > manifest.size:
            end = manifest.size
        if start < 0 or start > manifest.size or end < start:
            raise RepositoryError(
                f"invalid range [{start}, {end}) for object {data_key!r} of size {manifest.size}"
            )
        cs = manifest.chunk_size
        first, stop = start // cs, -(-end // cs)
        if stop - first <= 0:
            return iter(())
        if stop - first == 1:
            f = self._open_chunk(None, data_key, first)
            return self._one_chunk(f, manifest, data_key, first, start - first * cs, end - first * cs)
        try:
            pin = Pin(self.object_dir(data_key))
            # the manifest again, under the pin: the object read is the one pinned (an id
            # deleted and written again in between, as a verbatim copy may, is not mixed up)
            with pin.open(MANIFEST) as f:
                same = f.readall() == manifest_bytes
        except (FileNotFoundError, NotADirectoryError):
            raise NoSuchData(self.name, data_key) from None
        if not same:
            pin.release()
            raise NoSuchData(self.name, data_key, "changed while being opened")
        return self._pinned_chunks(pin, manifest, data_key, first, stop, start, end)

    def _open_chunk(self, pin: Pin | None, data_key: str, index: int) -> io.FileIO:
        """Chunk `index`'s file, by path or (pinned) relative to the object directory."""
        try:
            if pin is not None:
                return pin.open(_chunk_name(data_key, index))
            return io.FileIO(self.chunk_path(data_key, index), "r")
        except (FileNotFoundError, NotADirectoryError):
            if pin is None and self._manifest(data_key) is None:
                raise NoSuchData(self.name, data_key, "deleted") from None
            raise CorruptData(self.name, data_key, index, "chunk file is missing") from None
        except OSError as exc:
            if exc.errno in (errno.EMFILE, errno.ENFILE):
                raise  # the process is out of descriptors: nothing wrong with the data
            raise CorruptData(self.name, data_key, index, f"chunk unreadable: {exc}") from exc

    def _one_chunk(
        self, f: io.FileIO, manifest: Manifest, data_key: str, index: int, lo: int, hi: int
    ) -> Iterator[bytes]:
        with f:
            data = self._verified(f, manifest, data_key, index)
        yield data if lo == 0 and hi == len(data) else data[lo:hi]

    def _pinned_chunks(
        self, pin: Pin, manifest: Manifest, data_key: str, first: int, stop: int, start: int, end: int
    ) -> Iterator[bytes]:
        cs = manifest.chunk_size
        try:
            for index in range(first, stop):
                with self._open_chunk(pin, data_key, index) as f:
                    data = self._verified(f, manifest, data_key, index)
                lo = max(start - index * cs, 0)
                hi = min(end - index * cs, len(data))
                yield data if lo == 0 and hi == len(data) else data[lo:hi]
        finally:
            pin.release()

    def _verified(self, f: io.FileIO, manifest: Manifest, data_key: str, index: int) -> bytes:
        """Chunk `index` read from `f`, verified against its length and digest."""
        expected = manifest.chunk_length(index)
        try:
            data = _read_exact_or_more(f, expected)
        except OSError as exc:
            raise CorruptData(self.name, data_key, index, f"chunk unreadable: {exc}") from exc
        if len(data) != expected:
            raise CorruptData(
                self.name, data_key, index, f"chunk has {len(data)}+ bytes, expected {expected}"
            )
        if self.digest(data) != manifest.digests[index]:
            raise CorruptData(self.name, data_key, index, "siphash digest mismatch")
        return data

    def size(self, data_key: str) -> int | None:
        manifest = self._manifest(data_key)
        return None if manifest is None or manifest.locked else manifest.size

    def stat(self, data_key: str) -> ObjectStat | None:
        manifest = self._manifest(data_key)
        if manifest is None:
            return None
        return ObjectStat(data_key, manifest.size, manifest.locked, manifest.created)

    def delete(self, data_key: str) -> None:
        """Remove the object: its directory is renamed aside at once (reads that begin from
        then on find nothing) and removed, or, if a read pins it, left for the last such
        read to remove (see `sfs_pins`). A crash part-way leaves the renamed directory,
        which cleanup removes."""
        check_object_id(data_key)
        path = self.object_dir(data_key)
        trash = trash_path(path)
        try:
            try:
                os.rename(path, trash)
            except OSError as exc:
                if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                    raise
                # an earlier copy under this id, deleted, is still being read
                trash = f"{trash}.{secrets.token_hex(4)}"
                os.rename(path, trash)
        except (FileNotFoundError, NotADirectoryError):
            return  # nothing there: deleted already, or never written
        remove_unless_pinned(trash)

    def lock(self, data_key: str) -> None:
        self._set_locked(data_key, True)

    def unlock(self, data_key: str) -> None:
        self._set_locked(data_key, False)

    def _set_locked(self, data_key: str, locked: bool) -> None:
        manifest = self._manifest(data_key)
        if manifest is None:
            raise NoSuchData(self.name, data_key)
        if manifest.locked != locked:
            self._replace_manifest(data_key, manifest.with_locked(locked))

    def _object_dirs(self) -> Iterator[tuple[str, str]]:
        """(objectId, object directory) for every object directory, complete or not."""
        return _object_dirs(self._root, self.name)

    def keys(self) -> Iterator[str]:
        for data_key, path in self._object_dirs():
            if os.path.exists(f"{path}/{MANIFEST}"):
                yield data_key

    def cleanup(self, referenced: Callable[[str], bool], older_than_s: float = 3600) -> list[str]:
        """As `Repository.cleanup`. An incomplete object that metadata names (its manifest
        lost) is kept and logged: its chunks may be all that is left of it. A directory
        that cannot be read is skipped with a warning, not the end of the pass."""
        now = time.time()
        incomplete: list[tuple[str, str]] = []
        unreferenced: list[str] = []
        committed = 0
        for data_key, path in self._object_dirs():
            try:
                try:
                    manifest_mtime: float | None = os.stat(f"{path}/{MANIFEST}").st_mtime
                except FileNotFoundError:
                    manifest_mtime = None
                if manifest_mtime is None:
                    if now - _newest_dir_mtime(path) < older_than_s:
                        continue
                    if referenced(data_key):
                        log.error("repository %r: object %s is in use but its manifest is "
                                  "missing: kept (it reads as missing data)", self.name, data_key)
                        continue
                    incomplete.append((data_key, path))
                    continue
                committed += 1
                if now - manifest_mtime >= older_than_s and not referenced(data_key):
                    unreferenced.append(data_key)
            except FileNotFoundError:
                continue  # deleted concurrently
            except OSError as exc:
                log.warning("repository %r: cleanup skips %s: %s", self.name, path, exc)
        removed = [key for key, path in incomplete if self._discard_quietly(path)]
        if not orphans_plausible(len(unreferenced), committed):
            refuse_orphans(self.name, len(unreferenced), committed)
            unreferenced = []
        for data_key in unreferenced:
            try:
                self.delete(data_key)
            except OSError as exc:
                log.warning("repository %r: cleanup cannot remove %s: %s", self.name, data_key, exc)
                continue
            removed.append(data_key)
        if unreferenced:
            shown = ", ".join(unreferenced[:20]) + (" ..." if len(unreferenced) > 20 else "")
            log.warning("repository %r: removed %d objects no metadata names: %s",
                        self.name, len(unreferenced), shown)
        try:
            self._remove_stale_trash()
        except OSError as exc:
            log.warning("repository %r: cleanup of deleted objects stopped: %s", self.name, exc)
        return removed

    def _discard_quietly(self, path: str) -> bool:
        try:
            return self._discard(path)
        except FileNotFoundError:
            return False
        except OSError as exc:
            log.warning("repository %r: cleanup skips %s: %s", self.name, path, exc)
            return False

    def _discard(self, path: str) -> bool:
        """Remove an incomplete object directory unless its writer committed meanwhile.

        The directory is first renamed aside (atomically), so a writer that is still going
        fails rather than commits into a directory being deleted; if the manifest turns out
        to be there after all, the object is put back.
        """
        trash = trash_path(path)
        os.rename(path, trash)
        if os.path.exists(f"{trash}/{MANIFEST}"):
            os.rename(trash, path)
            return False
        shutil.rmtree(trash, ignore_errors=True)
        return True

    def _remove_stale_trash(self) -> None:
        """Directories renamed aside by a delete or a cleanup that crashed before removing
        them, or by a delete whose last pinning read did not: any no read pins any more."""
        for fanout in os.scandir(self._root):
            if len(fanout.name) == 3 and fanout.is_dir():
                try:
                    for entry in os.scandir(fanout.path):
                        if entry.name.startswith(TRASH_PREFIX):
                            remove_unless_pinned(entry.path)
                except OSError as exc:  # one unreadable fan-out: the others still go
                    log.warning("repository %r: cleanup skips %s: %s", self.name, fanout.path, exc)

    # -- used by SfsWriter ---------------------------------------------------------------

    def _make_object_dirs(self, data_key: str, group: int) -> None:
        """Create `{fanout}/{objectId}/chunks/{group}` with as few syscalls as possible."""
        make_object_dirs(self._root, data_key, group)

    def _sync_fanout(self, data_key: str) -> None:
        """Make the object directory's entry, and its fan-out directory's, durable."""
        fanout = data_key[-3:]
        _fsync_dir(f"{self._root}/{fanout}")
        if fanout not in self._durable_fanout:
            _fsync_dir(self._root)
            self._durable_fanout.add(fanout)


def _newest_dir_mtime(obj_dir: str) -> float:
    """The latest change under an incomplete object: its directories' mtimes.

    A writer creates chunk files whole, so a directory's mtime moves with every new chunk.
    """
    newest = os.stat(obj_dir).st_mtime
    chunks = f"{obj_dir}/chunks"
    try:
        newest = max(newest, os.stat(chunks).st_mtime)
        for group in os.scandir(chunks):
            newest = max(newest, group.stat(follow_symlinks=False).st_mtime)
    except FileNotFoundError:
        pass
    return newest


class SfsWriter(ObjectWriter):
    """Streams an object into chunk files; the manifest commits it.

    Holds at most one chunk in memory; `write` of a large buffer writes full chunks
    straight from the caller's buffer without copying.
    """

    def __init__(
        self, repo: SfsRepository, data_key: str, locked: bool, prepared: bool = False,
        fresh: bool = False,
    ) -> None:
        self.repo = repo
        self.data_key = data_key
        self._locked = locked
        self._prepared = prepared  # `{objectId}/chunks/0` was made ahead (sfs_prepared)
        # A new objectId that nothing refers to yet: a small object may then write its
        # manifest in place (see `_commit_small`). A copy under an id already in use (a
        # migration's, whose proxy reads this repository first) must make it appear whole.
        self._fresh = fresh
        self._chunk_size = repo.chunk_size
        self._buffer = bytearray()
        self._digests: list[str] = []
        self._size = 0
        self._groups: list[int] = []  # chunk directories created, in order
        self._state = "open"
        self._ticket: int | None = None  # the sync round that covers the staged files

    @property
    def bytes_written(self) -> int:
        return self._size

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._state != "open":
            raise RepositoryError(f"writer for {self.data_key!r} is {self._state}")
        view = memoryview(data).cast("B") if isinstance(data, memoryview) else memoryview(data)
        try:
            self._consume(view)
        except OSError as exc:
            self.abort()
            raise RepositoryError(
                f"writing {self.data_key!r} to {self.repo.name!r}: {exc}"
            ) from exc

    def _consume(self, view: memoryview) -> None:
        cs = self._chunk_size
        buffer = self._buffer
        pos, total = 0, len(view)
        self._size += total
        while pos < total:
            if not buffer and total - pos >= cs:
                self._write_chunk(view[pos : pos + cs])
                pos += cs
                continue
            take = min(cs - len(buffer), total - pos)
            buffer += view[pos : pos + take]
            pos += take
            if len(buffer) == cs:
                self._write_chunk(buffer)
                buffer.clear()

    def _write_chunk(self, data: bytes | bytearray | memoryview) -> None:
        index = len(self._digests)
        group = index // CHUNKS_PER_DIR
        if not self._groups:
            self.repo._make_object_dirs(self.data_key, group)
            self._groups.append(group)
        elif self._groups[-1] != group:
            os.mkdir(f"{self.repo.object_dir(self.data_key)}/chunks/{group}")
            self._groups.append(group)
        _write_file(self.repo.chunk_path(self.data_key, index), data)
        self._digests.append(self.repo.digest(data))

    def commit(self) -> Location:
        if self._state not in ("open", "staged"):
            raise RepositoryError(f"writer for {self.data_key!r} is {self._state}")
        try:
            self._commit()
        except OSError as exc:
            self.abort()
            raise RepositoryError(
                f"committing {self.data_key!r} to {self.repo.name!r}: {exc}"
            ) from exc
        self._state = "committed"
        self._buffer = bytearray()
        return Location(self.repo.name, self.data_key, self._size)

    def _commit(self) -> None:
        repo, key = self.repo, self.data_key
        if self._state == "staged" or (
            repo._sync_group is not None and self._fresh and not self._digests
            and len(self._buffer) < self._chunk_size
        ):
            self._commit_small()
            return
        obj_dir = repo.object_dir(key)
        if self._buffer:
            self._write_chunk(self._buffer)
        if not self._groups:  # an empty object: no chunks, just the manifest
            try:
                os.mkdir(obj_dir)
            except FileNotFoundError:
                os.makedirs(obj_dir)
        else:
            # Chunk entries must be durable before the manifest can make them visible.
            for group in self._groups:
                _fsync_dir(f"{obj_dir}/chunks/{group}")
            _fsync_dir(f"{obj_dir}/chunks")
        manifest = Manifest(
            object_id=key,
            size=self._size,
            chunk_size=self._chunk_size,
            digests=tuple(self._digests),
            created=time.time(),
            locked=self._locked,
        )
        tmp = f"{obj_dir}/.{MANIFEST}.tmp"
        _write_file(tmp, manifest.to_bytes())
        os.rename(tmp, f"{obj_dir}/{MANIFEST}")
        _fsync_dir(obj_dir)
        repo._sync_fanout(key)

    def stage(self) -> bool:
        if self._state == "staged":
            return True
        if self._state != "open":
            raise RepositoryError(f"writer for {self.data_key!r} is {self._state}")
        if (self.repo._sync_group is None or not self._fresh or self._digests
                or len(self._buffer) >= self._chunk_size):
            return False
        try:
            self._write_small()
        except OSError as exc:
            self.abort()
            raise RepositoryError(
                f"writing {self.data_key!r} to {self.repo.name!r}: {exc}"
            ) from exc
        self._ticket = self.repo._sync_group.ticket()
        self._state = "staged"
        return True

    def _commit_small(self) -> None:
        """At most one chunk: write the chunk and the manifest unsynced (unless `stage`
        did), then one shared syncfs makes both (and their directories) durable before we
        return.

        The manifest is written in place rather than renamed: until `sync()` returns the
        object is not committed, and nothing refers to a fresh objectId before it is (the
        gateway commits metadata only after this), so a crash can leave at worst an
        unreferenced object with a torn manifest, which `cleanup` removes. Writers of an id
        already in use do not come here (`_fresh`).
        """
        if self._state != "staged":
            self._write_small()
        assert self.repo._sync_group is not None
        self.repo._sync_group.sync(self._ticket)

    def _write_small(self) -> None:
        """The files of an object of at most one chunk, written but not synced."""
        repo, key = self.repo, self.data_key
        obj_dir = repo.object_dir(key)
        if self._buffer:
            if not self._prepared:
                repo._make_object_dirs(key, 0)
            self._groups.append(0)
            self._digests.append(repo.digest(self._buffer))
            self._size = len(self._buffer)
        else:
            try:
                os.mkdir(obj_dir)
            except FileNotFoundError:
                os.makedirs(obj_dir)
        try:
            self._write_small_files(obj_dir)
        except FileNotFoundError:
            if not self._prepared:
                raise
            # its directories were removed after they were made (a cleanup pass)
            os.makedirs(f"{obj_dir}/chunks/0", exist_ok=True)
            self._prepared = False  # its chunk file is gone with them
            self._write_small_files(obj_dir)

    def _write_small_files(self, obj_dir: str) -> None:
        if self._buffer:
            # a prepared object's chunk file exists, empty (sfs_prepared): no new inode here
            flags = _PREPARED_FLAGS if self._prepared else _WRITE_FLAGS
            _write_file(self.repo.chunk_path(self.data_key, 0), self._buffer, sync=False, flags=flags)
        manifest = Manifest(
            object_id=self.data_key,
            size=self._size,
            chunk_size=self._chunk_size,
            digests=tuple(self._digests),
            created=time.time(),
            locked=self._locked,
        )
        _write_file(f"{obj_dir}/{MANIFEST}", manifest.to_bytes(), sync=False)

    def abort(self) -> None:
        if self._state not in ("open", "staged"):
            return
        self._state = "aborted"
        self._buffer = bytearray()
        shutil.rmtree(self.repo.object_dir(self.data_key), ignore_errors=True)
