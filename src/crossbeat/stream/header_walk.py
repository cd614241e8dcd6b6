"""A walk of a stream's batch headers that may run on another thread.

`Stream.header_walk()` takes, on the event loop, a snapshot of the segments that hold the
durable batches (those below the high watermark): a duplicate of each segment's file
descriptor and its size. The walk then reads only through those duplicates, so it can run
in a worker thread while the loop goes on appending, rolling and deleting segments: bytes
below the high watermark never change once written (only recovery, at open, cuts a
segment), and a segment closed or deleted meanwhile stays readable through the duplicate
until the walk is closed.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

from crossbeat.stream.batch import BatchHeader
from crossbeat.stream.segment import walk_headers


@dataclass(frozen=True, slots=True)
class WalkedBatch:
    """One batch met by a walk: its header, and where to read the whole batch."""

    header: BatchHeader
    fd: int
    position: int

    def read(self) -> bytes:
        """The batch's bytes (valid while its walk is open)."""
        return os.pread(self.fd, self.header.size, self.position)


class HeaderWalk:
    """The batches in [start_offset, end_offset) as the snapshot saw them, oldest first.

    Iterate it once, from any one thread, then `close()` it (or use it as a context
    manager) to release the descriptors.
    """

    def __init__(
        self, start_offset: int, end_offset: int, segments: list[tuple[int, int]], attributes: int
    ) -> None:
        self.start_offset = start_offset
        self.end_offset = end_offset
        self._segments = segments  # (duplicated fd, size at the snapshot)
        self._attributes = attributes

    def __iter__(self) -> Iterator[WalkedBatch]:
        for fd, size in self._segments:
            for pos, header in walk_headers(fd, size, 0, self.end_offset, self._attributes):
                if header.next_offset > self.start_offset:
                    yield WalkedBatch(header, fd, pos)

    def close(self) -> None:
        segments, self._segments = self._segments, []
        for fd, _size in segments:
            os.close(fd)

    def __enter__(self) -> HeaderWalk:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
