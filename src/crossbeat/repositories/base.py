"""The data repository contract: `Repository` and its streaming `ObjectWriter`.

A repository stores immutable objects under an objectId (`data_key`). Objects are written
through a writer (nothing is visible until `commit`), read back as a stream of verified
chunks, and deleted idempotently. Object metadata points at data with a `Location`.
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import TracebackType

from crossbeat.repositories.errors import RepositoryError
from crossbeat.repositories.io import BoundedExecutor, exactly
from crossbeat.repositories.location import Location

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ObjectStat:
    """What a repository knows about one committed object, locked or not."""

    data_key: str
    size: int
    locked: bool
    created: float  # seconds since the epoch


class ObjectWriter(abc.ABC):
    """Streams one new object into a repository.

    Nothing is visible to readers until `commit` returns; `abort` (or leaving the `with`
    block with an exception before `commit`) removes everything written. A writer is used
    by one thread at a time.
    """

    data_key: str

    @abc.abstractmethod
    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Append `data`. Memory stays bounded (about one chunk), whatever the total size."""

    @abc.abstractmethod
    def commit(self) -> Location:
        """Make the object durable and visible, and return where it lives.

        Durable on return: a crash afterwards never loses it. Raises `RepositoryError` if
        the writer was aborted or already committed.
        """

    @abc.abstractmethod
    def abort(self) -> None:
        """Remove everything written so far. Idempotent; a no-op after `commit`."""

    def stage(self) -> bool:
        """Optionally write everything accepted so far without making it durable, so that
        `commit` has only the durability wait left; False (nothing done) if this writer
        cannot. A staged object is not committed: nothing may refer to it before `commit`
        returns (a crash can leave it torn, and cleanup removes it); `abort` removes it."""
        return False

    @property
    @abc.abstractmethod
    def bytes_written(self) -> int:
        """How many bytes `write` has accepted so far."""

    def __enter__(self) -> ObjectWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # Abort on an exception, and also when the block ends without commit: an
        # uncommitted writer must never leave data behind.
        self.abort()


class Repository(abc.ABC):
    """A named store of immutable objects addressed by objectId."""

    name: str
    # `read` holds the bytes it will return from the moment it returns: a delete after that
    # cannot cut the stream short (sfs; see `sfs_pins`). A caller that reads several objects
    # one after the other (the pieces of a multipart object) opens them all first, at the
    # cost of a file descriptor each. Others open each read when they reach it.
    pins_reads: bool = False
    # The threads this repository's I/O runs on when callers should not use their shared
    # ones (a remote backend may hang: see `io.BoundedExecutor`); None: the caller's own.
    io_executor: BoundedExecutor | None = None

    @abc.abstractmethod
    def writer(self, data_key: str | None = None, *, locked: bool = False) -> ObjectWriter:
        """Begin a new object; nothing is visible until the writer commits.

        `data_key` is normally left out (a fresh objectId is generated). Migration passes
        the objectId it copies, and `locked=True` so that the copy commits locked (seed 003:
        invisible to reads until `unlock`). One writer per data key at a time.
        """

    @abc.abstractmethod
    def read(self, data_key: str, start: int = 0, end: int | None = None) -> Iterator[bytes]:
        """Return the bytes [start, end) of an object as a stream of chunks.

        `end` None means to the end; an `end` past the size is clamped. Absence (or a locked
        object) raises `NoSuchData` at call time, before any iteration, so callers can
        answer 404 before starting a response. Only the chunks the range touches are read;
        a chunk failing verification raises `CorruptData` (naming object and chunk) before
        any of its bytes are yielded. `start` outside [0, size] raises `RepositoryError`.
        Where `pins_reads`, the stream is the object as it was when `read` returned, even if
        it is deleted before the stream ends.
        """

    def read_location(self, location: Location, start: int = 0, end: int | None = None) -> Iterator[bytes]:
        """`read` of the object `location` names, bytes [start, end) of it (`end` None: to
        `location.size`), which must be exactly as long as the location says: a stream that
        ends short or runs long raises `CorruptData` (see `io.exactly`) rather than hand out
        a body of another length than announced. Repositories that can tell more (the
        backend's own length or ETag, the member holding it) override this to refuse before
        any byte is read."""
        stop = location.size if end is None else min(end, location.size)
        stream = self.read(location.dataKey, start, stop)
        return exactly(iter(stream), max(0, stop - start), self.name, location.dataKey)

    @abc.abstractmethod
    def size(self, data_key: str) -> int | None:
        """The committed object's size, or None if it is absent, incomplete or locked."""

    @abc.abstractmethod
    def delete(self, data_key: str) -> None:
        """Remove the object (committed, locked or partial). Idempotent."""

    @abc.abstractmethod
    def keys(self) -> Iterator[str]:
        """Every committed objectId (locked ones included), for cleanup and migration."""

    @abc.abstractmethod
    def cleanup(self, referenced: Callable[[str], bool], older_than_s: float = 3600) -> list[str]:
        """Remove leftovers older than `older_than_s` seconds; return the removed ids.

        Leftovers are incomplete objects (no committed manifest: a crashed or abandoned
        write) that `referenced(data_key)` does not name, and committed objects it does not
        name. The age bound also protects committed objects whose metadata is still being
        written. Committed objects go only if `orphans_plausible` says their number looks
        like a crash's leftovers; otherwise none goes and the reason is logged.
        """

    def stat(self, data_key: str) -> ObjectStat | None:
        """The committed object's size and lock state (locked ones included), or None."""
        size = self.size(data_key)
        return None if size is None else ObjectStat(data_key, size, False, 0.0)

    def lock(self, data_key: str) -> None:
        """Hide a committed object from reads (seed 003 migration). Not every type can."""
        raise RepositoryError(f"repository {self.name!r} does not support locking")

    def unlock(self, data_key: str) -> None:
        """Make a locked object readable again."""
        raise RepositoryError(f"repository {self.name!r} does not support locking")

    def read_bytes(self, data_key: str, start: int = 0, end: int | None = None) -> bytes:
        """`read` joined into one bytes object; for small objects and tests."""
        return b"".join(self.read(data_key, start, end))

    def put_bytes(self, data: bytes) -> Location:
        """Write `data` as a new object in one call."""
        with self.writer() as w:
            w.write(data)
            return w.commit()

    def small_writer(self, data: bytes) -> ObjectWriter | None:
        """A writer holding all of `data`, a small object, which it can stage (see
        `ObjectWriter.stage`): stage several such writers, then commit them, and one shared
        sync makes them all durable. Writes nothing itself, so it is cheap on an event loop;
        `stage` does the writing, on any thread. None when this repository cannot stage
        `data`."""
        return None

    def close(self) -> None:  # noqa: B027 - optional hook, most repositories hold nothing
        """Release clients and file handles; the default holds none."""


# A crash leaves unreferenced only the objects being written or freed at that moment: a few.
# Many more, or every object, means the metadata was lost, emptied or rolled back (a bad
# restore, a damaged WAL): deleting them then would destroy what the restored metadata needs.
ORPHAN_FLOOR = 100
ORPHAN_SHARE = 0.05


def orphans_plausible(unreferenced: int, committed: int) -> bool:
    """Whether `unreferenced` committed objects out of `committed` look like the leftovers
    of crashes: at most ORPHAN_FLOOR, or ORPHAN_SHARE of all. (Metadata that names nothing
    at all is the caller's to notice: see `Gateway.cleanup`.)"""
    return unreferenced <= max(ORPHAN_FLOOR, ORPHAN_SHARE * committed)


def refuse_orphans(repo: str, unreferenced: int, committed: int) -> None:
    """Log why a cleanup keeps `unreferenced` objects the metadata does not name."""
    log.error(
        "cleanup of repository %r: %d of its %d objects are named by no metadata, more than a "
        "crash leaves: keeping them all. If the metadata was lost or restored from an older "
        "copy, restore the right one; if they are really unwanted, delete them by hand.",
        repo, unreferenced, committed,
    )
