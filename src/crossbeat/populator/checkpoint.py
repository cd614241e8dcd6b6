"""The populator's durable restart point: the last journal seq it has published."""

from __future__ import annotations

import os
from pathlib import Path

import orjson


class CheckpointFile:
    """A small JSON file `{"seq": N}` replaced atomically and fsynced.

    `save` writes a temporary file, fsyncs it, renames it over the old one and fsyncs the
    directory, so after a crash the file holds either the old or the new seq, never a torn
    one. The populator saves only after the broker acknowledged everything up to `seq`.
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> int:
        """The saved seq, or 0 (start of the journal) when there is none yet."""
        try:
            data = orjson.loads(self.path.read_bytes())
        except FileNotFoundError:
            return 0
        return int(data["seq"])

    def save(self, seq: int) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        with tmp.open("wb") as fh:
            fh.write(orjson.dumps({"seq": seq}))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)
        dir_fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
