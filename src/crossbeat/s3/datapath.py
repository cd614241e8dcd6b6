"""Moving object bytes between HTTP bodies and repositories.

Contract for writes: data is written (and fsynced by the repository's commit) before the
caller commits metadata; if body verification fails at the end (hex sha256, Content-MD5,
trailing checksum, short body) the written data is aborted and nothing becomes visible.
Reads verify chunk digests in the repository; the first piece is fetched before the response
starts so a missing or corrupt object still gets a proper S3 error. Every piece must be
exactly as long as its location records (`Repository.read_location`): a short or long one
is an error before the response starts if it is found then, else it ends the stream with an
exception (the server then cuts the connection: never a body of another length than the
announced one, nor a connection left waiting for bytes that will not come).

The I/O of a repository with its own threads (`Repository.io_executor`: a remote backend,
which may hang) runs on them, not on the gateway's shared workers (`Gateway.run_io`).
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
import threading
import weakref
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar, cast

from crossbeat.repositories import CorruptData, Location, ObjectWriter, Repository
from crossbeat.s3.auth import AuthContext
from crossbeat.s3.body import BodyDecoder, Checksums
from crossbeat.s3.checksums import is_value_header
from crossbeat.s3.errors import S3Error
from crossbeat.s3.http import Request
from crossbeat.s3.put_batcher import BuildMeta

if TYPE_CHECKING:
    from crossbeat.s3.gateway import Gateway

T = TypeVar("T")
STREAM_PIECE = 1024 * 1024


@dataclass
class Written:
    """A body stored in a repository and verified."""

    location: Location
    checksums: Checksums

    @property
    def size(self) -> int:
        return self.location.size

    @property
    def md5_hex(self) -> str:
        return self.checksums.md5_hex


@dataclass
class GroupCommit:
    """How a small PUT's version is built when it commits with others (see put_batcher):
    `build(written, bucket)` makes the version from the bucket as it is at commit time."""

    bucket: str
    build: BuildMeta


async def write_body(
    gw: Gateway,
    req: Request,
    ctx: AuthContext,
    repo: Repository,
    then: Callable[[Written], T] | None = None,
    group: GroupCommit | None = None,
    md5: bool = True,
    limit: int | None = None,
) -> tuple[Written, T | None]:
    """Decode, verify and store the request body in `repo`; abort on any failure.

    `md5=False` (bodies that need no ETag) skips the MD5 unless the client sent
    Content-MD5; `Written.md5_hex` is then "". A body longer than `limit` (by default
    `max_object_bytes`) is EntityTooLarge.

    `then(written)` (blocking; typically the metadata commit) runs on a worker thread right
    after the data is durable; if it raises, the data is deleted.

    Bodies up to `inline_object_bytes` that the repository can stage are verified on the
    event loop; with `group` (which replaces `then`; the result is then the version it
    built) they are written and committed in a batch with other PUTs (one sync, one
    metadata transaction), else one worker call writes them, waits for durability and runs
    `then`. Other small bodies are decoded, verified, written and committed in ONE worker
    call.
    """
    decoder = BodyDecoder(ctx, req.headers, md5=md5)
    length = decoder.decoded_length
    if limit is None:
        limit = gw.settings.max_object_bytes
    if length is not None and length > limit:
        raise S3Error("EntityTooLarge")
    if length is not None and length <= gw.settings.small_object_bytes:
        raw_parts: list[bytes] = []
        raw_limit = 2 * gw.settings.small_object_bytes + 65536  # room for aws-chunked framing
        total = 0
        async for raw in req.body_chunks():
            total += len(raw)
            if total > raw_limit:
                raise S3Error("IncompleteBody", "The body is longer than its declared length.")
            raw_parts.append(raw)
        raw_body = b"".join(raw_parts)
        if length <= gw.settings.inline_object_bytes:
            # Hash and verify right here: a few microseconds cost less than waking a worker
            # thread. The files are written by the put batcher's sync thread, a group at a
            # time (see put_batcher.py for why not here).
            data = decoder.feed(raw_body)
            checksums = decoder.finish()
            staged = repo.small_writer(data)
            if staged is not None and group is not None:
                written, meta = await gw.put_batcher.put(staged, checksums, group.bucket, group.build)
                return written, cast(T, meta)
            if staged is not None:
                return await gw.run_io(repo, _commit_small, staged, checksums, repo, then)
            return await gw.run_io(repo, _store_verified, data, checksums, repo, then)
        return await gw.run_io(repo, _store_small, decoder, raw_body, repo, then)

    return await write_stream(gw, req.body_chunks(), decoder, repo, then, limit=limit)


async def write_stream(
    gw: Gateway,
    chunks: AsyncIterator[bytes],
    decoder: BodyDecoder,
    repo: Repository,
    then: Callable[[Written], T] | None = None,
    *,
    limit: int | None = None,
) -> tuple[Written, T | None]:
    """Stream `chunks` through `decoder` into a new object of `repo`, a megabyte at a time
    (memory stays bounded whatever the size); verify with `decoder.finish()`, commit the data
    (durable when this returns), then run `then(written)` on a worker thread.

    Any failure (from `chunks`, the decoder, the repository, or `then`) aborts or deletes
    the data, so nothing written stays behind. More than `limit` (by default
    `max_object_bytes`) is EntityTooLarge. PutObject's large bodies, UploadPart's and POST
    Object's file part come here.
    """
    if limit is None:
        limit = gw.settings.max_object_bytes
    writer = await gw.run_io(repo, repo.writer)
    try:
        pending: list[bytes] = []
        pending_size = 0
        total = 0
        async for raw in chunks:
            piece = decoder.feed(raw)
            if not piece:
                continue
            pending.append(piece)
            pending_size += len(piece)
            total += len(piece)
            if total > limit:
                raise S3Error("EntityTooLarge")
            if pending_size >= STREAM_PIECE:
                await gw.run_io(repo, writer.write, b"".join(pending))
                pending, pending_size = [], 0
        checksums = decoder.finish()
        if pending:
            await gw.run_io(repo, writer.write, b"".join(pending))
        location = await gw.run_io(repo, writer.commit)
    except BaseException:
        # (on the shared workers: an abort must run even when the repository's queue is full)
        await asyncio.shield(gw.run(writer.abort))
        raise
    written = Written(location, checksums)
    if then is None:
        return written, None
    return written, await gw.run_io(repo, _then, repo, written, then)


def _store_small(
    decoder: BodyDecoder, raw: bytes, repo: Repository, then: Callable[[Written], T] | None
) -> tuple[Written, T | None]:
    data = decoder.feed(raw)
    checksums = decoder.finish()
    written = Written(_write_whole(repo, data), checksums)
    if then is None:
        return written, None
    return written, _then(repo, written, then)


def _store_verified(
    data: bytes, checksums: Checksums, repo: Repository, then: Callable[[Written], T] | None
) -> tuple[Written, T | None]:
    written = Written(_write_whole(repo, data), checksums)
    if then is None:
        return written, None
    return written, _then(repo, written, then)


def _commit_small(
    staged: ObjectWriter, checksums: Checksums, repo: Repository, then: Callable[[Written], T] | None
) -> tuple[Written, T | None]:
    """Write and commit a `Repository.small_writer` (its sync is shared with other
    commits on the same filesystem), then `then` (worker thread)."""
    try:
        location = staged.commit()
    except BaseException:
        staged.abort()
        raise
    written = Written(location, checksums)
    if then is None:
        return written, None
    return written, _then(repo, written, then)


def _then(repo: Repository, written: Written, then: Callable[[Written], T]) -> T:
    try:
        return then(written)
    except BaseException:
        repo.delete(written.location.dataKey)
        raise


def _write_whole(repo: Repository, data: bytes) -> Location:
    writer = repo.writer()
    try:
        writer.write(data)
        return writer.commit()
    except BaseException:
        writer.abort()
        raise


def _slices(locations: list[dict[str, Any]], start: int, end: int) -> list[tuple[dict[str, Any], int, int]]:
    """Map the object range [start, end) onto (location, local start, local end) pieces."""
    out = []
    offset = 0
    for loc in locations:
        size = int(loc["size"])
        lo, hi = max(start, offset), min(end, offset + size)
        if lo < hi:
            out.append((loc, lo - offset, hi - offset))
        offset += size
    return out


async def open_read(
    gw: Gateway, meta: dict[str, Any], start: int, end: int
) -> AsyncIterator[bytes]:
    """An iterator over bytes [start, end) of the object; the first piece is read eagerly.

    Raises (before any byte is sent) when the object's data is missing or its first chunk is
    corrupt; later corruption aborts the stream, so a client never gets wrong bytes. Once
    this returns, deleting the object (an overwrite in an unversioned bucket) does not cut
    the stream short where its repositories pin reads, within `PINNED_AHEAD` pieces (see
    `PieceReads`).
    """
    pieces = _slices(meta.get("location") or [], start, end)
    if not pieces:
        return _empty()
    io = io_repository(gw, pieces)
    if end - start <= gw.settings.small_object_bytes:
        data = await gw.run_io(io, _read_all, gw, pieces)
        return _once(data)
    reads = await gw.run_io(io, PieceReads, gw, pieces)
    first_iter = await gw.run_io(io, reads.next_piece)
    first = await gw.run_io(io, next, first_iter, b"") if first_iter is not None else b""
    return _stream(gw, first, first_iter, reads, io)


def io_repository(gw: Gateway, pieces: list[tuple[dict[str, Any], int, int]]) -> Repository | None:
    """The repository whose threads read `pieces` (see `Gateway.run_io`): the first one
    with threads of its own (a remote one may hang; sfs reads are quick wherever they
    run), else None, the shared workers."""
    for loc, _, _ in pieces:
        repo = gw.repositories.get(loc.get("location", ""))
        if repo is not None and repo.io_executor is not None:
            return repo
    return None


def reads_locally(gw: Gateway, meta: dict[str, Any], start: int, end: int) -> bool:
    """Whether bytes [start, end) of `meta` are all in repositories without threads of
    their own: only those may be read on the event loop or a shared worker (a remote
    backend may hang; `open_read` reads it on its repository's threads)."""
    return io_repository(gw, _slices(meta.get("location") or [], start, end)) is None


def copy_io_repository(gw: Gateway, meta: dict[str, Any], target: Repository) -> Repository | None:
    """The repository whose threads copy stored object `meta` into `target`: the source's
    (see `io_repository`), else the target if it has threads of its own, else None."""
    source = io_repository(gw, _slices(meta.get("location") or [], 0, int(meta.get("size", 0))))
    return source or (target if target.io_executor is not None else None)


def _begin(repo: Repository, loc: dict[str, Any], lo: int, hi: int) -> Iterator[bytes]:
    """The read of bytes [lo, hi) of the piece at `loc`, which must yield exactly that many."""
    return iter(repo.read_location(Location.from_json(loc), lo, hi))


# Pinned reads begun ahead of the piece being read. Each holds a file descriptor until its
# piece is read, so without a bound a GET of a 10,000-part object would hold 10,000 (and
# fail with EMFILE under a usual limit of 1024). 64 parts are at least 320 MiB ahead.
PINNED_AHEAD = 64


class _AheadBudget:
    """The pinned reads begun ahead across this process's streams, bounded by a quarter of
    its descriptor limit: 64 per GET of a multipart object let 15 idle downloads take 1,011
    of 1,024 descriptors, and every request after them got SlowDown. Past the bound, pieces
    are read on their turn (a delete then cuts those streams short sooner: never wrong
    bytes). The piece a stream is on is always pinned."""

    def __init__(self) -> None:
        self.held = 0
        self._lock = threading.Lock()

    @staticmethod
    def limit() -> int:
        """A quarter of the descriptor limit now (it may be raised or lowered at run time),
        at least one stream's PINNED_AHEAD."""
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        return (1 << 20) if soft == resource.RLIM_INFINITY else max(PINNED_AHEAD, soft // 4)

    def take(self, force: bool) -> bool:
        with self._lock:
            if not force and self.held >= self.limit():
                return False
            self.held += 1
            return True

    def give(self, account: list[int], count: int | None = None) -> None:
        """Give back `count` (default: all) of what `account` ([held]) took."""
        with self._lock:
            n = account[0] if count is None else min(count, account[0])
            account[0] -= n
            self.held -= n


_AHEAD = _AheadBudget()


class PieceReads:
    """The reads of an object's pieces, handed out in order by `next_piece` (worker thread).

    A read of a repository that pins reads (`Repository.pins_reads`) begins up to
    `PINNED_AHEAD` pieces before its turn: those of the first `PINNED_AHEAD` pieces begin in
    the constructor, so that a delete from then on cannot take them away, and each later one
    when the piece that many before it is handed out. Other reads begin on their turn. The
    constructor raises `NoSuchData` if one of the first pieces is already gone; a later piece
    found gone ends the stream with it (a client sees a read cut short, never wrong bytes).
    """

    __slots__ = ("__weakref__", "_account", "_begun", "_gw", "_todo")

    def __init__(self, gw: Gateway, pieces: list[tuple[dict[str, Any], int, int]]) -> None:
        self._gw = gw
        self._todo = iter(pieces)
        self._begun: deque[Iterator[bytes] | Callable[[], Iterator[bytes]]] = deque()
        # the pinned reads this holds of `_AHEAD` ([count]); given back as they are handed
        # out or closed, and whatever is left when this is collected unclosed
        self._account = [0]
        weakref.finalize(self, _AHEAD.give, self._account)
        self._begin_ahead()

    def _begin_ahead(self) -> None:
        while len(self._begun) < PINNED_AHEAD:
            piece = next(self._todo, None)
            if piece is None:
                return
            loc, lo, hi = piece
            repo = self._gw.repository(loc["location"])
            if repo.pins_reads and _AHEAD.take(force=not self._begun):
                self._account[0] += 1
                try:
                    self._begun.append(_begin(repo, loc, lo, hi))
                except BaseException:
                    _AHEAD.give(self._account, 1)
                    raise
            else:
                self._begun.append(partial(_begin, repo, loc, lo, hi))

    def close(self) -> list[Iterator[bytes]]:
        """Hand out no more pieces; returns the reads begun ahead, for the caller to end."""
        begun = [read for read in self._begun if not callable(read)]
        self._begun.clear()
        self._todo = iter(())
        _AHEAD.give(self._account)
        return begun

    def next_piece(self) -> Iterator[bytes] | None:
        """The next piece's bytes, or None after the last piece."""
        if not self._begun:
            return None
        read = self._begun.popleft()
        if not callable(read):
            _AHEAD.give(self._account, 1)  # no longer ahead: the piece being read
        self._begin_ahead()
        return read() if callable(read) else read


def _chunks(gw: Gateway, pieces: list[tuple[dict[str, Any], int, int]]) -> Iterator[bytes]:
    """The pieces' bytes in order (worker thread), read as `open_read` does."""
    reads = PieceReads(gw, pieces)
    while (piece := reads.next_piece()) is not None:
        yield from piece


def _read_all(gw: Gateway, pieces: list[tuple[dict[str, Any], int, int]]) -> bytes:
    # the small-GET path: no generator frame, and for one piece (any object not uploaded
    # in parts) no PieceReads either; one chunk comes back as it was read
    if len(pieces) == 1:
        loc, lo, hi = pieces[0]
        data = b"".join(list(_begin(gw.repository(loc["location"]), loc, lo, hi)))
    else:
        reads = PieceReads(gw, pieces)
        out: list[bytes] = []
        while (piece := reads.next_piece()) is not None:
            out.extend(piece)
        data = b"".join(out)
    want = sum(hi - lo for _, lo, hi in pieces)
    if len(data) != want:  # (each piece is checked as read: this is the sum's guard)
        loc = pieces[0][0]
        raise CorruptData(loc.get("location", "?"), loc.get("dataKey", "?"), None,
                          f"read {len(data)} bytes where the locations record {want}")
    return data


async def _empty() -> AsyncIterator[bytes]:
    return
    yield b""  # pragma: no cover - makes this an async generator


async def _once(data: bytes) -> AsyncIterator[bytes]:
    yield data


async def _stream(
    gw: Gateway, first: bytes, first_iter: Iterator[bytes] | None, reads: PieceReads,
    io: Repository | None = None,
) -> AsyncIterator[bytes]:
    """The rest of the object after `first`. A piece found short, long, corrupt or gone
    raises out of this iterator: the response has started, so the server cuts the
    connection and the client sees a body shorter than announced, not wrong bytes."""
    it = first_iter
    try:
        if first:
            yield first
        while it is not None:
            chunk = await gw.run_io(io, next, it, None)
            if chunk is None:
                it = await gw.run_io(io, reads.next_piece)
                continue
            yield chunk
    finally:
        if it is not None:  # left early (the client went): end the reads in a worker
            # thread, since ending a pinned read may remove a deleted object's files
            with contextlib.suppress(Exception):
                await gw.run(_end_reads, it, reads)


def _end_reads(it: Iterator[bytes], reads: PieceReads) -> None:
    for read in (it, *reads.close()):
        close = getattr(read, "close", None)
        if close is not None:
            close()


def range_chunks(gw: Gateway, meta: dict[str, Any], start: int, end: int) -> Iterator[bytes]:
    """Bytes [start, end) of a stored object, chunk by chunk (worker thread; for copies)."""
    return _chunks(gw, _slices(meta.get("location") or [], start, end))


def read_range_sync(gw: Gateway, meta: dict[str, Any], start: int, end: int) -> bytes:
    """Bytes [start, end) of a stored object, read whole (worker thread; small ranges)."""
    return _read_all(gw, _slices(meta.get("location") or [], start, end))


async def read_range(gw: Gateway, meta: dict[str, Any], start: int, end: int) -> bytes:
    """Bytes [start, end) of a stored object, read whole (small ranges) on the threads that
    may read them: a remote repository's own, else the shared workers (`io_repository`)."""
    pieces = _slices(meta.get("location") or [], start, end)
    return await gw.run_io(io_repository(gw, pieces), _read_all, gw, pieces)


def run_sync(fn: Callable[..., T], *args: Any) -> T:
    return fn(*args)


async def read_document(
    req: Request, ctx: AuthContext, limit: int = 4 * 1024 * 1024, *, object_checksum: bool = False
) -> bytes:
    """A small request document (XML, JSON), decoded and verified like any body.

    `object_checksum`: the request's `x-amz-checksum-<algorithm>` header is the checksum of
    the object the request makes (CompleteMultipartUpload), not of the document: the
    caller checks it, the document is not checked against it."""
    headers = req.headers
    if object_checksum:
        headers = {name: value for name, value in req.headers.items() if not is_value_header(name)}
    decoder = BodyDecoder(ctx, headers)
    parts: list[bytes] = []
    total = 0
    async for raw in req.body_chunks():
        piece = decoder.feed(raw)
        total += len(piece)
        if total > limit:
            raise S3Error("EntityTooLarge", "The request document is too large.")
        parts.append(piece)
    decoder.finish()
    return b"".join(parts)
