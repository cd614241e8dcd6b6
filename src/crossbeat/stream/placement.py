"""The placement driver, single-node edition: which streams exist and their ordered ranges.

Seed 004's placement driver is a Raft group; here it is one JSON file (`placement.json`)
rewritten atomically on every change (temp file, fsync, rename, fsync of the directory), so
after a crash it holds either the old or the new state, never a mix. It keeps, per stream:
a numeric id (directory names use ids, so stream names never reach the filesystem), the
stream's config, its log start offset (advanced by retention) and its ranges. Only the last
range is open; a sealed range records its end offset. The open range's end is not recorded:
the range server that holds it knows it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crossbeat.stream.errors import StreamError, StreamExists, StreamNotFound
from crossbeat.stream.file_replace import replace_file

FORMAT_VERSION = 1


@dataclass(frozen=True, slots=True)
class RangeInfo:
    """One range of a stream: offsets [start_offset, end_offset); end is None while open."""

    index: int
    start_offset: int
    end_offset: int | None
    sealed: bool


@dataclass(slots=True)
class StreamMeta:
    """What the placement driver knows about one stream."""

    id: int
    name: str
    config: dict[str, str]
    start_offset: int = 0
    ranges: list[RangeInfo] = field(default_factory=list)


class PlacementDriver:
    """Stream → ranges metadata, persisted atomically in one file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.streams: dict[str, StreamMeta] = {}
        self.next_id = 1
        self._load()

    # ---- persistence -------------------------------------------------------------------
    def _load(self) -> None:
        self.path.with_name(self.path.name + ".tmp").unlink(missing_ok=True)
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return
        try:
            doc = json.loads(raw)
            if not isinstance(doc, dict):
                raise ValueError("not a JSON object")
            if doc.get("version") != FORMAT_VERSION:
                raise ValueError(f"unknown format version {doc.get('version')!r}")
            self.next_id = int(doc["next_id"])
            for name, s in doc["streams"].items():
                ranges = [
                    RangeInfo(int(r["index"]), int(r["start"]), r["end"], bool(r["sealed"]))
                    for r in s["ranges"]
                ]
                self.streams[name] = StreamMeta(
                    int(s["id"]), name, dict(s["config"]), int(s["start_offset"]), ranges
                )
            self._check()
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise StreamError(f"placement file {self.path} is unreadable: {exc}") from exc

    def _check(self) -> None:
        """ValueError unless the loaded streams are consistent: ids unique and below
        next_id (two streams with one id write into the same files; a new stream would be
        given one in use), every stream with at least one range, ranges in order with only
        the last one open."""
        seen: dict[int, str] = {}
        for name, meta in self.streams.items():
            if meta.id in seen:
                raise ValueError(f"streams {seen[meta.id]!r} and {name!r} share id {meta.id}")
            if not 0 < meta.id < self.next_id:
                raise ValueError(f"stream {name!r} has id {meta.id}, not below next_id {self.next_id}")
            seen[meta.id] = name
            if not meta.ranges:
                raise ValueError(f"stream {name!r} has no range")
            indexes = [r.index for r in meta.ranges]
            if indexes != sorted(set(indexes)):
                raise ValueError(f"stream {name!r} lists its ranges out of order: {indexes}")
            if any(r.end_offset is None for r in meta.ranges[:-1]):
                raise ValueError(f"stream {name!r} has an open range before its last")

    def _persist(self) -> None:
        doc: dict[str, Any] = {
            "version": FORMAT_VERSION,
            "next_id": self.next_id,
            "streams": {
                m.name: {
                    "id": m.id,
                    "config": m.config,
                    "start_offset": m.start_offset,
                    "ranges": [
                        {
                            "index": r.index,
                            "start": r.start_offset,
                            "end": r.end_offset,
                            "sealed": r.sealed,
                        }
                        for r in m.ranges
                    ],
                }
                for m in self.streams.values()
            },
        }
        data = json.dumps(doc, indent=1, sort_keys=True).encode()
        # (a write the disk refused part way leaves no temp file holding space that the
        # next write, or an undo, may need)
        replace_file(self.path, data, durable=True)

    # ---- operations (each persisted before it returns) ---------------------------------
    def get(self, name: str) -> StreamMeta:
        meta = self.streams.get(name)
        if meta is None:
            raise StreamNotFound(f"stream {name!r} does not exist")
        return meta

    def create_stream(self, name: str, config: dict[str, str]) -> StreamMeta:
        [meta] = self.plan_streams([(name, config)])
        self.add_streams([meta])
        return meta

    def plan_streams(self, specs: list[tuple[str, dict[str, str]]]) -> list[StreamMeta]:
        """The metadata new streams `specs` ((name, config) pairs) would get, ids included,
        without recording anything (`add_streams` does). StreamExists if a name is taken
        or given twice."""
        metas: list[StreamMeta] = []
        names: set[str] = set()
        for offset, (name, config) in enumerate(specs):
            if name in self.streams or name in names:
                raise StreamExists(f"stream {name!r} already exists")
            names.add(name)
            metas.append(StreamMeta(self.next_id + offset, name, dict(config), 0,
                                    [RangeInfo(0, 0, None, False)]))
        return metas

    def add_streams(self, metas: list[StreamMeta]) -> None:
        """Record streams just planned by `plan_streams`, all in one write: after a failure
        or a crash none of them exists."""
        if any(m.id != self.next_id + i or m.name in self.streams for i, m in enumerate(metas)):
            raise StreamError("streams were created since these were planned")
        for meta in metas:
            self.streams[meta.name] = meta
        self.next_id += len(metas)
        try:
            self._persist()
        except BaseException:
            for meta in metas:
                del self.streams[meta.name]
            self.next_id -= len(metas)
            raise

    def delete_stream(self, name: str) -> StreamMeta:
        [meta] = self.delete_streams([name])
        return meta

    def delete_streams(self, names: list[str]) -> list[StreamMeta]:
        """Forget streams `names`, all in one write (all or none); StreamNotFound if one
        does not exist."""
        metas = [self.get(name) for name in dict.fromkeys(names)]
        for meta in metas:
            del self.streams[meta.name]
        try:
            self._persist()
        except BaseException:
            for meta in metas:
                self.streams[meta.name] = meta
            raise
        return metas

    def update_config(self, name: str, config: dict[str, str]) -> None:
        meta = self.get(name)
        old = meta.config
        meta.config = dict(config)
        try:
            self._persist()
        except BaseException:
            meta.config = old
            raise

    def seal_range(self, name: str, end_offset: int) -> tuple[RangeInfo, RangeInfo]:
        """Seal the open range at `end_offset` and open the next one starting there."""
        meta = self.get(name)
        old = list(meta.ranges)
        open_range = old[-1]
        if end_offset < open_range.start_offset:
            raise StreamError(
                f"seal offset {end_offset} is before range start {open_range.start_offset}"
            )
        sealed = RangeInfo(open_range.index, open_range.start_offset, end_offset, True)
        fresh = RangeInfo(open_range.index + 1, end_offset, None, False)
        meta.ranges = [*old[:-1], sealed, fresh]
        try:
            self._persist()
        except BaseException:
            meta.ranges = old
            raise
        return sealed, fresh

    def advance_start(self, name: str, start_offset: int) -> list[RangeInfo]:
        """Move the log start forward; drop sealed ranges that end at or before it.

        Returns the dropped ranges. The open range is never dropped.
        """
        meta = self.get(name)
        if start_offset <= meta.start_offset:
            return []
        old_start, old_ranges = meta.start_offset, list(meta.ranges)
        dropped = [
            r for r in old_ranges[:-1] if r.end_offset is not None and r.end_offset <= start_offset
        ]
        meta.start_offset = start_offset
        meta.ranges = [r for r in old_ranges if r not in dropped]
        try:
            self._persist()
        except BaseException:
            meta.start_offset, meta.ranges = old_start, old_ranges
            raise
        return dropped
